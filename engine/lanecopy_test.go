package engine_test

// lanecopy_test.go: which caller copies the host copy lanes take (a
// probe, then every group submitted while one is on the lanes), and that
// a lane copy past its deadline moves nothing.

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// laneFixture is an engine whose lanes wait at held until release, a
// tmpfs file of n 4 KiB pages and as much memory.
type laneFixture struct {
	e       *engine.Engine
	seg     *engine.Segment
	mem     *engine.Region
	orig    []byte
	release func()
}

func newLaneFixture(t *testing.T, probe, pages int) *laneFixture {
	t.Helper()
	shm := tmpfsDir(t)
	f := &laneFixture{e: newEngine(t, func(c *config.Engine) { c.LaneCopyProbe = probe })}
	held := make(chan struct{})
	var once sync.Once
	f.release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(f.release)
	f.e.HoldLaneCopies(func() { <-held })
	var path string
	path, f.orig = randomFile(t, shm, "f", pages*4096)
	f.seg = openSeg(t, f.e, path, engine.PermRead)
	f.mem = register(t, f.e, uint64(pages*4096))
	return f
}

// submit queues a READ of page i into page i of memory.
func (f *laneFixture) submit(t *testing.T, b *engine.Batch, i int, timeout time.Duration) int {
	t.Helper()
	tr, err := b.Submit(engine.OpRead, f.seg, []engine.Request{{Address: f.mem.BaseAddress() + uint64(i)*4096, TargetOffset: uint64(i) * 4096, Length: 4096}}, nil, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return tr.First
}

// TestLaneCopyRoutes: a client that waits for each small group gets
// lane_copy_probe-1 caller copies (done when Submit returns), then a
// probe on the lanes; a group submitted while the probe is on the lanes
// follows it there (both still running after Submit returned: neither
// was copied inline); once they finished, copies are inline again.
func TestLaneCopyRoutes(t *testing.T) {
	const probe = 4
	pages := 2*probe + 1
	f := newLaneFixture(t, probe, pages)
	b, err := f.e.AllocateBatch(pages)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	inline := func(i int) {
		t.Helper()
		before := f.e.Stats().LaneCopies
		task := f.submit(t, b, i, ioTimeout)
		if ts, _ := b.TaskStatus(task); ts.State != engine.TaskCompleted || ts.Transport != engine.TransportCopy {
			t.Fatalf("group %d: %v over %v when Submit returned, want completed by the caller copy", i, ts.State, ts.Transport)
		}
		if n := f.e.Stats().LaneCopies - before; n != 0 {
			t.Fatalf("group %d: %d lane copies, want it copied inline", i, n)
		}
	}
	for i := range probe - 1 {
		inline(i)
	}
	base := f.e.Stats().LaneCopies
	p := f.submit(t, b, probe-1, ioTimeout) // the probe, held on its lane
	q := f.submit(t, b, probe, ioTimeout)   // submitted while the probe is on the lanes
	for _, task := range []int{p, q} {
		if ts, _ := b.TaskStatus(task); ts.State != engine.TaskRunning {
			t.Fatalf("task %d is %v while the lanes are held, want running (on the lanes, not copied inline)", task, ts.State)
		}
	}
	f.release()
	waitFor(t, "both lane copies", func() bool {
		a, _ := b.TaskStatus(p)
		c, _ := b.TaskStatus(q)
		return a.State == engine.TaskCompleted && c.State == engine.TaskCompleted
	})
	if n := f.e.Stats().LaneCopies - base; n != 2 {
		t.Fatalf("%d lane copies, want 2", n)
	}
	for i := probe + 1; i < 2*probe; i++ {
		inline(i)
	}
	if got := regionBytes(t, f.mem)[:2*probe*4096]; !bytes.Equal(got, f.orig[:2*probe*4096]) {
		t.Fatal("memory differs from the file")
	}
}

// TestLaneCopyDeadline: a lane copy that reaches its lane past its
// deadline fails Timeout and leaves its memory untouched.
func TestLaneCopyDeadline(t *testing.T) {
	f := newLaneFixture(t, 1, 1)
	b, err := f.e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	f.submit(t, b, 0, 50*time.Millisecond)
	time.Sleep(150 * time.Millisecond)
	f.release()
	waitFor(t, "the late lane copy to end", func() bool {
		ts, _ := b.TaskStatus(0)
		return ts.State == engine.TaskFailed || ts.State == engine.TaskCompleted
	})
	ts, _ := b.TaskStatus(0)
	if ts.State != engine.TaskFailed || engine.KindOf(ts.Err) != engine.KindTimeout || ts.Transferred != 0 {
		t.Fatalf("late lane copy: %v %v, %d bytes; want failed Timeout, nothing moved", ts.State, ts.Err, ts.Transferred)
	}
	if !bytes.Equal(regionBytes(t, f.mem), make([]byte, 4096)) {
		t.Fatal("a lane copy past its deadline changed its memory")
	}
}

// TestLaneCopyConcurrentSubmitters: while one submitter of a batch is in
// its caller copy, a group another goroutine submits is copied by its
// own submitter too, even where the probe would send it to the lanes: the
// client already copies on several cores.
func TestLaneCopyConcurrentSubmitters(t *testing.T) {
	const probe = 2 // the second caller copy in a row is a probe
	f := newLaneFixture(t, probe, 2)
	f.release() // the lanes run freely
	copying, resume := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	f.e.HoldCallerCopies(func() {
		if held.CompareAndSwap(false, true) { // the first copy only
			close(copying)
			<-resume
		}
	})
	b, err := f.e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	done := make(chan int)
	go func() { done <- f.submit(t, b, 0, ioTimeout) }() // held in its copy
	<-copying
	before := f.e.Stats().LaneCopies
	task := f.submit(t, b, 1, ioTimeout)
	if ts, _ := b.TaskStatus(task); ts.State != engine.TaskCompleted || ts.Transport != engine.TransportCopy {
		t.Fatalf("second submitter's group: %v over %v when Submit returned, want completed by its own copy", ts.State, ts.Transport)
	}
	if n := f.e.Stats().LaneCopies - before; n != 0 {
		t.Fatalf("%d lane copies while another submitter was copying, want 0", n)
	}
	close(resume)
	if ts, _ := b.TaskStatus(<-done); ts.State != engine.TaskCompleted {
		t.Fatalf("first submitter's group is %v", ts.State)
	}
	if got := regionBytes(t, f.mem); !bytes.Equal(got, f.orig) {
		t.Fatal("memory differs from the file")
	}
}
