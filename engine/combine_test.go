package engine_test

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// viaCombiner runs submit on a goroutine of its own while the test holds
// b's lock, so that its entry goes through the combiner, and returns
// once that goroutine holds the combining lock (it then waits for b's
// lock, which is released).
func viaCombiner(t *testing.T, b *engine.Batch, submit func()) {
	t.Helper()
	unlock := b.LockBatch()
	go submit()
	waitFor(t, "the submitter combining", b.CombinerRunning)
	unlock()
}

// TestCombinerFinishNotStranded: a finish pushed while the combiner
// holds its lock after taking the list (its TryLock fails, and its
// submitter returns) is applied once that combiner lets the lock go:
// the combiner looks at the list again. The combiner here is another
// submitter's entry (sent through the combiner by holding the batch's
// lock at its start), held after applying its list, with the batch's
// lock, until the first submitter has pushed its finish and returned;
// the check runs before the combiner's own copy and finish, which would
// otherwise apply the node too.
func TestCombinerFinishNotStranded(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	path, orig := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	defer e.CloseFileSegment(seg, ioTimeout)
	r := register(t, e, 8192)
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()

	copiedB, releaseB, returnedB := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var copies, helds atomic.Int32
	e.HoldCopiedCallerCopies(func() {
		if copies.Add(1) == 1 { // B, the first submitter
			close(copiedB)
			<-releaseB
		}
	})
	var armed atomic.Bool
	e.HoldCombiners(func() {
		if armed.CompareAndSwap(true, false) { // A, holding the lock
			close(releaseB)
			<-returnedB
		}
	})
	checked := make(chan error, 1)
	e.HoldCallerCopies(func() {
		if helds.Add(1) != 2 {
			return
		}
		// A, before its copy: its entry returned after its combiner's
		// second look, so B's finish is applied by now.
		ts, err := b.TaskStatus(0)
		if err != nil || ts.State != engine.TaskCompleted {
			checked <- fmt.Errorf("B's task is %v (%v) after its finish was pushed: stranded on the combining list", ts.State, err)
			return
		}
		checked <- nil
	})
	submit := func(i uint64) error {
		_, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096}}, nil, ioTimeout)
		return err
	}
	errB := make(chan error, 1)
	go func() {
		errB <- submit(0)
		close(returnedB)
	}()
	<-copiedB
	armed.Store(true)
	errA := make(chan error, 1)
	viaCombiner(t, b, func() { errA <- submit(1) }) // A
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	if err := <-checked; err != nil {
		t.Fatal(err) // the stranded finish then holds the batch and segment open
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("batch %v, %v", st, err)
	}
	if got := regionBytes(t, r); !bytes.Equal(got, orig[:8192]) {
		t.Fatal("memory does not hold the file's bytes")
	}
}

// TestCombinerEntryWaits: a submitter whose entry waits behind a
// combiner that holds the lock gets its decision either while it spins
// (spins: a spin longer than the test) or after it slept (sleeps: no
// spin, the engine's choice with fewer than 4 processors); the combiner
// that applies its entry wakes it, and its group runs.
func TestCombinerEntryWaits(t *testing.T) {
	for _, c := range []struct {
		name  string
		spin  time.Duration
		ready func(*engine.Batch) bool
	}{
		{"sleeps", 0, (*engine.Batch).CombineWaiterAsleep},
		{"spins", time.Hour, (*engine.Batch).CombineWaiterPending},
	} {
		t.Run(c.name, func(t *testing.T) { testCombinerEntryWaits(t, c.spin, c.ready) })
	}
}

func testCombinerEntryWaits(t *testing.T, spin time.Duration, ready func(*engine.Batch) bool) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	e.SetCombineSpin(spin)
	path, orig := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	defer e.CloseFileSegment(seg, ioTimeout)
	r := register(t, e, 8192)
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	held, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	e.HoldCombiners(func() {
		if once.CompareAndSwap(false, true) { // the first combiner
			close(held)
			<-release
		}
	})
	submit := func(i uint64) (engine.TaskRange, error) {
		return b.Submit(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096}}, nil, ioTimeout)
	}
	type result struct {
		tr  engine.TaskRange
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	viaCombiner(t, b, func() { tr, err := submit(0); first <- result{tr, err} })
	<-held
	go func() { tr, err := submit(1); second <- result{tr, err} }()
	waitFor(t, "the second submitter waiting for its entry", func() bool { return ready(b) })
	close(release)
	for i, ch := range []chan result{first, second} {
		select {
		case res := <-ch:
			if res.err != nil || res.tr != (engine.TaskRange{First: i, Count: 1}) {
				t.Fatalf("submitter %d: %+v, %v", i, res.tr, res.err)
			}
		case <-time.After(ioTimeout):
			t.Fatalf("submitter %d never returned", i)
		}
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("batch %v, %v", st, err)
	}
	if got := regionBytes(t, r); !bytes.Equal(got, orig[:8192]) {
		t.Fatal("memory does not hold the file's bytes")
	}
}

// TestCombinerManySubmitters: 16 goroutines submit 4 KiB caller copies
// into one batch at once, each waiting for its report (the shape of
// bench file at queue depth 16); every task completes once with its
// bytes, reports arrive once each, and the batch's counts add up.
func TestCombinerManySubmitters(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	const slots, per = 16, 200
	const size = 1 << 20
	path, orig := randomFile(t, shm, "f", size)
	seg := openSeg(t, e, path, engine.PermRead)
	defer e.CloseFileSegment(seg, ioTimeout)
	r := register(t, e, slots*4096)
	b, err := e.AllocateBatch(slots * per)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	done := make([]chan engine.Report, slots*per)
	for i := range done {
		done[i] = make(chan engine.Report, 1)
	}
	var reports atomic.Int64
	b.OnGroupDone(func(rep engine.Report) {
		reports.Add(1)
		done[rep.Tasks.First] <- rep
	})
	before := e.Stats()
	var wg sync.WaitGroup
	for s := range slots {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for k := range per {
				off := uint64((s*per+k)*4096) % size
				tr, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress() + uint64(s)*4096, TargetOffset: off, Length: 4096}}, nil, ioTimeout)
				if err != nil {
					t.Error(err)
					return
				}
				select {
				case rep := <-done[tr.First]:
					if rep.Err != nil || rep.CompletedBytes != 4096 {
						t.Errorf("task %d: %d bytes, %v", tr.First, rep.CompletedBytes, rep.Err)
						return
					}
				case <-time.After(ioTimeout):
					t.Errorf("task %d: no report", tr.First)
					return
				}
				if _, err := r.ReadAt(buf, int64(s)*4096); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(buf, orig[off:off+4096]) {
					t.Errorf("slot %d request %d: bytes differ from the file at %d", s, k, off)
					return
				}
			}
		})
	}
	wg.Wait()
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("batch %v, %v", st, err)
	}
	if n := reports.Load(); n != slots*per {
		t.Fatalf("%d reports, want %d", n, slots*per)
	}
	ts := b.TaskStatuses()
	if len(ts) != slots*per {
		t.Fatalf("%d tasks, want %d", len(ts), slots*per)
	}
	for _, s := range ts {
		if s.State != engine.TaskCompleted || s.Transferred != 4096 {
			t.Fatalf("task %d: %v, %d bytes", s.Index, s.State, s.Transferred)
		}
	}
	after := e.Stats()
	if got := after.CallerCopies - before.CallerCopies; got != slots*per {
		t.Fatalf("%d caller copies, want %d", got, slots*per)
	}
}
