package engine_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestCallerCopy: which groups the submitter copies (callercopy.go), and
// that their bytes, states and reports are those of the ring path.
func TestCallerCopy(t *testing.T) {
	needIOUring(t) // a build without io_uring refuses every file transfer
	fss := filesystems(t)
	shm, ok := fss["tmpfs"]
	if !ok {
		t.Skip("no tmpfs at /dev/shm")
	}
	e := newEngine(t, nil)
	limit := uint64(e.Config().CallerFastPathBytes)
	r := register(t, e, 4<<20)
	cases := []struct {
		name   string
		dir    string
		op     engine.Op
		req    engine.Request
		copied bool
	}{
		{"tmpfs 4 KiB read", shm, engine.OpRead, engine.Request{Address: r.BaseAddress(), TargetOffset: 8192, Length: 4096}, true},
		{"tmpfs write at the limit", shm, engine.OpWrite, engine.Request{Address: r.BaseAddress(), TargetOffset: 3, Length: limit}, true},
		{"tmpfs vector", shm, engine.OpRead, engine.Vector(engine.TransportUnspec, 100, engine.Range(r.BaseAddress(), 100), engine.Range(r.BaseAddress()+4096, 200)), true},
		{"tmpfs above the limit", shm, engine.OpRead, engine.Request{Address: r.BaseAddress(), Length: limit + 1}, false},
		{"tmpfs explicit io_uring", shm, engine.OpRead, engine.Request{Transport: engine.TransportIOUring, Address: r.BaseAddress(), Length: 4096}, false},
		{"tmpfs vector with padding", shm, engine.OpRead, engine.Vector(engine.TransportUnspec, 0, engine.Range(r.BaseAddress(), 100), engine.Pad(10)), false},
	}
	if ext4, ok := fss["ext4"]; ok {
		cases = append(cases, struct {
			name   string
			dir    string
			op     engine.Op
			req    engine.Request
			copied bool
		}{"ext4 4 KiB read", ext4, engine.OpRead, engine.Request{Address: r.BaseAddress(), Length: 4096}, false})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, orig := randomFile(t, c.dir, "f", 2<<20)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			defer e.CloseFileSegment(seg, ioTimeout)
			mem := make([]byte, 2<<20)
			for i := range mem {
				mem[i] = byte(i * 7)
			}
			if _, err := r.WriteAt(mem, 0); err != nil {
				t.Fatal(err)
			}
			before := e.Stats()
			b, err := e.AllocateBatch(1)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			if _, err := b.Submit(c.op, seg, []engine.Request{c.req}, nil, ioTimeout); err != nil {
				t.Fatal(err)
			}
			b.Seal()
			if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
				t.Fatalf("state %v, %v", st, err)
			}
			ts, _ := b.TaskStatus(0)
			after := e.Stats()
			copied := after.CallerCopies - before.CallerCopies
			wantKind := engine.TransportIOUring
			if c.copied {
				wantKind = engine.TransportCopy
			}
			if (copied == 1) != c.copied || ts.Transport != wantKind {
				t.Fatalf("caller copies +%d, transport %v; want copied=%v", copied, ts.Transport, c.copied)
			}
			if c.copied && after.WorkersStarted != before.WorkersStarted {
				t.Fatalf("a caller copy started a worker (%d -> %d)", before.WorkersStarted, after.WorkersStarted)
			}
			// The bytes: compare the whole file or region with what the
			// request moved, element by element.
			file, _ := os.ReadFile(path)
			got := regionBytes(t, r)
			off := c.req.TargetOffset
			elems := c.req.Elements
			if elems == nil {
				elems = []engine.Element{engine.Range(c.req.Address, c.req.Length)}
			}
			for _, el := range elems {
				if el.Padding > 0 {
					off += el.Padding
					continue
				}
				m := el.Address - r.BaseAddress()
				switch c.op {
				case engine.OpRead:
					if !bytes.Equal(got[m:m+el.Length], orig[off:off+el.Length]) {
						t.Fatalf("memory at %d differs from the file at %d", m, off)
					}
				case engine.OpWrite:
					if !bytes.Equal(file[off:off+el.Length], mem[m:m+el.Length]) {
						t.Fatalf("file at %d differs from memory at %d", off, m)
					}
				}
				if ts.Transferred != c.req.Length && c.req.Elements == nil {
					t.Fatalf("transferred %d of %d", ts.Transferred, c.req.Length)
				}
				off += el.Length
			}
		})
	}
}

// TestCallerCopyKeepsFences: a small read of bytes a large write still in
// flight is writing must wait for it, not copy ahead of it. The write is
// held in flight deterministically (dispatched, its op chosen, its bytes
// not yet handed to the kernel) while the read is submitted; the read
// is caller-copy eligible in every other respect.
func TestCallerCopyKeepsFences(t *testing.T) {
	shm := tmpfsDir(t)
	spy := &spyTransport{FileTransport: realTransports(config.DefaultEngine())[0].(engine.FileTransport)}
	e := newEngine(t, func(c *config.Engine) { c.MaxTransferBytes = 64 << 20 }, spy)
	const n = 32 << 20
	path, _ := randomFile(t, shm, "f", n)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	src := register(t, e, n)
	dst := register(t, e, 4096)
	pattern := bytes.Repeat([]byte{0xa5}, n)
	if _, err := src.WriteAt(pattern, 0); err != nil {
		t.Fatal(err)
	}
	h := holdFirstWrite(spy)
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	// io_uring: on the ring (a 32 MiB tmpfs request left to the engine
	// goes to the host copy lanes), where the spy holds it.
	go b.Submit(engine.OpWrite, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: src.BaseAddress(), Length: n}}, nil, ioTimeout)
	<-h.held
	if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: dst.BaseAddress(), TargetOffset: n - 4096, Length: 4096}}, nil, ioTimeout); err != nil {
		close(h.release)
		t.Fatal(err)
	}
	ts, _ := b.TaskStatus(1)
	copies := e.Stats().CallerCopies
	close(h.release)
	if ts.State == engine.TaskCompleted || copies != 0 {
		t.Errorf("read %v, caller copies %d: the read was copied while the write of its bytes was held", ts.State, copies)
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v, %v", st, err)
	}
	if got := regionBytes(t, dst); !bytes.Equal(got, pattern[:4096]) {
		t.Fatal("the read ran ahead of the write it overlaps")
	}
}

// TestCallerCopyWaitsForOverlappingRead: a small read into memory that a
// read still in flight is filling must wait for it, not copy ahead of it
// (a later group's bytes land last). With only reads in flight the
// caller copy does not look at each of them: the memory overlap is
// refused by the loans the read in flight holds. That read is held in
// flight deterministically (dispatched, its op chosen, its bytes not yet
// handed to the kernel) while the second is submitted.
func TestCallerCopyWaitsForOverlappingRead(t *testing.T) {
	shm := tmpfsDir(t)
	spy := &spyTransport{FileTransport: realTransports(config.DefaultEngine())[0].(engine.FileTransport)}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	spy.onPrepare = func(*engine.FileOp) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(held)
			<-release
		}
	}
	e := newEngine(t, nil, spy)
	path, orig := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	dst := register(t, e, 4096)
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	go b.Submit(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: dst.BaseAddress(), Length: 4096}}, nil, ioTimeout)
	<-held
	if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: dst.BaseAddress(), TargetOffset: 8192, Length: 4096}}, nil, ioTimeout); err != nil {
		close(release)
		t.Fatal(err)
	}
	ts, _ := b.TaskStatus(1)
	copies := e.Stats().CallerCopies
	close(release)
	if ts.State == engine.TaskCompleted || copies != 0 {
		t.Errorf("second read %v, caller copies %d: it was copied while the read into its memory was held", ts.State, copies)
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v, %v", st, err)
	}
	if got := regionBytes(t, dst); !bytes.Equal(got, orig[8192:8192+4096]) {
		t.Fatal("the memory holds the first read's bytes: the second ran ahead of it")
	}
}

// TestCallerCopyHonoursDeadline: a group whose deadline has already
// passed when it would be dispatched fails with KindTimeout before any
// I/O, on the caller copy as on the ring: a WRITE must not change the
// file after its deadline.
func TestCallerCopyHonoursDeadline(t *testing.T) {
	needIOUring(t)
	fss := filesystems(t)
	shm, ok := fss["tmpfs"]
	if !ok {
		t.Skip("no tmpfs at /dev/shm")
	}
	e := newEngine(t, nil)
	path, orig := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	r := register(t, e, 4096)
	if _, err := r.WriteAt(bytes.Repeat([]byte{0x5a}, 4096), 0); err != nil {
		t.Fatal(err)
	}
	b, err := e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	past := engine.SubmitOptions{Timeout: ioTimeout, Deadline: time.Now().Add(-time.Second)}
	if _, err := b.SubmitWith(engine.OpWrite, seg, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, past); err != nil {
		t.Fatal(err)
	}
	wantTimedOutWrite(t, b, path, orig, "a WRITE past its deadline")
}

// TestOversizedGroupCountsNothing: a group larger than the whole
// max_inflight_bytes is refused before it takes a group slot, so it can
// never make a concurrent submission fail for max_inflight_batches.
func TestOversizedGroupCountsNothing(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, func(c *config.Engine) { c.MaxInflightBytes, c.MaxTransferBytes = 1<<20, 1<<20 })
	path, _ := randomFile(t, t.TempDir(), "f", 4<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 4<<20)
	// Two requests of 1 MiB: each within max_transfer_bytes, together
	// twice the budget.
	reqs := []engine.Request{{Address: r.BaseAddress(), Length: 1 << 20}, {Address: r.BaseAddress() + 1<<20, TargetOffset: 1 << 20, Length: 1 << 20}}
	_, err := e.SubmitAndWait(engine.OpRead, seg, reqs, ioTimeout)
	wantKind(t, err, engine.KindExhausted)
	if !strings.Contains(err.Error(), "on their own") {
		t.Fatalf("error %q does not say the group alone exceeds the budget", err)
	}
	if st := e.Stats(); st.InflightGroups != 0 || st.InflightBytes != 0 {
		t.Fatalf("in flight after a refused group: %d groups, %d bytes", st.InflightGroups, st.InflightBytes)
	}
}

// TestCallerCopyReportNotStranded: a caller copy that finishes while
// another goroutine is running the batch's OnGroupDone hook leaves its
// report to that deliverer (hooks run one at a time, in finishing
// order), and the deliverer hands it over once the hook returns, with no
// further Submit to prompt it. The first hook is held until the second
// Submit has returned, so the second report is deterministically queued
// behind a busy deliverer.
func TestCallerCopyReportNotStranded(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	path, _ := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	defer e.CloseFileSegment(seg, ioTimeout)
	r := register(t, e, 8192)
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	inFirst, release := make(chan struct{}), make(chan struct{})
	reports := make(chan int, 2)
	var running atomic.Int32
	b.OnGroupDone(func(rep engine.Report) {
		if running.Add(1) != 1 {
			t.Errorf("two hooks ran at once")
		}
		if rep.Err != nil {
			t.Errorf("task %d: %v", rep.Tasks.First, rep.Err)
		}
		if rep.Tasks.First == 0 {
			close(inFirst)
			<-release
		}
		running.Add(-1)
		reports <- rep.Tasks.First
	})
	before := e.Stats().CallerCopies
	submit := func(i uint64) {
		if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096}}, nil, ioTimeout); err != nil {
			t.Error(err)
		}
	}
	go submit(0) // delivers its own report and holds in the hook
	<-inFirst
	submit(1) // finishes while the first hook runs: left to its deliverer
	if got := e.Stats().CallerCopies - before; got != 2 {
		t.Fatalf("%d caller copies, want 2", got)
	}
	select {
	case i := <-reports:
		t.Fatalf("report of task %d delivered while the first hook was still running", i)
	default:
	}
	close(release)
	for want := 0; want < 2; want++ {
		select {
		case i := <-reports:
			if i != want {
				t.Fatalf("report of task %d, want task %d (finishing order)", i, want)
			}
		case <-time.After(ioTimeout):
			t.Fatalf("report of task %d never delivered", want)
		}
	}
}

// TestCallerCopySettlesBeforeFinish: a caller copy that moved every byte
// returns its loans once the copy is done, before its finish takes the
// batch's lock (callercopy.go), and nothing else: held between the two,
// its task still reads running, a group of another batch on the same
// memory is granted it (with the loans still held it would fail busy),
// and the segment's close still waits for the held group, which then
// completes with its bytes.
func TestCallerCopySettlesBeforeFinish(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	path, orig := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 4096)
	copied, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	e.HoldCopiedCallerCopies(func() {
		if first.CompareAndSwap(false, true) { // hold only the first
			close(copied)
			<-release
		}
	})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	b1, err := e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Free()
	req := engine.Request{Address: r.BaseAddress(), TargetOffset: 0, Length: 4096}
	go b1.Submit(engine.OpRead, seg, []engine.Request{req}, nil, ioTimeout)
	<-copied
	if ts, err := b1.TaskStatus(0); err != nil || ts.State != engine.TaskRunning {
		t.Fatalf("held after its copy: task %v, %v; want running until the finish", ts.State, err)
	}
	b2, err := e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Free()
	req.TargetOffset = 8192
	if _, err := b2.Submit(engine.OpRead, seg, []engine.Request{req}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	b2.Seal()
	if st, err := b2.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		ts, _ := b2.TaskStatus(0)
		t.Fatalf("a group on the held copy's memory: %v, %v (%v): its loans were not returned after the copy", st, err, ts.Err)
	}
	if err := e.CloseFileSegment(seg, 50*time.Millisecond); !errors.Is(err, engine.ErrTimeout) {
		t.Fatalf("close while the copy's finish is held: %v, want it to wait for the group (ErrTimeout)", err)
	}
	released = true
	close(release)
	b1.Seal()
	if st, err := b1.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("held copy: %v, %v", st, err)
	}
	if err := e.CloseFileSegment(seg, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if got := regionBytes(t, r); !bytes.Equal(got, orig[8192:8192+4096]) {
		t.Fatal("memory does not hold the later group's bytes")
	}
}

// TestCallerCopyExpiresBeforeLateCopy: a caller copy dispatched in time
// whose copy then starts past its deadline (held here before the copy,
// as a combining submitter may be) fails with ErrTimeout and moves
// nothing: a WRITE leaves the file as it was.
func TestCallerCopyExpiresBeforeLateCopy(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	path, orig := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	defer e.CloseFileSegment(seg, ioTimeout)
	r := register(t, e, 4096)
	if _, err := r.WriteAt(bytes.Repeat([]byte{0x5a}, 4096), 0); err != nil {
		t.Fatal(err)
	}
	const timeout = 50 * time.Millisecond
	e.HoldCallerCopies(func() { time.Sleep(2 * timeout) })
	b, err := e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if _, err := b.Submit(engine.OpWrite, seg, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, timeout); err != nil {
		t.Fatal(err)
	}
	wantTimedOutWrite(t, b, path, orig, "a WRITE whose copy started past its deadline")
}

// wantTimedOutWrite seals b, whose one WRITE group on path must fail
// with ErrTimeout, and checks that the file still holds orig; what names
// the WRITE in the failure.
func wantTimedOutWrite(t *testing.T, b *engine.Batch, path string, orig []byte, what string) {
	t.Helper()
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateFailed {
		t.Fatalf("state %v, %v; want failed", st, err)
	}
	if rep := b.Submissions()[0]; !errors.Is(rep.Err, engine.ErrTimeout) {
		t.Fatalf("report error %v; want ErrTimeout", rep.Err)
	}
	if file, _ := os.ReadFile(path); !bytes.Equal(file, orig) {
		t.Fatalf("%s changed the file", what)
	}
}
