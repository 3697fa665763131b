package engine_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// ioTimeout bounds transfers on the real disk. It is generous because
// other tests (and benchmarks) may share the disk: a 4 KiB O_DIRECT write
// was seen taking 900 ms here while fio ran beside the tests.
const ioTimeout = 60 * time.Second

func TestRoundTrip(t *testing.T) {
	needIOUring(t)
	cases := []struct {
		name            string
		memOff, fileOff uint64
		length          uint64
		direct          bool // expected to use the O_DIRECT fd on ext4
	}{
		{"aligned-4k", 0, 0, 4096, true},
		{"aligned-1m", 4096, 1 << 20, 1 << 20, true},
		{"unaligned-offset", 0, 8, 4, false},
		{"unaligned-address", 3, 4096, 4096, false},
		{"unaligned-length", 0, 0, 5000, false},
	}
	for fsName, dir := range filesystems(t) {
		t.Run(fsName, func(t *testing.T) {
			cfg := config.DefaultEngine()
			spy := &spyTransport{FileTransport: realTransports(cfg)[0].(engine.FileTransport)}
			e := newEngine(t, func(c *config.Engine) { c.CallerCopy = false }, spy) // the ring's ops
			path, _ := randomFile(t, dir, "f", 4<<20)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			info, err := e.FileSegmentInfo(seg)
			if err != nil {
				t.Fatal(err)
			}
			if want := fsName == "ext4"; info.DirectIO != want {
				t.Fatalf("direct_io = %v on %s, want %v", info.DirectIO, fsName, want)
			}
			src := register(t, e, 2<<20)
			dst := register(t, e, 2<<20)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					payload := make([]byte, c.length)
					rand.Read(payload)
					if _, err := src.WriteAt(payload, int64(c.memOff)); err != nil {
						t.Fatal(err)
					}
					spy.take()
					rep, err := e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{{Address: src.BaseAddress() + c.memOff, TargetOffset: c.fileOff, Length: c.length}}, ioTimeout)
					if err != nil {
						t.Fatalf("write: %v (%+v)", err, rep)
					}
					ops := spy.take()
					if wantDirect := c.direct && fsName == "ext4"; len(ops) != 1 || ops[0].direct != wantDirect {
						t.Fatalf("write ops %+v, want one with O_DIRECT=%v", ops, wantDirect)
					}
					if rep.CompletedRequests != 1 || rep.CompletedBytes != c.length || rep.RequestIndex != -1 || !rep.LocallyDrained {
						t.Fatalf("write report %+v", rep)
					}
					onDisk, _ := os.ReadFile(path)
					if !bytes.Equal(onDisk[c.fileOff:c.fileOff+c.length], payload) {
						t.Fatal("file bytes differ from the written payload")
					}
					rep, err = e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: dst.BaseAddress() + c.memOff, TargetOffset: c.fileOff, Length: c.length}}, ioTimeout)
					if err != nil {
						t.Fatalf("read: %v", err)
					}
					got := regionBytes(t, dst)[c.memOff : c.memOff+c.length]
					if !bytes.Equal(got, payload) {
						t.Fatal("read bytes differ from the file")
					}
				})
			}
			st := e.Stats()
			if st.IOUring == nil || st.IOUring.Submitted == 0 {
				t.Fatalf("io_uring counters not moving: %+v", st.IOUring)
			}
			if fsName == "ext4" && st.IOUring.FixedOps == 0 {
				t.Errorf("aligned ext4 I/O used no fixed buffers: %+v", st.IOUring)
			}
		})
	}
}

func TestVectors(t *testing.T) {
	needIOUring(t)
	type el struct {
		mem uint64 // offset in the region; ignored for padding
		n   uint64
		pad bool
	}
	cases := []struct {
		name  string
		elems []el
	}{
		{"leading-padding", []el{{pad: true, n: 512}, {mem: 0, n: 4096}}},
		{"middle-padding", []el{{mem: 0, n: 4096}, {pad: true, n: 512}, {mem: 8192, n: 4096}}},
		{"trailing-padding", []el{{mem: 100, n: 3000}, {pad: true, n: 7}}},
		{"consecutive-padding", []el{{pad: true, n: 10}, {pad: true, n: 20}, {mem: 0, n: 30}}},
		{"padding-only", []el{{pad: true, n: 4096}, {pad: true, n: 4096}}},
		{"aligned-no-padding", []el{{mem: 0, n: 4096}, {mem: 16384, n: 8192}}},
	}
	for fsName, dir := range filesystems(t) {
		t.Run(fsName, func(t *testing.T) {
			e := newEngine(t, nil)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					path, orig := randomFile(t, dir, c.name, 64<<10)
					seg := openSeg(t, e, path, engine.PermReadWrite)
					src := register(t, e, 64<<10)
					srcBytes := make([]byte, 64<<10)
					rand.Read(srcBytes)
					src.WriteAt(srcBytes, 0)
					const fileOff = 4096
					var elems []engine.Element
					want := append([]byte(nil), orig...)
					pos := uint64(fileOff)
					for _, x := range c.elems {
						if x.pad {
							elems = append(elems, engine.Pad(x.n))
							for i := uint64(0); i < x.n; i++ {
								want[pos+i] = 0
							}
						} else {
							elems = append(elems, engine.Range(src.BaseAddress()+x.mem, x.n))
							copy(want[pos:], srcBytes[x.mem:x.mem+x.n])
						}
						pos += x.n
					}
					rep, err := e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{engine.Vector(engine.TransportUnspec, fileOff, elems...)}, ioTimeout)
					if err != nil {
						t.Fatalf("vector write: %v (%+v)", err, rep)
					}
					if rep.CompletedBytes != pos-fileOff {
						t.Fatalf("completed bytes %d, want %d", rep.CompletedBytes, pos-fileOff)
					}
					got, _ := os.ReadFile(path)
					if !bytes.Equal(got, want) {
						t.Fatal("file after vectored write differs (padding must write zeros, ranges their bytes)")
					}

					// Read the file back into a fresh region: ranges get the
					// file bytes, padding is discarded, other bytes untouched.
					dst := register(t, e, 64<<10)
					fill := bytes.Repeat([]byte{0xAB}, 64<<10)
					dst.WriteAt(fill, 0)
					var relems []engine.Element
					wantDst := append([]byte(nil), fill...)
					pos = fileOff
					for _, x := range c.elems {
						if x.pad {
							relems = append(relems, engine.Pad(x.n))
						} else {
							relems = append(relems, engine.Range(dst.BaseAddress()+x.mem, x.n))
							copy(wantDst[x.mem:x.mem+x.n], got[pos:pos+x.n])
						}
						pos += x.n
					}
					if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{engine.Vector(engine.TransportUnspec, fileOff, relems...)}, ioTimeout); err != nil {
						t.Fatalf("vector read: %v", err)
					}
					if !bytes.Equal(regionBytes(t, dst), wantDst) {
						t.Fatal("region after vectored read differs")
					}
				})
			}
		})
	}
}

// TestVectorLimits: 1024 elements are accepted and executed (on the real
// ring too, where one readv of 1024 iovecs meets the kernel's IOV_MAX),
// 1025 are refused before any I/O.
func TestVectorLimits(t *testing.T) {
	for name, transports := range map[string]func() []engine.Transport{
		"reference": func() []engine.Transport { return []engine.Transport{&refTransport{}} },
		"io_uring":  func() []engine.Transport { return realTransports(config.DefaultEngine()) },
	} {
		t.Run(name, func(t *testing.T) {
			if name == "io_uring" {
				needIOUring(t)
			}
			testVectorLimits(t, newEngine(t, nil, transports()...))
		})
	}
}

func testVectorLimits(t *testing.T, e *engine.Engine) {
	path, data := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	r := register(t, e, 1<<20)
	elems := make([]engine.Element, 1024)
	for i := range elems {
		// Every other byte of the region, so the 1024 iovecs stay distinct.
		elems[i] = engine.Range(r.BaseAddress()+uint64(2*i), 1)
	}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{engine.Vector(0, 0, elems...)}, ioTimeout); err != nil {
		t.Fatalf("1024 elements must be accepted: %v", err)
	}
	got := regionBytes(t, r)
	for i := range elems {
		if got[2*i] != data[i] {
			t.Fatalf("element %d: byte %#x, want file byte %#x", i, got[2*i], data[i])
		}
	}
	_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{engine.Vector(0, 0, append(elems, engine.Pad(1))...)}, time.Second)
	wantKind(t, err, engine.KindTooLarge)
	bad := []struct {
		name  string
		elems []engine.Element
		kind  engine.Kind
	}{
		{"zero-length element", []engine.Element{engine.Range(r.BaseAddress(), 0)}, engine.KindInvalid},
		{"range and padding", []engine.Element{{Address: r.BaseAddress(), Length: 1, Padding: 1}}, engine.KindInvalid},
		{"unregistered range", []engine.Element{engine.Range(8, 8)}, engine.KindNotFound},
		{"past file end", []engine.Element{engine.Pad(1 << 20), engine.Pad(1)}, engine.KindRange},
	}
	for _, c := range bad {
		_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{engine.Vector(0, 0, c.elems...)}, time.Second)
		if engine.KindOf(err) != c.kind {
			t.Errorf("%s: got %v, want kind %v", c.name, err, c.kind)
		}
	}
}

func TestRangeAndPermissionErrors(t *testing.T) {
	e := newEngine(t, nil, &refTransport{})
	dir := t.TempDir()
	path, _ := randomFile(t, dir, "f", 8192)
	ro := openSeg(t, e, path, engine.PermRead)
	wo := openSeg(t, e, path, engine.PermWrite)
	r := register(t, e, 8192)
	base := r.BaseAddress()
	cases := []struct {
		name string
		seg  *engine.Segment
		op   engine.Op
		req  engine.Request
		kind engine.Kind
		msg  string
	}{
		{"write on read-only", ro, engine.OpWrite, engine.Request{Address: base, Length: 1}, engine.KindPermission, "opened read"},
		{"read on write-only", wo, engine.OpRead, engine.Request{Address: base, Length: 1}, engine.KindPermission, "opened write"},
		{"zero length", ro, engine.OpRead, engine.Request{Address: base}, engine.KindInvalid, "zero length"},
		{"end beyond size", ro, engine.OpRead, engine.Request{Address: base, TargetOffset: 4096, Length: 8192}, engine.KindRange, "beyond file size 8192"},
		{"offset overflow", ro, engine.OpRead, engine.Request{Address: base, TargetOffset: ^uint64(0) - 1, Length: 4}, engine.KindInvalid, "overflows"},
		{"unregistered address", ro, engine.OpRead, engine.Request{Address: 4096, Length: 1}, engine.KindNotFound, "not in any registered region"},
		{"past region end", ro, engine.OpRead, engine.Request{Address: base + 8000, Length: 400}, engine.KindRange, "past the end"},
		{"gds unavailable", ro, engine.OpRead, engine.Request{Transport: engine.TransportGDS, Address: base, Length: 1}, engine.KindUnavailable, "gds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := e.AllocateBatch(4)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			_, err = b.Submit(c.op, c.seg, []engine.Request{{Address: base, Length: 1}, c.req}, nil, time.Second)
			wantKind(t, err, c.kind)
			if !bytes.Contains([]byte(err.Error()), []byte(c.msg)) {
				t.Fatalf("message %q does not mention %q", err, c.msg)
			}
			if n := b.TaskCount(); n != 0 {
				t.Fatalf("rejected group added %d tasks", n)
			}
		})
	}
	if _, err := e.ResolveFileOffset(ro, engine.OpRead, 8, 4); err != nil {
		t.Fatal(err)
	}
	_, err := e.ResolveFileOffset(ro, engine.OpRead, 8190, 4)
	wantKind(t, err, engine.KindRange)
	_, err = e.ResolveFileOffset(ro, engine.OpWrite, 0, 4)
	wantKind(t, err, engine.KindPermission)
	_, err = e.SubmitAndWait(engine.OpRead, ro, []engine.Request{{Address: base, Length: 1}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := e.AllocateBatch(1)
	_, err = b.Submit(engine.OpRead, ro, []engine.Request{{Address: base, Length: 1}}, &engine.Notification{Name: "x"}, time.Second)
	wantKind(t, err, engine.KindInvalid)
	b.Free()
}

func TestShrunkFile(t *testing.T) {
	for fsName, dir := range filesystems(t) {
		t.Run(fsName, func(t *testing.T) {
			// Shrunk before submit: the range check sees the current size.
			// Validation rejects it, so no I/O runs: the reference
			// transport keeps this test in the noiouring build too.
			e := newEngine(t, nil, &refTransport{})
			path, _ := randomFile(t, dir, "f", 8192)
			seg := openSeg(t, e, path, engine.PermRead)
			info, _ := e.FileSegmentInfo(seg)
			if info.Size != 8192 {
				t.Fatalf("size %d", info.Size)
			}
			os.Truncate(path, 5000)
			r := register(t, e, 8192)
			_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), TargetOffset: 4096, Length: 4096}}, time.Second)
			wantKind(t, err, engine.KindRange)
			if info, _ := e.FileSegmentInfo(seg); info.Size != 8192 {
				t.Fatalf("cached size changed without refresh: %d", info.Size)
			}
			if err := e.RefreshFileSegment(seg); err != nil {
				t.Fatal(err)
			}
			if info, _ := e.FileSegmentInfo(seg); info.Size != 5000 {
				t.Fatalf("size after refresh %d, want 5000", info.Size)
			}
		})
	}
}

// TestShortReadAtEOF shrinks the file between admission and I/O: each
// task reports its exact byte count, and a later task still succeeds.
func TestShortReadAtEOF(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, orig := randomFile(t, t.TempDir(), "f", 16384)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 16384)
	b, _ := e.AllocateBatch(8)
	reqs := []engine.Request{
		{Address: r.BaseAddress(), TargetOffset: 0, Length: 4096},
		{Address: r.BaseAddress() + 4096, TargetOffset: 8192, Length: 4096},  // short: 3 bytes
		{Address: r.BaseAddress() + 8192, TargetOffset: 12288, Length: 4096}, // 0 at EOF
		{Address: r.BaseAddress() + 12288, TargetOffset: 4096, Length: 4096}, // still succeeds
	}
	if _, err := b.Submit(engine.OpRead, seg, reqs, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	os.Truncate(path, 8195)
	ref.release()
	b.Seal()
	st, err := b.Wait(ioTimeout)
	if err != nil || st != engine.StateFailed {
		t.Fatalf("state %v err %v, want failed", st, err)
	}
	want := []struct {
		state engine.TaskState
		n     uint64
	}{{engine.TaskCompleted, 4096}, {engine.TaskFailed, 3}, {engine.TaskFailed, 0}, {engine.TaskCompleted, 4096}}
	for i, w := range want {
		ts, _ := b.TaskStatus(i)
		if ts.State != w.state || ts.Transferred != w.n {
			t.Errorf("task %d: %v %d bytes, want %v %d (%v)", i, ts.State, ts.Transferred, w.state, w.n, ts.Err)
		}
	}
	rep := b.Submissions()[0]
	if rep.CompletedRequests != 1 || rep.CompletedBytes != 4096 || rep.RequestIndex != 1 || rep.AffectedRequests != 3 {
		t.Fatalf("report %+v", rep)
	}
	got := regionBytes(t, r)
	if !bytes.Equal(got[4096:4099], orig[8192:8195]) || !bytes.Equal(got[12288:], orig[4096:8192]) {
		t.Fatal("bytes of the returned prefixes are wrong")
	}
}

func TestFailedWriteHasUnknownEffect(t *testing.T) {
	ref := &refTransport{failNth: 2, errno: 5 /* EIO */}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 16384)
	seg := openSeg(t, e, path, engine.PermWrite)
	r := register(t, e, 16384)
	reqs := []engine.Request{
		{Address: r.BaseAddress(), TargetOffset: 0, Length: 4096},
		{Address: r.BaseAddress() + 4096, TargetOffset: 4096, Length: 4096},
		{Address: r.BaseAddress() + 8192, TargetOffset: 8192, Length: 4096},
	}
	b, _ := e.AllocateBatch(3)
	b.Submit(engine.OpWrite, seg, reqs, nil, time.Second)
	b.Seal()
	if st, _ := b.Wait(ioTimeout); st != engine.StateFailed {
		t.Fatalf("state %v", st)
	}
	ts, _ := b.TaskStatus(1)
	if ts.State != engine.TaskFailed || ts.RemoteEffect != engine.EffectUnknown {
		t.Fatalf("task 1: %+v", ts)
	}
	wantKind(t, ts.Err, engine.KindIO)
	if ts2, _ := b.TaskStatus(2); ts2.State != engine.TaskCompleted || ts2.RemoteEffect != engine.EffectApplied {
		t.Fatalf("task 2 must complete independently: %+v", ts2)
	}
	rep := b.Submissions()[0]
	if rep.CompletedRequests != 1 || rep.RequestIndex != 1 || rep.AffectedRequests != 2 {
		t.Fatalf("report %+v", rep)
	}
}

// TestEquivalence runs the same random transfers through io_uring and
// through the plain pread/pwrite reference; the files must match. The
// groups alternate between two segment entries of the file.
func TestEquivalence(t *testing.T) {
	needIOUring(t)
	dir := t.TempDir()
	run := func(transports ...engine.Transport) []byte {
		e := newEngine(t, nil, transports...)
		path, _ := randomFile(t, dir, "eq", 1<<20)
		os.WriteFile(path, make([]byte, 1<<20), 0o644)
		// Two entries on one file (another permission): ordering must hold
		// across them as within one.
		segs := []*engine.Segment{openSeg(t, e, path, engine.PermReadWrite), openSeg(t, e, path, engine.PermWrite)}
		r := register(t, e, 1<<20)
		pattern := make([]byte, 1<<20)
		for i := range pattern {
			pattern[i] = byte(i*7 + i>>9)
		}
		r.WriteAt(pattern, 0)
		var reqs []engine.Request
		for i := uint64(0); i < 200; i++ {
			off := (i * 7919) % (1<<20 - 9000)
			n := 1 + (i*104729)%8192
			reqs = append(reqs, engine.Request{Address: r.BaseAddress() + (i*31)%(1<<19), TargetOffset: off &^ 7, Length: n})
		}
		// One group per request, so ordering comes from FIFO + fences.
		b, _ := e.AllocateBatch(len(reqs))
		for i, q := range reqs {
			if _, err := b.Submit(engine.OpWrite, segs[i%2], []engine.Request{q}, nil, ioTimeout); err != nil {
				t.Fatal(err)
			}
		}
		b.Seal()
		if st, err := b.Wait(ioTimeout); st != engine.StateCompleted {
			t.Fatalf("state %v %v", st, err)
		}
		b.Free()
		for _, seg := range segs {
			e.CloseFileSegment(seg, time.Second)
		}
		out, _ := os.ReadFile(path)
		return out
	}
	cfg := config.DefaultEngine()
	a := run(realTransports(cfg)...)
	b := run(&refTransport{})
	if !bytes.Equal(a, b) {
		t.Fatal("io_uring and the pread/pwrite reference wrote different files")
	}
}

// TestPipelineFence streams write-then-read groups into one batch without
// waiting: the fence must order the read after the write it overlaps.
func TestPipelineFence(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	src := register(t, e, 1<<20)
	dst := register(t, e, 1<<20)
	data := make([]byte, 1<<20)
	rand.Read(data)
	src.WriteAt(data, 0)
	b, _ := e.AllocateBatch(512)
	for i := uint64(0); i < 256; i++ {
		off := i * 4096
		b.Submit(engine.OpWrite, seg, []engine.Request{{Address: src.BaseAddress() + off, TargetOffset: off, Length: 4096}}, nil, ioTimeout)
		b.Submit(engine.OpRead, seg, []engine.Request{{Address: dst.BaseAddress() + off, TargetOffset: off, Length: 4096}}, nil, ioTimeout)
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); st != engine.StateCompleted {
		for _, r := range b.Submissions() {
			if r.Err != nil {
				t.Fatalf("state %v %v: first failure %+v stats %+v", st, err, r, e.Stats())
			}
		}
		t.Fatalf("state %v %v", st, err)
	}
	if !bytes.Equal(regionBytes(t, dst), data) {
		t.Fatal("a read overtook the write it overlaps")
	}
}

func TestFastPath(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, func(c *config.Engine) { c.CallerCopy = false }) // the ring's fast path
	path, _ := randomFile(t, "/dev/shm", "orbitefs-fastpath", 65536)
	t.Cleanup(func() { os.Remove(path) })
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 65536)
	for i := 0; i < 20; i++ {
		if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	st := e.Stats()
	if st.FastPathHits+st.FastPathHandoffs != 20 {
		t.Fatalf("fast path took %d+%d of 20 small groups", st.FastPathHits, st.FastPathHandoffs)
	}
	if st.FastPathHits == 0 {
		t.Fatalf("no small tmpfs read completed on its caller: %+v", st)
	}
}

// TestSpecDefaults pins the defaults the spec states: 30 s quiesce grace,
// one hour file info cache, 1024 segments, 1024 vector elements, and the
// caller fast path's 64 KiB and 200 us.
func TestSpecDefaults(t *testing.T) {
	c := config.DefaultEngine()
	for _, x := range []struct {
		name      string
		got, want any
	}{
		{"quiesce_grace", c.QuiesceGrace.D(), 30 * time.Second},
		{"file_info_ttl", c.FileInfoTTL.D(), time.Hour},
		{"max_file_segments", c.MaxFileSegments, 1024},
		{"max_vector_elements", c.MaxVectorElements, 1024},
		{"caller_fast_path_bytes", uint64(c.CallerFastPathBytes), uint64(64 << 10)},
		{"caller_fast_path_wait", c.CallerFastPathWait.D(), 200 * time.Microsecond},
	} {
		if x.got != x.want {
			t.Errorf("%s default = %v, spec says %v", x.name, x.got, x.want)
		}
	}
}

// TestFastPathEligibility: only one contiguous host request of at most
// caller_fast_path_bytes runs on its caller; vectors (even of one
// element), larger requests and larger groups start a worker.
func TestFastPathEligibility(t *testing.T) {
	e := newEngine(t, nil, &refTransport{})
	path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<20)
	base := r.BaseAddress()
	cases := []struct {
		name string
		reqs []engine.Request
		fast bool
	}{
		{"scalar 4 KiB", []engine.Request{{Address: base, Length: 4096}}, true},
		{"scalar 64 KiB", []engine.Request{{Address: base, Length: 64 << 10}}, true},
		{"scalar 64 KiB + 1", []engine.Request{{Address: base, Length: 64<<10 + 1}}, false},
		{"vector of one element", []engine.Request{engine.Vector(0, 0, engine.Range(base, 4096))}, false},
		{"two requests", []engine.Request{{Address: base, Length: 4096}, {Address: base + 8192, Length: 4096}}, false},
	}
	for _, c := range cases {
		before := e.Stats()
		if _, err := e.SubmitAndWait(engine.OpRead, seg, c.reqs, ioTimeout); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		after := e.Stats()
		fast := after.FastPathHits+after.FastPathHandoffs > before.FastPathHits+before.FastPathHandoffs
		if fast != c.fast {
			t.Errorf("%s: fast path taken = %v, want %v", c.name, fast, c.fast)
		}
		if worker := after.WorkersStarted > before.WorkersStarted; worker == c.fast {
			t.Errorf("%s: worker started = %v, want %v", c.name, worker, !c.fast)
		}
	}
}

// TestFastPathWaitIsBounded: with the completion stalled, the caller
// waits at most its window, then hands the ring to a worker; Submit
// returns while the op is still in flight.
func TestFastPathWaitIsBounded(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	defer ref.release()
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<16)
	type result struct {
		b   *engine.Batch
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, ioTimeout)
		done <- result{b, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Submit still blocked on its caller 10 s after the stalled op; the caller wait is unbounded")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if ts, _ := res.b.TaskStatus(0); ts.State != engine.TaskRunning {
		t.Fatalf("task %v when Submit returned; want running (handed off)", ts.State)
	}
	if st := e.Stats(); st.FastPathHandoffs != 1 || st.WorkersStarted != 1 {
		t.Fatalf("stats %+v: want one handoff to one worker", st)
	}
	ref.release()
	if st, _ := res.b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
	res.b.Free()
}

// TestWriteSpanRemoteEffect: the group report of a failed WRITE carries
// an unknown remote effect when any request of the affected span reached
// the kernel, including requests after the failure that completed; short
// WRITEs fail with their exact byte count. A READ, or a WRITE whose span
// never reached the kernel, changes nothing remote.
func TestWriteSpanRemoteEffect(t *testing.T) {
	reqs := func(r *engine.Region) []engine.Request {
		return []engine.Request{
			{Address: r.BaseAddress(), TargetOffset: 0, Length: 4096},
			{Address: r.BaseAddress() + 4096, TargetOffset: 4096, Length: 4096},
			{Address: r.BaseAddress() + 8192, TargetOffset: 8192, Length: 4096},
		}
	}
	cases := []struct {
		name     string
		ref      *refTransport
		op       engine.Op
		index    int
		affected int
		effect   engine.RemoteEffect
		short    int // task that fails short, -1: none
	}{
		{"write fails first, later ones complete", &refTransport{failNth: 1, errno: 5}, engine.OpWrite, 0, 3, engine.EffectUnknown, -1},
		{"read fails", &refTransport{failNth: 1, errno: 5}, engine.OpRead, 0, 3, engine.EffectNone, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, nil, c.ref)
			path, _ := randomFile(t, t.TempDir(), "f", 16384)
			s := openSeg(t, e, path, engine.PermReadWrite)
			r := register(t, e, 16384)
			b, _ := e.AllocateBatch(3)
			if _, err := b.Submit(c.op, s, reqs(r), nil, ioTimeout); err != nil {
				t.Fatal(err)
			}
			b.Seal()
			if st, _ := b.Wait(ioTimeout); st != engine.StateFailed {
				t.Fatalf("state %v", st)
			}
			rep := b.Submissions()[0]
			if rep.RequestIndex != c.index || rep.AffectedRequests != c.affected || rep.RemoteEffect != c.effect {
				t.Fatalf("report %+v, want index %d, affected %d, effect %v", rep, c.index, c.affected, c.effect)
			}
			if c.short >= 0 {
				ts, _ := b.TaskStatus(c.short)
				wantEffect := engine.EffectNone
				if c.op == engine.OpWrite {
					wantEffect = engine.EffectUnknown
				}
				if ts.State != engine.TaskFailed || ts.Transferred != 2048 || ts.RemoteEffect != wantEffect {
					t.Fatalf("short task %+v: want failed, 2048 bytes, effect %v", ts, wantEffect)
				}
				wantKind(t, ts.Err, engine.KindRange)
			}
		})
	}

	// A transient short op (the kernel moved half) is finished by the
	// retry of the rest (shortio.go): the task completes with every byte.
	// Persistent shorts are TestShortReadAtEOF and TestShortWriteNoSpace.
	for _, op := range []engine.Op{engine.OpWrite, engine.OpRead} {
		e := newEngine(t, nil, &refTransport{shortNth: 2})
		path, orig := randomFile(t, t.TempDir(), "f", 16384)
		s := openSeg(t, e, path, engine.PermReadWrite)
		r := register(t, e, 16384)
		payload := make([]byte, 16384)
		rand.Read(payload)
		r.WriteAt(payload, 0)
		rep, err := e.SubmitAndWait(op, s, reqs(r), ioTimeout)
		if err != nil || rep.CompletedRequests != 3 || rep.CompletedBytes != 12288 {
			t.Fatalf("%v after a transient short op: %v %+v", op, err, rep)
		}
		want, got := orig[:12288], regionBytes(t, r)[:12288]
		if op == engine.OpWrite {
			want, _ = os.ReadFile(path)
			want, got = payload[:12288], want[:12288]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%v after a transient short op: bytes differ", op)
		}
	}

	// A WRITE group cancelled before dispatch reached no kernel: effect none.
	ref := &refTransport{stall: make(chan struct{})}
	defer ref.release()
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 16384)
	s := openSeg(t, e, path, engine.PermReadWrite)
	r := register(t, e, 16384)
	b, _ := e.AllocateBatch(2)
	b.Submit(engine.OpWrite, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, ioTimeout)
	b.Submit(engine.OpWrite, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, ioTimeout) // fenced
	if err := b.Cancel(1); err != nil {
		t.Fatal(err)
	}
	ref.release()
	b.Seal()
	b.Wait(ioTimeout)
	if rep := b.Submissions()[1]; rep.RequestIndex != 0 || rep.RemoteEffect != engine.EffectNone {
		t.Fatalf("cancelled write group report %+v", rep)
	}
}

// TestDescriptorBound: one submission carries at most max_batch_requests
// descriptors, counting a scalar request as one and a vector as one per
// element (padding included); more is EFBIG naming the limit, before any
// I/O.
func TestDescriptorBound(t *testing.T) {
	ref := &refTransport{}
	e := newEngine(t, func(c *config.Engine) { c.MaxBatchRequests = 8 }, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<16)
	vec := func(off uint64) engine.Request {
		return engine.Vector(0, off, engine.Range(r.BaseAddress()+off, 100), engine.Pad(10), engine.Range(r.BaseAddress()+off+200, 100), engine.Pad(10))
	}
	scalar := engine.Request{Address: r.BaseAddress() + 8192, TargetOffset: 8192, Length: 10}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{vec(0), vec(1024)}, ioTimeout); err != nil {
		t.Fatalf("8 descriptors: %v", err)
	}
	ops := ref.ops.Load()
	b, _ := e.AllocateBatch(3)
	_, err := b.Submit(engine.OpRead, seg, []engine.Request{vec(0), vec(1024), scalar}, nil, ioTimeout)
	wantKind(t, err, engine.KindTooLarge)
	if !strings.Contains(err.Error(), "9 descriptors") || !strings.Contains(err.Error(), "max_batch_requests (8)") {
		t.Fatalf("message %q must name the count and the limit", err)
	}
	if b.TaskCount() != 0 || ref.ops.Load() != ops {
		t.Fatal("a refused submission added tasks or ran I/O")
	}
	b.Free()

	// The defaults: 4096 requests of 1024 elements each are refused.
	d := newEngine(t, nil, &refTransport{})
	dseg := openSeg(t, d, path, engine.PermRead)
	dr := register(t, d, 1<<16)
	elems := make([]engine.Element, 1024)
	for i := range elems {
		elems[i] = engine.Range(dr.BaseAddress()+uint64(i), 1)
	}
	reqs := make([]engine.Request, 4096)
	for i := range reqs {
		reqs[i] = engine.Vector(0, 0, elems...)
	}
	db, _ := d.AllocateBatch(4096)
	_, err = db.Submit(engine.OpRead, dseg, reqs, nil, ioTimeout)
	wantKind(t, err, engine.KindTooLarge)
	if !strings.Contains(err.Error(), "max_batch_requests (4096)") {
		t.Fatalf("message %q", err)
	}
	db.Free()
}

// TestShortDirectRead: the file shrinks between admission and a READ on
// the O_DIRECT fd. The task fails with its exact byte count and the
// returned prefix holds the file's bytes. (Bytes past that prefix may be
// overwritten by the kernel: docs/engine.md records this departure.)
func TestShortDirectRead(t *testing.T) {
	needIOUring(t)
	dir, ok := filesystems(t)["ext4"]
	if !ok {
		t.Skip("no ext4 directory: the O_DIRECT path is not available")
	}
	spy := &spyTransport{FileTransport: realTransports(config.DefaultEngine())[0].(engine.FileTransport)}
	e := newEngine(t, nil, spy)
	path, data := randomFile(t, dir, "f", 16384)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 16384)
	spy.onPrepare = func(*engine.FileOp) { os.Truncate(path, 4099) }
	rep, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: 16384}}, ioTimeout)
	wantKind(t, err, engine.KindRange)
	if ops := spy.take(); len(ops) != 1 || !ops[0].direct {
		t.Fatalf("ops %+v: want one O_DIRECT read", ops)
	}
	if rep.CompletedRequests != 0 || rep.RequestIndex != 0 {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(err.Error(), "4099 of 16384 bytes") {
		t.Fatalf("error %q does not give the exact byte count", err)
	}
	if got := regionBytes(t, r); !bytes.Equal(got[:4099], data[:4099]) {
		t.Fatal("the returned prefix differs from the file")
	}
}
