package engine_test

// execcontract_test.go: one table of behavioural checks run against every
// executor, on real io_uring, real ext4 and tmpfs files and the fake GPU
// and cuFile of fakegpu_test.go. Each check runs on a fresh engine:
//   - bytes: a READ of two requests and a WRITE move the right bytes, the
//     tasks report the executor's transport, each task is counted once and
//     each group's hook runs once;
//   - cancel before start: a group fenced behind a held one is cancelled;
//     its executor never sees it and its memory is untouched;
//   - cancel unstarted (every executor the worker dispatches to): with
//     io_uring.queue_depth 1 (the memory executor: always) a dispatched
//     group hands its executor one task at a time (the ring: one op on
//     its ring); while the first task's units are held (on a lane, or
//     before its op goes on the ring) the second is still pending, a
//     cancel ends it, and it never reaches the executor nor touches its
//     memory;
//   - cancel running (every executor): while the first task of a READ is
//     running and held where its executor is about to move its bytes (a
//     unit before its start check, an op before it goes on the ring, a
//     caller or lane copy before its copy), Cancel of it either cuts it
//     (an executor that can stop running work, cuts: cancelled, nothing
//     moved, its memory untouched) or is refused KindBusy and the task
//     runs on to completion with its bytes; the other task completes
//     either way. A cuda_ipc task whose copy was already queued is
//     refused KindUnavailable and completes;
//   - deadline: a group whose deadline passes while it waits fails
//     Timeout with nothing moved;
//   - short I/O: a file cut while the READ waits gives a short READ:
//     Range, with exactly the bytes up to the new end transferred;
//   - uncertain: where the executor can lose track of an outcome (a
//     device copy, a cuFile call that never returns, a ring CQE that
//     never comes: lossytransport_test.go), the group ends
//     unquiesced and its memory stays loaned, also when the group's
//     next task was still to be handed out (queue depth 1);
//   - remote effects (the peer executor, over the fake Remote of
//     fakeremote_test.go): a WRITE whose ack was lost is unknown and is
//     never replayed, one that reached nothing is none, and a cancel of
//     a running WRITE cuts it (cancelled, effect unknown).
//
// The CUDA IPC case's target is a fake Remote whose region is a fake
// device allocation exported with its IPC handle (fakeipc_test.go): its
// device requests copy device to device; the holding WRITE of the fence
// checks is a host request on the same segment, so it goes over TCP.
//
// The peer case's target is the fake Remote's region instead of a file:
// "the file" below is that region, cut by shrinking it, and its units
// are whole (a short unit moves nothing).

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// execCase is one executor as a request reaches it.
type execCase struct {
	name      string
	fs        string // "ext4" or "tmpfs"
	n         int    // request bytes
	device    bool   // local memory on the fake GPU
	gds       bool   // the engine has the fake cuFile
	transport engine.TransportKind
	want      engine.TransportKind // what the tasks report
	// queued: the worker dispatches the group to this executor. The
	// caller copy runs inside Submit, so a group that waits (fenced)
	// meets the ring instead, and the cancel and deadline checks do not
	// reach it.
	queued bool
	// lanes: lane_copy_probe 1, so every caller copy runs on the host
	// copy lanes (lanecopy.go); the bytes check counts them.
	lanes bool
	// offRing: the worker hands the group to a job executor (offring.go),
	// whose lanes HoldUnits can hold (the ring's ops it holds too).
	offRing bool
	// uncertain makes the next READ's outcome unknown and returns the
	// READ's timeout; nil where the executor cannot lose track (a
	// synchronous copy always returns). The ring's is a real ring whose
	// CQEs the fixture's transport swallows (lossytransport_test.go).
	uncertain func(f *execFixture) time.Duration
	// peer: the target is a remote segment over a fake Remote whose
	// units are peerUnit bytes.
	peer bool
	// memseg: the target is a memory segment over a region of this
	// engine (the memory executor), with merge_requests off so that each
	// request is its own physical owner.
	memseg bool
	// ipc: that Remote's region is a fake device allocation exported
	// through CUDA IPC (its size cannot change: no short I/O).
	ipc bool
	// perCopy: the fake GPU has no batched copy (a driver before CUDA
	// 12.8): every device copy is its own call.
	perCopy bool
	// mapped: mapped_files on, so device requests on tmpfs copy through
	// the file's registered pages (mappedexec.go).
	mapped bool
	// cuts: Cancel of a task this executor is running cuts it (the task
	// ends cancelled, nothing moved); otherwise Cancel is KindBusy and
	// the task runs on.
	cuts bool
}

const peerUnit = 64 << 10

var execCases = []execCase{
	{name: "ring", fs: "tmpfs", n: 1 << 20, transport: engine.TransportIOUring, want: engine.TransportIOUring, queued: true, uncertain: loseCQEs},
	{name: "ring O_DIRECT", fs: "ext4", n: 1 << 20, transport: engine.TransportIOUring, want: engine.TransportIOUring, queued: true, uncertain: loseCQEs},
	{name: "caller copy", fs: "tmpfs", n: 64 << 10, want: engine.TransportCopy},
	{name: "lane copy", fs: "tmpfs", n: 64 << 10, want: engine.TransportCopy, lanes: true},
	{name: "host copy", fs: "tmpfs", n: 12 << 20, want: engine.TransportCopy, queued: true, offRing: true},
	// Two requests of exactly one unit each: the 4 MiB stream.
	{name: "host copy, one unit each", fs: "tmpfs", n: 8 << 20, want: engine.TransportCopy, queued: true, offRing: true},
	{name: "staged", fs: "tmpfs", n: 1 << 20, device: true, want: engine.TransportIOUring, queued: true, offRing: true,
		uncertain: func(f *execFixture) time.Duration { f.gpu.failEvent.Store(true); return ioTimeout }},
	{name: "staged, per-copy driver", fs: "tmpfs", n: 1 << 20, device: true, want: engine.TransportIOUring, queued: true, offRing: true, perCopy: true,
		uncertain: func(f *execFixture) time.Duration { f.gpu.failEvent.Store(true); return ioTimeout }},
	{name: "staged O_DIRECT", fs: "ext4", n: 1 << 20, device: true, transport: engine.TransportIOUring, want: engine.TransportIOUring, queued: true, offRing: true,
		uncertain: func(f *execFixture) time.Duration { f.gpu.failEvent.Store(true); return ioTimeout }},
	{name: "mapped", fs: "tmpfs", n: 1 << 20, device: true, want: engine.TransportMapped, queued: true, offRing: true, mapped: true,
		uncertain: func(f *execFixture) time.Duration { f.gpu.failEvent.Store(true); return ioTimeout }},
	{name: "gds", fs: "ext4", n: 1 << 20, device: true, gds: true, want: engine.TransportGDS, queued: true, offRing: true,
		uncertain: func(f *execFixture) time.Duration {
			f.cufile.hang = make(chan struct{})
			f.t.Cleanup(func() { close(f.cufile.hang) })
			return 100 * time.Millisecond
		}},
	{name: "peer", fs: "tmpfs", n: 1 << 20, want: engine.TransportTCP, queued: true, offRing: true, peer: true, cuts: true},
	// The fence, deadline and short checks hold the group behind a write
	// to the file, which a memory target does not overlap.
	{name: "memory", fs: "tmpfs", n: 1 << 20, want: engine.TransportMemory, offRing: true, memseg: true},
	{name: "cuda ipc", fs: "tmpfs", n: 1 << 20, device: true, want: engine.TransportCUDAIPC, queued: true, offRing: true, peer: true, ipc: true, cuts: true,
		uncertain: func(f *execFixture) time.Duration {
			f.gpu.hang = make(chan struct{})
			f.t.Cleanup(func() { close(f.gpu.hang) })
			return 100 * time.Millisecond
		}},
}

// loseCQEs makes the fixture's rings swallow every CQE from now on: the
// real ring runs the READ, the engine never learns it did.
func loseCQEs(f *execFixture) time.Duration {
	f.lossy.lose.Store(true)
	return 50 * time.Millisecond
}

// execFixture is a fresh engine with one file segment, local memory for
// the case and a device region for the holding group of the fence checks.
type execFixture struct {
	t      *testing.T
	c      execCase
	e      *engine.Engine
	gpu    *fakeGPU
	cufile *fakeGDS
	lossy  *lossyTransport // the engine's file transport
	path   string
	orig   []byte
	seg    *engine.Segment
	mem    *engine.Region
	hold   *engine.Region
	target engine.Target // seg, or the remote segment of a peer case
	remote *fakeRemote
	region *engine.Region // the memory segment's region of a memory case
}

func newExecFixture(t *testing.T, c execCase, dir string, opts ...func(*config.Engine)) *execFixture {
	f := &execFixture{t: t, c: c, gpu: newFakeGPU(1)}
	f.gpu.batch.Store(!c.perCopy)
	if c.gds {
		f.cufile = &fakeGDS{}
	}
	f.e = gpuEngineOver(t, f.gpu, f.cufile, func(tr engine.FileTransport) engine.FileTransport {
		f.lossy = &lossyTransport{FileTransport: tr}
		return f.lossy
	}, func(cfg *config.Engine) {
		cfg.QuiesceGrace = config.Duration(100 * time.Millisecond)
		cfg.MaxTransferBytes = 64 << 20
		if c.lanes {
			cfg.LaneCopyProbe = 1
		}
		if c.memseg {
			cfg.MergeRequests = false
		}
		cfg.MappedFiles = c.mapped
		for _, o := range opts {
			o(cfg)
		}
	})
	f.path, f.orig = randomFile(t, dir, "f", c.n)
	f.seg = openSeg(t, f.e, f.path, engine.PermReadWrite)
	if c.device {
		f.mem = deviceRegion(t, f.e, 0, uint64(c.n))
	} else {
		f.mem = register(t, f.e, uint64(c.n))
	}
	f.hold = deviceRegion(t, f.e, 0, 4096)
	f.target = f.seg
	if c.peer {
		f.remote = newFakeRemote(c.n, engine.PermReadWrite, peerUnit)
		if c.ipc {
			f.remote.exportIPC(t, f.e, c.n) // fakeipc_test.go
		}
		copy(f.remote.data, f.orig)
		rs, err := f.e.OpenRemoteSegment("tcp://127.0.0.1:1/kv", f.remote, engine.PermReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		f.target = rs
	}
	if c.memseg {
		f.region = register(t, f.e, uint64(c.n))
		if _, err := f.region.WriteAt(f.orig, 0); err != nil {
			t.Fatal(err)
		}
		f.target = openMem(t, f.e, f.region, engine.PermReadWrite)
	}
	return f
}

// targetBytes reads the case's target: the file, or the remote region.
func (f *execFixture) targetBytes() []byte {
	if f.remote != nil {
		return f.remote.bytes()
	}
	if f.region != nil {
		b := make([]byte, f.c.n)
		if _, err := f.region.ReadAt(b, 0); err != nil {
			f.t.Fatal(err)
		}
		return b
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// cutTarget shrinks the target to n bytes.
func (f *execFixture) cutTarget(n int) {
	if f.remote != nil {
		f.remote.mu.Lock()
		f.remote.size = uint64(n)
		f.remote.mu.Unlock()
		return
	}
	if err := os.Truncate(f.path, int64(n)); err != nil {
		f.t.Fatal(err)
	}
}

// whole is what a target moves of n bytes that end short: all of them
// from a file, whole units from a peer.
func (f *execFixture) whole(n int) uint64 {
	if f.remote != nil {
		return uint64(n / peerUnit * peerUnit)
	}
	return uint64(n)
}

// req is the case's request for n bytes of memory and file from off.
func (f *execFixture) req(off, n uint64) engine.Request {
	return engine.Request{Transport: f.c.transport, Address: f.mem.BaseAddress() + off, TargetOffset: off, Length: n}
}

// memBytes reads the case's memory.
func (f *execFixture) memBytes() []byte {
	b := make([]byte, f.c.n)
	if _, err := f.mem.ReadAt(b, 0); err != nil {
		f.t.Fatal(err)
	}
	return b
}

// sentinel fills the case's memory with a pattern and returns it.
func (f *execFixture) sentinel() []byte {
	b := bytes.Repeat([]byte{0x5A}, f.c.n)
	if _, err := f.mem.WriteAt(b, 0); err != nil {
		f.t.Fatal(err)
	}
	return b
}

// run submits groups into one batch, each its own group, counts their
// hooks, seals and waits.
func (f *execFixture) run(op engine.Op, groups ...[]engine.Request) (*engine.Batch, []int64) {
	t := f.t
	n := 0
	for _, g := range groups {
		n += len(g)
	}
	b, err := f.e.AllocateBatch(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	hooks := make([]atomic.Int64, len(groups))
	b.OnGroupDone(func(r engine.Report) {
		for i, g := range groups {
			_ = g
			if r.Tasks.First == groupFirst(groups, i) {
				hooks[i].Add(1)
			}
		}
	})
	for _, g := range groups {
		if _, err := b.Submit(op, f.target, g, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
	}
	b.Seal()
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every group's hook", func() bool {
		for i := range hooks {
			if hooks[i].Load() == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(20 * time.Millisecond) // room for a second report
	out := make([]int64, len(hooks))
	for i := range hooks {
		out[i] = hooks[i].Load()
	}
	return b, out
}

func groupFirst(groups [][]engine.Request, i int) int {
	first := 0
	for _, g := range groups[:i] {
		first += len(g)
	}
	return first
}

// fenced submits, in one batch, a device WRITE of the file's first page
// held by its producer event, then the case's READ of the whole file in
// two requests (tasks 1 and 2, fenced behind the WRITE) with timeout; act
// runs while the READ waits, then the WRITE is released. It returns the
// READ's two tasks.
func (f *execFixture) fenced(timeout time.Duration, act func(b *engine.Batch)) [2]engine.TaskStatus {
	t := f.t
	ev := &producerEvent{done: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(ev.done)
		}
	}
	defer release()
	b, err := f.e.AllocateBatch(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	if f.remote != nil {
		// The holding WRITE is held inside the fake Remote, where a
		// peer's round trip waits.
		f.remote.mu.Lock()
		f.remote.hold, f.remote.holdEnd = ev.done, 4096
		f.remote.mu.Unlock()
		host := register(t, f.e, 4096)
		if _, err := b.Submit(engine.OpWrite, f.target, []engine.Request{{Address: host.BaseAddress(), Length: 4096}}, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
	} else if _, err := b.Submit(engine.OpWrite, f.seg, []engine.Request{{Address: f.hold.BaseAddress(), Length: 4096, Producer: ev}}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	half := uint64(f.c.n / 2)
	if _, err := b.Submit(engine.OpRead, f.target, []engine.Request{f.req(0, half), f.req(half, uint64(f.c.n)-half)}, nil, timeout); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the holding WRITE to run", func() bool { ts, _ := b.TaskStatus(0); return ts.State == engine.TaskRunning })
	if ts, _ := b.TaskStatus(1); ts.State != engine.TaskPending {
		t.Fatalf("the fenced READ is %v before the WRITE ended, want pending", ts.State)
	}
	act(b)
	release()
	b.Seal()
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	var ts [2]engine.TaskStatus
	ts[0], _ = b.TaskStatus(1)
	ts[1], _ = b.TaskStatus(2)
	return ts
}

func TestExecutorContract(t *testing.T) {
	fss := filesystems(t)
	for _, c := range execCases {
		t.Run(c.name, func(t *testing.T) {
			dir, ok := fss[c.fs]
			if !ok {
				t.Skipf("no %s here", c.fs)
			}
			t.Run("bytes", func(t *testing.T) {
				f := newExecFixture(t, c, dir)
				before := f.e.Stats()
				half := uint64(c.n / 2)
				b, hooks := f.run(engine.OpRead, []engine.Request{f.req(0, half), f.req(half, uint64(c.n)-half)})
				if !bytes.Equal(f.memBytes(), f.orig) {
					t.Fatal("READ: memory differs from the file")
				}
				for i := range 2 {
					ts, _ := b.TaskStatus(i)
					if ts.State != engine.TaskCompleted || ts.Transport != c.want {
						t.Fatalf("task %d: %v over %v (%v), want completed over %v", i, ts.State, ts.Transport, ts.Err, c.want)
					}
				}
				out := make([]byte, c.n)
				rand.Read(out)
				if _, err := f.mem.WriteAt(out, 0); err != nil {
					t.Fatal(err)
				}
				_, hooks2 := f.run(engine.OpWrite, []engine.Request{f.req(0, uint64(c.n))})
				if back := f.targetBytes(); !bytes.Equal(back, out) {
					t.Fatal("WRITE: the file differs from memory")
				}
				after := f.e.Stats()
				if hooks[0] != 1 || hooks2[0] != 1 || after.TasksCompleted-before.TasksCompleted != 3 {
					t.Fatalf("hooks %v %v, tasks completed %d: want each group and task reported once (3 tasks)", hooks, hooks2, after.TasksCompleted-before.TasksCompleted)
				}
				// A lane copy is a caller copy run by a lane: both count.
				lanes, copies := after.LaneCopies-before.LaneCopies, after.CallerCopies-before.CallerCopies
				if c.lanes && (lanes != 2 || copies != 2) {
					t.Fatalf("%d lane copies of %d caller copies, want 2 of 2 (the READ and the WRITE)", lanes, copies)
				}
			})
			t.Run("cancel before start", func(t *testing.T) {
				if c.memseg {
					t.Skip("a memory target does not overlap the holding WRITE to the file: nothing fences it")
				}
				if !c.queued {
					t.Skip("the caller copy starts inside Submit: a fenced group meets the ring")
				}
				f := newExecFixture(t, c, dir)
				want := f.sentinel()
				half := c.n / 2
				ts := f.fenced(ioTimeout, func(b *engine.Batch) {
					if err := b.Cancel(2); err != nil {
						t.Fatal(err)
					}
				})
				if ts[0].State != engine.TaskCompleted || ts[1].State != engine.TaskCancelled || ts[1].Transferred != 0 {
					t.Fatalf("READ tasks: %v (%v) and, cancelled, %v with %d bytes", ts[0].State, ts[0].Err, ts[1].State, ts[1].Transferred)
				}
				time.Sleep(20 * time.Millisecond)
				file := f.targetBytes() // the holding WRITE changed its first page
				copy(want, file[:half])
				if !bytes.Equal(f.memBytes(), want) {
					t.Fatal("the cancelled task's memory changed (or the other task's bytes are wrong)")
				}
			})
			t.Run("cancel unstarted", func(t *testing.T) {
				if !c.queued && !c.offRing {
					t.Skip("the caller copy runs whole inside Submit: nothing of it is handed out later")
				}
				depth := func(cfg *config.Engine) { cfg.IOUring.QueueDepth = 1 }
				if c.memseg {
					// One owner at a time whatever the queue depth: a
					// memory group runs in submission order.
					depth = func(*config.Engine) {}
				}
				f := newExecFixture(t, c, dir, depth)
				want := f.sentinel()
				held, release := make(chan int, 1024), make(chan struct{})
				var late atomic.Int64 // units of task 1 that reached a lane
				f.e.HoldUnits(func(task int) {
					if task != 0 {
						late.Add(1)
					}
					held <- task
					<-release
				})
				released := false
				defer func() {
					if !released {
						close(release)
					}
				}()
				b, err := f.e.AllocateBatch(2)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Free() })
				half := uint64(c.n / 2)
				if _, err := b.Submit(engine.OpRead, f.target, []engine.Request{f.req(0, half), f.req(half, uint64(c.n)-half)}, nil, ioTimeout); err != nil {
					t.Fatal(err)
				}
				select {
				case <-held:
				case <-time.After(ioTimeout):
					t.Fatal("no unit of the READ reached a lane")
				}
				if ts, _ := b.TaskStatus(1); ts.State != engine.TaskPending {
					t.Fatalf("task 1 is %v while task 0 is held on a lane, want pending (not handed to the executor yet)", ts.State)
				}
				if err := b.Cancel(1); err != nil {
					t.Fatalf("cancel of the task not yet handed to the executor: %v", err)
				}
				close(release)
				released = true
				b.Seal()
				if _, err := b.Wait(ioTimeout); err != nil {
					t.Fatal(err)
				}
				ts := b.TaskStatuses()
				if ts[0].State != engine.TaskCompleted || ts[1].State != engine.TaskCancelled || ts[1].Transferred != 0 {
					t.Fatalf("READ tasks: %v (%v) and, cancelled, %v with %d bytes", ts[0].State, ts[0].Err, ts[1].State, ts[1].Transferred)
				}
				time.Sleep(20 * time.Millisecond)
				if n := late.Load(); n != 0 {
					t.Fatalf("%d units of the cancelled task reached a lane", n)
				}
				copy(want, f.orig[:half])
				if !bytes.Equal(f.memBytes(), want) {
					t.Fatal("the cancelled task's memory changed (or the other task's bytes are wrong)")
				}
			})
			t.Run("cancel running", func(t *testing.T) { cancelRunning(t, c, dir) })
			t.Run("deadline", func(t *testing.T) {
				if c.memseg {
					t.Skip("a memory target does not overlap the holding WRITE to the file: nothing fences it")
				}
				if !c.queued {
					t.Skip("the caller copy starts inside Submit: a fenced group meets the ring")
				}
				f := newExecFixture(t, c, dir)
				want := f.sentinel()
				ts := f.fenced(50*time.Millisecond, func(*engine.Batch) { time.Sleep(150 * time.Millisecond) })
				for _, ts := range ts {
					if ts.State != engine.TaskFailed || engine.KindOf(ts.Err) != engine.KindTimeout || ts.Transferred != 0 {
						t.Fatalf("late READ: %v %v, %d bytes; want failed Timeout, nothing moved", ts.State, ts.Err, ts.Transferred)
					}
				}
				if !bytes.Equal(f.memBytes(), want) {
					t.Fatal("a READ past its deadline changed its memory")
				}
			})
			t.Run("short I/O", func(t *testing.T) {
				if c.memseg {
					t.Skip("a memory target does not overlap the holding WRITE to the file: nothing fences it")
				}
				if !c.queued {
					t.Skip("the caller copy starts inside Submit, right after the size check")
				}
				if c.ipc {
					t.Skip("a device region's size is fixed")
				}
				f := newExecFixture(t, c, dir)
				f.sentinel()
				cut := c.n/2 + 100
				ts := f.fenced(ioTimeout, func(*engine.Batch) { f.cutTarget(cut) })
				if ts[0].State != engine.TaskCompleted || ts[0].Transferred != uint64(c.n/2) {
					t.Fatalf("READ before the new end: %v %v, %d bytes", ts[0].State, ts[0].Err, ts[0].Transferred)
				}
				short := f.whole(cut - c.n/2)
				if ts[1].State != engine.TaskFailed || engine.KindOf(ts[1].Err) != engine.KindRange || ts[1].Transferred != short {
					t.Fatalf("READ past the new end: %v %v, %d bytes; want failed Range, %d bytes", ts[1].State, ts[1].Err, ts[1].Transferred, short)
				}
				file := f.targetBytes() // the holding WRITE changed its first page
				moved := c.n/2 + int(short)
				if got := f.memBytes(); len(file) != cut || !bytes.Equal(got[:moved], file[:moved]) {
					t.Fatal("the bytes before the new end differ from the file")
				}
			})
			t.Run("uncertain", func(t *testing.T) {
				if c.uncertain == nil {
					t.Skip("this executor always learns each unit's outcome")
				}
				// Two tasks handed out one at a time: the group stays
				// unquiesced however its second task ends (run, or failed
				// at dispatch past the deadline).
				f := newExecFixture(t, c, dir, func(cfg *config.Engine) { cfg.IOUring.QueueDepth = 1 })
				timeout := c.uncertain(f)
				half := uint64(c.n / 2)
				rep, err := f.e.SubmitAndWait(engine.OpRead, f.target, []engine.Request{f.req(0, half), f.req(half, uint64(c.n)-half)}, timeout)
				if err == nil || rep.LocallyDrained {
					t.Fatalf("err %v, report %+v: want a failure that is not locally drained", err, rep)
				}
				wantKind(t, rep.Err, engine.KindUnquiesced)
				wantKind(t, f.e.Unregister(f.mem), engine.KindBusy)
				if st := f.e.Stats(); st.UnquiescedGroups != 1 {
					t.Fatalf("unquiesced groups %d", st.UnquiescedGroups)
				}
				wantKind(t, f.e.Close(ioTimeout), engine.KindUnquiesced)
			})
			t.Run("remote effects", func(t *testing.T) {
				if !c.peer {
					t.Skip("a file has no remote effect beyond its CQEs (TestUnquiesced and the ring's own checks)")
				}
				if c.ipc {
					t.Skip("device requests copy on the GPU: TestIPC* check their effects")
				}
				for _, tc := range []struct {
					name   string
					effect engine.RemoteEffect // what the failing unit's WriteAt says
					n      uint64              // the WRITE's bytes
					failAt uint64              // the failing unit's offset
					after  int64               // it fails after this many units applied
					want   engine.RemoteEffect // the task's effect
				}{
					{"lost ack", engine.EffectUnknown, 4 * peerUnit, 3 * peerUnit, 0, engine.EffectUnknown},
					{"nothing posted", engine.EffectNone, peerUnit, 0, 0, engine.EffectNone},
					// The first unit reached nothing, the three after it
					// landed: the peer holds bytes past the reported
					// (empty) prefix, which is not "none".
					{"posted past the gap", engine.EffectNone, 4 * peerUnit, 0, 3, engine.EffectUnknown},
				} {
					t.Run(tc.name, func(t *testing.T) {
						f := newExecFixture(t, c, dir)
						eff := tc.effect
						f.remote.failOff, f.remote.failEffect, f.remote.failAfter = tc.failAt, &eff, tc.after
						b, _ := f.run(engine.OpWrite, []engine.Request{f.req(0, tc.n)})
						ts, _ := b.TaskStatus(0)
						if ts.State != engine.TaskFailed || ts.RemoteEffect != tc.want || ts.FailoverCount != 0 {
							t.Fatalf("WRITE: %v, effect %v, %d failovers (%v); want failed, effect %v, never retried", ts.State, ts.RemoteEffect, ts.FailoverCount, ts.Err, tc.want)
						}
						tries := 0
						for _, call := range f.remote.callLog() {
							if call == fmt.Sprintf("write %d+%d", tc.failAt, peerUnit) {
								tries++
							}
						}
						if tries != 1 {
							t.Fatalf("the failed unit was sent %d times (%v); want once, never replayed", tries, f.remote.callLog())
						}
					})
				}
				t.Run("deadline while running", func(t *testing.T) {
					f := newExecFixture(t, c, dir)
					rel := make(chan struct{})
					defer close(rel)
					f.remote.hold, f.remote.holdEnd = rel, uint64(c.n)
					start := time.Now()
					rep, err := f.e.SubmitAndWait(engine.OpWrite, f.target, []engine.Request{f.req(0, uint64(c.n))}, 100*time.Millisecond)
					wantKind(t, err, engine.KindTimeout)
					if rep.RemoteEffect != engine.EffectUnknown || !rep.LocallyDrained || time.Since(start) > 5*time.Second {
						t.Fatalf("WRITE cut by its deadline: effect %v, drained %v after %v; want unknown, drained, at once", rep.RemoteEffect, rep.LocallyDrained, time.Since(start))
					}
					if !bytes.Equal(f.remote.bytes(), f.orig) {
						t.Fatal("a held unit wrote after its deadline")
					}
				})
				t.Run("cancel running", func(t *testing.T) {
					f := newExecFixture(t, c, dir)
					rel := make(chan struct{})
					defer close(rel)
					f.remote.hold, f.remote.holdEnd = rel, uint64(c.n)
					b, err := f.e.AllocateBatch(2)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { b.Free() })
					half := uint64(c.n / 2)
					if _, err := b.Submit(engine.OpWrite, f.target, []engine.Request{f.req(0, half), f.req(half, half)}, nil, ioTimeout); err != nil {
						t.Fatal(err)
					}
					waitFor(t, "every unit of both tasks held in the peer", func() bool { return f.remote.writes.Load() >= int64(c.n/peerUnit) })
					if err := b.Cancel(0); err != nil {
						t.Fatalf("cancel of a running peer WRITE: %v", err)
					}
					if err := b.CancelAll(); err != nil {
						t.Fatal(err)
					}
					b.Seal()
					start := time.Now()
					if _, err := b.Wait(ioTimeout); err != nil {
						t.Fatal(err)
					}
					for i := range 2 {
						ts, _ := b.TaskStatus(i)
						if ts.State != engine.TaskCancelled || ts.RemoteEffect != engine.EffectUnknown || time.Since(start) > 5*time.Second {
							t.Fatalf("cut WRITE %d (cancel, then cancel_all): %v, effect %v (%v) after %v; want cancelled with effect unknown at once", i, ts.State, ts.RemoteEffect, ts.Err, time.Since(start))
						}
					}
					if !bytes.Equal(f.remote.bytes(), f.orig) {
						t.Fatal("a held unit wrote after its cut")
					}
				})
			})
		})
	}
}

// cancelRunning is the contract's "cancel running" check for case c.
func cancelRunning(t *testing.T, c execCase, dir string) {
	f := newExecFixture(t, c, dir)
	want := f.sentinel()
	held, release := make(chan int, 1024), make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	hold := func(task int) { held <- task; <-release }
	switch {
	case c.lanes:
		f.e.HoldLaneCopies(func() { hold(0) })
	case !c.queued && !c.offRing:
		f.e.HoldCallerCopies(func() { hold(0) })
	default:
		f.e.HoldUnits(hold)
	}
	b, err := f.e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	half := uint64(c.n / 2)
	submitted := make(chan error, 1)
	go func() { // a caller copy holds its submitter
		_, err := b.Submit(engine.OpRead, f.target, []engine.Request{f.req(0, half), f.req(half, uint64(c.n)-half)}, nil, ioTimeout)
		submitted <- err
	}()
	for first := -1; first != 0; {
		select {
		case first = <-held:
		case <-time.After(ioTimeout):
			t.Fatal("task 0 never reached its executor")
		}
	}
	if ts, _ := b.TaskStatus(0); ts.State != engine.TaskRunning {
		t.Fatalf("task 0 is %v while its executor holds it, want running", ts.State)
	}
	err = b.Cancel(0)
	switch {
	case c.cuts && err != nil:
		t.Fatalf("cancel of a running task on an executor that cuts: %v, want nil", err)
	case !c.cuts && engine.KindOf(err) != engine.KindBusy:
		t.Fatalf("cancel of a running task on an executor that cannot stop it: %v, want KindBusy", err)
	}
	close(release)
	released = true
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	b.Seal()
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	ts := b.TaskStatuses()
	if ts[1].State != engine.TaskCompleted || ts[1].Transferred != uint64(c.n)-half {
		t.Fatalf("the other task: %v (%v), %d bytes; want completed", ts[1].State, ts[1].Err, ts[1].Transferred)
	}
	copy(want[half:], f.orig[half:])
	if c.cuts {
		if ts[0].State != engine.TaskCancelled || ts[0].Transferred != 0 {
			t.Fatalf("the cut task: %v (%v), %d bytes; want cancelled, nothing moved", ts[0].State, ts[0].Err, ts[0].Transferred)
		}
	} else {
		if ts[0].State != engine.TaskCompleted || ts[0].Transferred != half {
			t.Fatalf("the refused cancel's task: %v (%v), %d bytes; want completed with %d", ts[0].State, ts[0].Err, ts[0].Transferred, half)
		}
		copy(want, f.orig[:half])
	}
	time.Sleep(20 * time.Millisecond)
	if !bytes.Equal(f.memBytes(), want) {
		t.Fatal("memory differs: a cut task moved bytes, or a running one did not finish")
	}
	if !c.ipc {
		return
	}
	// Once its copy is queued on the GPU a cuda_ipc task is past cutting.
	f = newExecFixture(t, c, dir)
	f.gpu.hang = make(chan struct{})
	hung := true
	defer func() {
		if hung {
			close(f.gpu.hang)
		}
	}()
	b, err = f.e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	if _, err := b.Submit(engine.OpRead, f.target, []engine.Request{f.req(0, uint64(c.n))}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the copy to be queued", func() bool { return f.gpu.dtods.Load() == 1 })
	wantKind(t, b.Cancel(0), engine.KindUnavailable)
	close(f.gpu.hang)
	hung = false
	b.Seal()
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	if ts, _ := b.TaskStatus(0); ts.State != engine.TaskCompleted || !bytes.Equal(f.memBytes(), f.orig) {
		t.Fatalf("the queued copy: %v (%v); want completed with the region's bytes", ts.State, ts.Err)
	}
}
