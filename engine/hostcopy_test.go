package engine_test

// hostcopy_test.go: which requests the host copy lanes take, and that a
// large one is cut into units across them.

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestHostCopyRoutes: a single-range host request of one 4 MiB unit or
// more on an in-memory file goes to the host copy lanes, cut into units
// (one 256 MiB buffered READ was one SQE copied by one thread), but for
// one of exactly a unit alone in its group, which its caller copies; so
// does each request of host_copy_min_bytes or more in a group of
// several (a KV batch); a lone request under a unit, smaller ones, disk
// files, an explicit io_uring, host_copy_min_bytes 0 and the runtime
// queue keep the ring; a small vector in the same group rides along.
func TestHostCopyRoutes(t *testing.T) {
	needIOUring(t)
	fss := filesystems(t)
	shm, ok := fss["tmpfs"]
	if !ok {
		t.Skip("no tmpfs at /dev/shm")
	}
	const big = 12 << 20 // three units
	twoMiB := func(base uint64) []engine.Request {
		return []engine.Request{{Address: base, Length: 1 << 20}, {Address: base + 1<<20, TargetOffset: 1 << 20, Length: 1 << 20}}
	}
	cases := []struct {
		name  string
		dir   string
		cfg   func(*config.Engine) // nil: the defaults
		reqs  func(base uint64) []engine.Request
		want  engine.TransportKind
		units uint64
	}{
		{"tmpfs 12 MiB", shm, nil, func(base uint64) []engine.Request { return []engine.Request{{Address: base, Length: big}} }, engine.TransportCopy, 3},
		{"tmpfs exactly one unit alone: its caller copies it", shm, nil, func(base uint64) []engine.Request { return []engine.Request{{Address: base, Length: 4 << 20}} }, engine.TransportCopy, 0},
		{"tmpfs just under one unit keeps the ring", shm, nil, func(base uint64) []engine.Request { return []engine.Request{{Address: base, Length: 4<<20 - 4096}} }, engine.TransportIOUring, 0},
		{"tmpfs two requests of one unit", shm, nil, func(base uint64) []engine.Request {
			return []engine.Request{{Address: base, Length: 4 << 20}, {Address: base + 4<<20, TargetOffset: 4 << 20, Length: 4 << 20}}
		}, engine.TransportCopy, 2},
		{"tmpfs two 1 MiB requests: the lanes", shm, nil, twoMiB, engine.TransportCopy, 2},
		{"tmpfs two 1 MiB requests with host_copy_min_bytes 0 keep the ring", shm, func(c *config.Engine) { c.HostCopyMinBytes = 0 }, twoMiB, engine.TransportIOUring, 0},
		{"tmpfs two requests under host_copy_min_bytes keep the ring", shm, nil, func(base uint64) []engine.Request {
			return []engine.Request{{Address: base, Length: 128<<10 - 4096}, {Address: base + 128<<10, TargetOffset: 128 << 10, Length: 128<<10 - 4096}}
		}, engine.TransportIOUring, 0},
		{"tmpfs two requests of exactly host_copy_min_bytes: the lanes", shm, nil, func(base uint64) []engine.Request {
			return []engine.Request{{Address: base, Length: 128 << 10}, {Address: base + 128<<10, TargetOffset: 512 << 10, Length: 128 << 10}}
		}, engine.TransportCopy, 2},
		{"tmpfs a 4 KiB request beside two 1 MiB ones: the whole group keeps the ring", shm, nil, func(base uint64) []engine.Request {
			return append(twoMiB(base), engine.Request{Address: base + 2<<20, TargetOffset: 2 << 20, Length: 4096})
		}, engine.TransportIOUring, 0},
		{"tmpfs an explicit io_uring request beside two 1 MiB ones: the whole group keeps the ring", shm, nil, func(base uint64) []engine.Request {
			return append(twoMiB(base), engine.Request{Transport: engine.TransportIOUring, Address: base + 2<<20, TargetOffset: 2 << 20, Length: 1 << 20})
		}, engine.TransportIOUring, 0},
		{"tmpfs one 1 MiB request alone keeps the ring", shm, nil, func(base uint64) []engine.Request { return []engine.Request{{Address: base, Length: 1 << 20}} }, engine.TransportIOUring, 0},
		{"tmpfs explicit io_uring", shm, nil, func(base uint64) []engine.Request {
			return []engine.Request{{Transport: engine.TransportIOUring, Address: base, Length: big}}
		}, engine.TransportIOUring, 0},
		{"tmpfs with the runtime queue", shm, func(c *config.Engine) { c.RuntimeQueue.Enabled = true }, func(base uint64) []engine.Request { return []engine.Request{{Address: base, Length: big}} }, engine.TransportIOUring, 0},
		{"tmpfs with a padded vector", shm, nil, func(base uint64) []engine.Request {
			return []engine.Request{{Address: base, Length: big - 8192},
				engine.Vector(engine.TransportUnspec, big-8192, engine.Range(base+big-8192, 4096), engine.Pad(100), engine.Range(base+big-4096+100, 4096-100))}
		}, engine.TransportCopy, 3 + 3},
	}
	if ext4, ok := fss["ext4"]; ok {
		cases = append(cases, struct {
			name  string
			dir   string
			cfg   func(*config.Engine)
			reqs  func(base uint64) []engine.Request
			want  engine.TransportKind
			units uint64
		}{"ext4 12 MiB", ext4, nil, func(base uint64) []engine.Request { return []engine.Request{{Address: base, Length: big}} }, engine.TransportIOUring, 0})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, func(cfg *config.Engine) {
				cfg.MaxTransferBytes = 64 << 20
				if c.cfg != nil {
					c.cfg(cfg)
				}
			})
			path, orig := randomFile(t, c.dir, "f", big)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			r := register(t, e, big)
			reqs := c.reqs(r.BaseAddress())
			want := make([]byte, big) // memory starts zeroed
			moveBytes(reqs, r.BaseAddress(), want, orig, engine.OpRead)
			// submit runs reqs as op and checks every task's transport
			// and the host copy units it took.
			submit := func(op engine.Op) {
				t.Helper()
				before := e.Stats().HostCopyUnits
				b, err := e.SubmitAsync(op, seg, reqs, nil, ioTimeout)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free()
				if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
					ts, _ := b.TaskStatus(0)
					t.Fatalf("%s: %v %v %v", op, st, err, ts.Err)
				}
				for _, ts := range b.TaskStatuses() {
					if ts.Transport != c.want {
						t.Fatalf("%s: task %d over %v, want %v", op, ts.Index, ts.Transport, c.want)
					}
				}
				if n := e.Stats().HostCopyUnits - before; n != c.units {
					t.Fatalf("%s: %d host copy units, want %d", op, n, c.units)
				}
			}
			submit(engine.OpRead)
			if got := regionBytes(t, r); !bytes.Equal(got, want) {
				t.Fatal("READ: memory differs from the file")
			}
			// And back: WRITE the memory over a zeroed file.
			if err := os.WriteFile(path, make([]byte, big), 0o644); err != nil {
				t.Fatal(err)
			}
			submit(engine.OpWrite)
			file := make([]byte, big)
			moveBytes(reqs, r.BaseAddress(), regionBytes(t, r), file, engine.OpWrite)
			if back, _ := os.ReadFile(path); !bytes.Equal(back, file) {
				t.Fatal("WRITE: the file differs from memory")
			}
		})
	}
}

// moveBytes applies reqs (memory at base) between mem and file as the
// engine should: a READ fills ranges from the file and skips padding, a
// WRITE writes ranges and zeros for padding.
func moveBytes(reqs []engine.Request, base uint64, mem, file []byte, op engine.Op) {
	for _, r := range reqs {
		els := r.Elements
		if len(els) == 0 {
			els = []engine.Element{engine.Range(r.Address, r.Length)}
		}
		at := r.TargetOffset
		for _, el := range els {
			switch {
			case el.Padding != 0 && op == engine.OpWrite:
				clear(file[at : at+el.Padding])
			case el.Padding != 0:
			case op == engine.OpWrite:
				copy(file[at:at+el.Length], mem[el.Address-base:])
			default:
				copy(mem[el.Address-base:el.Address-base+el.Length], file[at:])
			}
			at += el.Length + el.Padding
		}
	}
}

// TestHostCopyBulkGroup: a group of 4096 large requests on tmpfs goes to
// the host copy lanes, which it gets a queue depth of tasks at a time:
// while those are held on the lanes, the rest are still pending, and
// cancel_all ends every one of them without a byte moved.
func TestHostCopyBulkGroup(t *testing.T) {
	shm := tmpfsDir(t)
	const n, each, depth = 4096, 4 << 20, 16
	e := newEngine(t, func(cfg *config.Engine) {
		cfg.IOUring.QueueDepth = depth
		cfg.MaxInflightBytes = config.Size(n * each)
	})
	path, orig := randomFile(t, shm, "f", each)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, each)
	held, release := make(chan struct{}, n*4), make(chan struct{})
	e.HoldUnits(func(int) {
		held <- struct{}{}
		<-release
	})
	reqs := make([]engine.Request, n)
	for i := range reqs {
		reqs[i] = engine.Request{Address: r.BaseAddress(), Length: each}
	}
	b, err := e.SubmitAsync(engine.OpRead, seg, reqs, nil, ioTimeout)
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	<-held
	if ts, _ := b.TaskStatus(n - 1); ts.State != engine.TaskPending || ts.Transport != engine.TransportCopy {
		close(release)
		t.Fatalf("last task while the first are held on the lanes: %v over %v, want pending over copy", ts.State, ts.Transport)
	}
	if err := b.CancelAll(); err != nil {
		close(release)
		t.Fatal(err)
	}
	close(release)
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	for _, ts := range b.TaskStatuses() {
		switch {
		case ts.Index < depth && (ts.State != engine.TaskCompleted || ts.Transport != engine.TransportCopy):
			t.Fatalf("task %d, handed to the lanes: %v over %v (%v), want completed over copy", ts.Index, ts.State, ts.Transport, ts.Err)
		case ts.Index >= depth && (ts.State != engine.TaskCancelled || ts.Transferred != 0):
			t.Fatalf("task %d, not handed out: %v with %d bytes, want cancelled with none", ts.Index, ts.State, ts.Transferred)
		}
	}
	if got := e.Stats().HostCopyUnits; got != depth {
		t.Fatalf("%d units copied, want %d (one per task handed out)", got, depth)
	}
	got := make([]byte, each)
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("memory differs from the file (%v)", err)
	}
}

// TestHostCopyGroupsOfOneBatchOverlap: a host copy group submitted to a
// batch while another of its host copy groups is on a lane is dispatched
// by its Submit and starts on the next lane. A batch worker without a
// ring sleeps until an off-ring completion pokes it (or a second
// passes); the second group used to wait there for the first one's end,
// so two host copy groups of one batch ran one at a time (4 MiB reads
// at queue depth 2 on two cores: 11 GB/s against the pread loop's 22).
// The first unit is held on its lane, and the worker given time to fall
// asleep, before the second group is submitted.
func TestHostCopyGroupsOfOneBatchOverlap(t *testing.T) {
	shm := tmpfsDir(t)
	if runtime.GOMAXPROCS(0) < 2 { // one lane per P: two lanes at least
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	const each = 8 << 20 // two units: a lone single unit is a caller copy
	e := newEngine(t, nil)
	path, orig := randomFile(t, shm, "f", 2*each)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 2*each)
	held, release := make(chan int, 8), make(chan struct{})
	var first atomic.Bool
	e.HoldUnits(func(task int) {
		held <- task
		if first.CompareAndSwap(false, true) {
			<-release // the first unit only: the other lanes stay free
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	submit := func(i int) {
		t.Helper()
		req := []engine.Request{{Address: r.BaseAddress() + uint64(i*each), TargetOffset: uint64(i * each), Length: each}}
		if _, err := b.Submit(engine.OpRead, seg, req, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
	}
	submit(0)
	if got := <-held; got != 0 {
		t.Fatalf("first unit held is task %d, want 0", got)
	}
	time.Sleep(50 * time.Millisecond) // the worker sleeps on its next wake-up
	submit(1)
	// Dispatched by its Submit: running at once (or already completed:
	// its units are not held), not queued until the first group's end.
	for end := time.Now().Add(200 * time.Millisecond); ; {
		ts, err := b.TaskStatus(1)
		if err != nil {
			t.Fatal(err)
		}
		if ts.State == engine.TaskRunning || ts.State == engine.TaskCompleted {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("second group %v 200ms after its Submit while the first is on a lane, want running or completed", ts.State)
		}
		time.Sleep(time.Millisecond)
	}
	for started := false; !started; {
		select {
		case got := <-held:
			started = got == 1 // the first group's other unit may come first
		case <-time.After(ioTimeout):
			t.Fatalf("the second group did not start on a lane in %s while the first was held", ioTimeout)
		}
	}
	close(release)
	if err := b.Seal(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	for _, ts := range b.TaskStatuses() {
		if ts.State != engine.TaskCompleted || ts.Transport != engine.TransportCopy {
			t.Fatalf("task %d: %v over %v (%v), want completed over copy", ts.Index, ts.State, ts.Transport, ts.Err)
		}
	}
	got := make([]byte, 2*each)
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("memory differs from the file (%v)", err)
	}
}

// TestHostCopyShrunkFile: a read on the host copy lanes that meets the
// end of a file shrunk behind the engine's back fails with its exact
// count, and lowers the size the engine range-checks against, as a
// short ring read does (TestRangeCheckFollowsSize): the next read past
// the end is refused at submit, naming the size.
func TestHostCopyShrunkFile(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	r := register(t, e, 1<<20)
	path, orig := randomFile(t, shm, "f", 512<<10)
	seg := openSeg(t, e, path, engine.PermRead)
	// Two 128 KiB groups: file offsets 0 and 256 KiB, a KV batch the
	// lanes take.
	reqs := []engine.Request{{Address: r.BaseAddress(), Length: 128 << 10}, {Address: r.BaseAddress() + 128<<10, TargetOffset: 256 << 10, Length: 128 << 10}}
	if err := os.Truncate(path, 300000); err != nil {
		t.Fatal(err)
	}
	b, err := e.SubmitAsync(engine.OpRead, seg, reqs, nil, ioTimeout)
	if err != nil {
		t.Fatalf("first read past the new end refused at submit (%v): the size was not seen yet", err)
	}
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	ts := b.TaskStatuses()
	b.Free()
	if ts[0].State != engine.TaskCompleted || ts[0].Transport != engine.TransportCopy {
		t.Fatalf("the group inside the file: %v over %v, %v", ts[0].State, ts[0].Transport, ts[0].Err)
	}
	if want := uint64(300000 - 256<<10); ts[1].State != engine.TaskFailed || engine.KindOf(ts[1].Err) != engine.KindRange || ts[1].Transferred != want {
		t.Fatalf("the group past the new end: %v, %d bytes, %v; want failed, KindRange, %d bytes", ts[1].State, ts[1].Transferred, ts[1].Err, want)
	}
	if got := regionBytes(t, r)[128<<10 : 128<<10+300000-256<<10]; !bytes.Equal(got, orig[256<<10:300000]) {
		t.Fatal("the prefix before end of file read back wrong")
	}
	_, err = e.SubmitAsync(engine.OpRead, seg, reqs, nil, ioTimeout)
	wantKind(t, err, engine.KindRange)
	if !strings.Contains(err.Error(), "beyond file size 300000") {
		t.Errorf("second read past the end: %v, want the size named", err)
	}
}
