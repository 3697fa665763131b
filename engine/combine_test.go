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
// once that goroutine has taken the combining list (it then waits for
// b's lock, which is released).
func viaCombiner(t *testing.T, e *engine.Engine, b *engine.Batch, submit func()) {
	t.Helper()
	unlock := b.LockBatch()
	defer unlock()
	viaCombinerLocked(t, e, submit)
}

// viaCombinerLocked is viaCombiner for a test that holds the batch's
// lock already, and keeps it.
func viaCombinerLocked(t *testing.T, e *engine.Engine, submit func()) {
	t.Helper()
	took := make(chan struct{})
	var once sync.Once
	e.NotifyCombinerTakes(func() { once.Do(func() { close(took) }) })
	go submit()
	select {
	case <-took:
	case <-time.After(ioTimeout):
		t.Fatal("the submitter never combined")
	}
}

// twoCopies is a batch of two task slots on a 1 MiB tmpfs file, for
// tests of two caller copies: submit(i) reads the file's 4 KiB block i
// into the region's block i.
type twoCopies struct {
	e    *engine.Engine
	b    *engine.Batch
	seg  *engine.Segment
	r    *engine.Region
	orig []byte
}

func newTwoCopies(t *testing.T) *twoCopies {
	t.Helper()
	f := &twoCopies{e: newEngine(t, nil)}
	var path string
	path, f.orig = randomFile(t, tmpfsDir(t), "f", 1<<20)
	f.seg = openSeg(t, f.e, path, engine.PermRead)
	t.Cleanup(func() { f.e.CloseFileSegment(f.seg, ioTimeout) })
	f.r = register(t, f.e, 8192)
	var err error
	if f.b, err = f.e.AllocateBatch(2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.b.Free() })
	return f
}

func (f *twoCopies) submit(i uint64) (engine.TaskRange, error) {
	return f.b.Submit(engine.OpRead, f.seg, []engine.Request{{Address: f.r.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096}}, nil, ioTimeout)
}

// wantCompleted seals the batch and checks that it completed with the
// file's first two blocks in the region.
func (f *twoCopies) wantCompleted(t *testing.T) {
	t.Helper()
	f.b.Seal()
	if st, err := f.b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("batch %v, %v", st, err)
	}
	if got := regionBytes(t, f.r); !bytes.Equal(got, f.orig[:8192]) {
		t.Fatal("memory does not hold the file's bytes")
	}
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
	f := newTwoCopies(t)
	e, b := f.e, f.b

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
		_, err := f.submit(i)
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
	viaCombiner(t, e, b, func() { errA <- submit(1) }) // A
	if err := <-errA; err != nil {
		t.Fatal(err)
	}
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	if err := <-checked; err != nil {
		t.Fatal(err) // the stranded finish then holds the batch and segment open
	}
	f.wantCompleted(t)
}

// TestCombinerEntryWaits: a submitter whose entry waits behind a
// combiner that holds the lock sleeps for its decision; the combiner
// that applies its entry wakes it, and its group runs.
func TestCombinerEntryWaits(t *testing.T) {
	f := newTwoCopies(t)
	e, b := f.e, f.b
	held, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	e.HoldCombiners(func() {
		if once.CompareAndSwap(false, true) { // the first combiner
			close(held)
			<-release
		}
	})
	submit := f.submit
	type result struct {
		tr  engine.TaskRange
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	viaCombiner(t, e, b, func() { tr, err := submit(0); first <- result{tr, err} })
	<-held
	go func() { tr, err := submit(1); second <- result{tr, err} }()
	waitFor(t, "the second submitter asleep for its entry", b.CombineWaiterAsleep)
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
	f.wantCompleted(t)
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

// TestCombinerEntryDeliversNoReports: a submitter whose entry makes it
// the combiner, and which then applies another group's finish (pushed
// while it held the combining lock), runs no report hook before its own
// copy: its group is dispatched by then, and a hook (which may resubmit,
// again and again) would hold its copy back. It delivers the report
// after its copy.
func TestCombinerEntryDeliversNoReports(t *testing.T) {
	f := newTwoCopies(t)
	e, b := f.e, f.b
	copiedB, releaseB := make(chan struct{}), make(chan struct{})
	var copies, starts atomic.Int32
	var sStarted atomic.Bool
	e.HoldCopiedCallerCopies(func() {
		if copies.Add(1) == 1 { // B
			close(copiedB)
			<-releaseB
		}
	})
	e.HoldCallerCopies(func() {
		if starts.Add(1) == 2 { // S, the second copy to start
			sStarted.Store(true)
		}
	})
	early := make(chan bool, 2)
	b.OnGroupDone(func(rep engine.Report) {
		if rep.Tasks.First == 0 {
			early <- !sStarted.Load()
		}
	})
	submit := func(i uint64) error {
		_, err := f.submit(i)
		return err
	}
	errB, errS := make(chan error, 1), make(chan error, 1)
	go func() { errB <- submit(0) }() // B
	<-copiedB
	unlock := b.LockBatch()
	viaCombinerLocked(t, e, func() { errS <- submit(1) }) // S, holding the combining lock
	close(releaseB)                                       // B pushes its finish: S holds the list's lock, the test b.mu
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-errS; err != nil {
		t.Fatal(err)
	}
	f.wantCompleted(t)
	select {
	case wasEarly := <-early:
		if wasEarly {
			t.Fatal("B's report hook ran before the combining submitter's own copy started")
		}
	case <-time.After(ioTimeout):
		t.Fatal("B's report was never delivered")
	}
}

// TestCombinerRecycleStress: several workers each allocate a batch,
// submit one-request caller copies into it from several goroutines (so
// entries and finishes go through the combiner), with a hook that
// resubmits, then seal, wait and free it, over and over: freed batches'
// groups come back through free lists to other batches whose combiners
// run at the same time. The race detector catches a group touched after
// it was recycled.
func TestCombinerRecycleStress(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	const size = 1 << 20
	path, _ := randomFile(t, shm, "f", size)
	seg := openSeg(t, e, path, engine.PermRead)
	defer e.CloseFileSegment(seg, ioTimeout)
	const workers, subs, per, rounds = 4, 12, 40, 20
	r := register(t, e, workers*subs*4096*2)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for round := range rounds {
				capacity := subs*per*2 + 8
				b, err := e.AllocateBatch(capacity)
				if err != nil {
					t.Error(err)
					return
				}
				var hooked atomic.Int64
				var reports atomic.Int64
				b.OnGroupDone(func(rep engine.Report) {
					reports.Add(1)
					if rep.Err != nil {
						t.Errorf("report %+v", rep)
					}
					// Resubmit from the hook, up to subs*per times.
					if k := hooked.Add(1); k <= int64(per) {
						slot := uint64(w*subs*2+subs) + uint64(k)%uint64(subs)
						if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress() + slot*4096, TargetOffset: uint64(k) * 4096, Length: 4096}}, nil, ioTimeout); err != nil && engine.KindOf(err) != engine.KindExhausted {
							t.Errorf("hook submit: %v", err)
						}
					}
				})
				var sg sync.WaitGroup
				for s := range subs {
					sg.Go(func() {
						slot := uint64((w*subs*2 + s) * 4096)
						for k := range per {
							off := uint64((round*per+k+s*7)*4096) % size
							for {
								_, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress() + slot, TargetOffset: off, Length: 4096}}, nil, ioTimeout)
								if err != nil && engine.KindOf(err) == engine.KindExhausted {
									time.Sleep(100 * time.Microsecond)
									continue
								}
								if err != nil {
									t.Error(err)
									return
								}
								break
							}
						}
					})
				}
				sg.Wait()
				b.Seal()
				if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
					t.Errorf("worker %d round %d: %v %v", w, round, st, err)
					return
				}
				for _, ts := range b.TaskStatuses() {
					if ts.State != engine.TaskCompleted || ts.Transferred != 4096 {
						t.Errorf("task %d: %v %d", ts.Index, ts.State, ts.Transferred)
						return
					}
				}
				if err := b.Free(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
