package engine_test

// progress_test.go: explicit progress, the poll-delay schedule and
// deferred free (enable_progress_worker), and a progress report that
// arrives after its batch was freed.

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestNextPollDelay(t *testing.T) {
	for _, c := range []struct {
		count uint64
		want  time.Duration
	}{
		{0, 0}, {127, 0}, {128, time.Microsecond}, {129, 2 * time.Microsecond},
		{135, 128 * time.Microsecond}, {136, 200 * time.Microsecond}, {1000, 200 * time.Microsecond},
		{^uint64(0), 200 * time.Microsecond},
	} {
		if got := engine.NextPollDelay(c.count); got != c.want {
			t.Errorf("NextPollDelay(%d) = %v, want %v", c.count, got, c.want)
		}
	}
	engine.WaitBeforeNextPoll(0)
	engine.WaitBeforeNextPoll(200)
}

// TestProgressStartsParkedAttempt: with auto failover on poll disabled,
// Progress (not a status poll) starts the next attempt, one per call.
func TestProgressStartsParkedAttempt(t *testing.T) {
	r := newFailoverRig(t, func(c *config.Engine) { c.EnableAutoFailoverOnPoll = false })
	b := parkedBatch(t, r)
	if st, err := b.Progress(); err != nil || st != engine.StateOpen {
		t.Fatalf("progress: %v %v", st, err)
	}
	if b.ParkedAttempts() != 0 || r.e.Stats().Failovers != 1 {
		t.Fatalf("parked %d failovers %d after one progress", b.ParkedAttempts(), r.e.Stats().Failovers)
	}
	if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
	if ts, _ := b.TaskStatus(0); ts.FailoverCount != 1 || ts.Transport != engine.TransportIOUring {
		t.Fatalf("task %+v", ts)
	}
	if _, err := r.e.ProgressBatch(b.ID() + 100); err == nil {
		t.Fatal("progress of a foreign ID succeeded")
	} else {
		wantKind(t, err, engine.KindNotFound)
	}
}

// TestDeferredFree: with enable_progress_worker a busy Free fences the ID
// at once; the reservation returns once the work drains. Without it Free
// is ErrBusy.
func TestDeferredFree(t *testing.T) {
	for _, deferred := range []bool{false, true} {
		t.Run(fmt.Sprint("deferred=", deferred), func(t *testing.T) {
			ref := &refTransport{stall: make(chan struct{})}
			defer ref.release()
			e := newEngine(t, func(c *config.Engine) {
				c.EnableProgressWorker = deferred
				c.MaxAllocatedBatches = 1
			}, ref)
			path, _ := randomFile(t, t.TempDir(), "f", 16384)
			seg := openSeg(t, e, path, engine.PermRead)
			reg := register(t, e, 16384)
			b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress(), Length: 4096}}, nil, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the op to reach the transport", func() bool { return ref.prepared.Load() == 1 })
			err = b.Free()
			if !deferred {
				wantKind(t, err, engine.KindBusy)
				ref.release()
				b.Wait(ioTimeout)
				if err := b.Free(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err != nil {
				t.Fatalf("deferred free: %v", err)
			}
			_, err = b.TaskStatus(0)
			wantKind(t, err, engine.KindNotFound)
			_, err = e.Batch(b.ID())
			wantKind(t, err, engine.KindNotFound)
			if st := e.Stats(); st.DeferredBatches != 1 || st.ReservedRequests != 1 || st.Batches != 0 {
				t.Fatalf("stats while draining: deferred %d reserved %d batches %d", st.DeferredBatches, st.ReservedRequests, st.Batches)
			}
			_, err = e.AllocateBatch(1)
			wantKind(t, err, engine.KindExhausted) // the deferred batch holds the one slot
			select {
			case <-b.Retired():
				t.Fatal("retired before its work drained")
			default:
			}
			ref.release()
			<-b.Retired()
			if st := e.Stats(); st.DeferredBatches != 0 || st.ReservedRequests != 0 || st.TasksCompleted != 1 {
				t.Fatalf("stats after drain: %+v", st)
			}
			nb, err := e.AllocateBatch(1)
			if err != nil {
				t.Fatal(err)
			}
			nb.Free()
		})
	}
}

// TestDeferredFreeClose: engine close drains deferred batches too.
func TestDeferredFreeClose(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	defer ref.release()
	cfg := config.DefaultEngine()
	cfg.EnableProgressWorker = true
	e, err := engine.New(cfg, ref)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := randomFile(t, t.TempDir(), "f", 16384)
	seg := openSeg(t, e, path, engine.PermRead)
	reg := register(t, e, 16384)
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress(), Length: 4096}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the op to reach the transport", func() bool { return ref.prepared.Load() == 1 })
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.Close(50*time.Millisecond), engine.KindTimeout)
	ref.release()
	if err := e.Close(ioTimeout); err != nil {
		t.Fatal(err)
	}
}

// TestFreeRacingWorker: many batches on real io_uring, each freed right
// after submit while its worker runs; every reservation comes back.
func TestFreeRacingWorker(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, func(c *config.Engine) { c.EnableProgressWorker = true }, realTransports(config.DefaultEngine())...)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	reg := register(t, e, 1<<20)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 25; k++ {
				reqs := make([]engine.Request, 4)
				for i := range reqs {
					off := uint64((w*4 + i) * 16384)
					reqs[i] = engine.Request{Address: reg.BaseAddress() + off, TargetOffset: off, Length: 16384}
				}
				b, err := e.SubmitAsync(engine.OpRead, seg, reqs, nil, ioTimeout)
				if err != nil {
					t.Error(err)
					return
				}
				if err := b.Free(); err != nil {
					t.Error(err)
					return
				}
				<-b.Retired()
			}
		}()
	}
	wg.Wait()
	if st := e.Stats(); st.DeferredBatches != 0 || st.ReservedRequests != 0 || st.Batches != 0 || st.InflightGroups != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCancelRacingCompletion: many batches progress at once on real
// io_uring while CancelAll races their completions; every task ends in
// exactly one terminal state, the batch state agrees with its tasks, and
// every charge returns.
func TestCancelRacingCompletion(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		reg := register(t, e, 256<<10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				b, err := e.AllocateBatch(64)
				if err != nil {
					t.Error(err)
					return
				}
				for g := 0; g < 4; g++ {
					reqs := make([]engine.Request, 16)
					for i := range reqs {
						off := uint64(i * 16384)
						reqs[i] = engine.Request{Address: reg.BaseAddress() + off, TargetOffset: off, Length: 16384}
					}
					if _, err := b.Submit(engine.OpRead, seg, reqs, nil, ioTimeout); err != nil {
						t.Error(err)
						return
					}
				}
				b.CancelAll()
				b.Seal()
				st, err := b.Wait(ioTimeout)
				if err != nil {
					t.Error(err)
					return
				}
				var done, cancelled int
				for _, ts := range b.TaskStatuses() {
					switch ts.State {
					case engine.TaskCompleted:
						done++
					case engine.TaskCancelled:
						cancelled++
					default:
						t.Errorf("task %d ended %v", ts.Index, ts.State)
					}
				}
				if (cancelled > 0) != (st == engine.StateCancelled) {
					t.Errorf("state %v with %d cancelled, %d completed", st, cancelled, done)
				}
				if err := b.Free(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if st := e.Stats(); st.InflightGroups != 0 || st.InflightBytes != 0 || st.ReservedRequests != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestProgressAfterFree: a lane publishes a task's progress outside its
// job's lock, so the progress of a unit that finished first can arrive
// after another lane reported the task's last unit, the batch ended and
// the client freed it. It used to index the freed batch's task list
// (index out of range on a host copy lane, seen about 1 run in 100 of the
// host copy tests); it is dropped. The first progress report is held on
// its lane until the batch is freed (a task of two units reports
// progress only when its first unit finishes first: the test submits
// again until that order came).
func TestProgressAfterFree(t *testing.T) {
	shm := tmpfsDir(t)
	if runtime.GOMAXPROCS(0) < 2 { // two lanes: one held, one finishing the task
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	const size = 8 << 20 // two units of one task
	e := newEngine(t, nil)
	path, orig := randomFile(t, shm, "f", size)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, size)
	release := make(chan struct{})
	var held atomic.Bool
	e.HoldProgress(func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	})
	read := func() {
		t.Helper()
		b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: size}}, nil, ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			t.Fatalf("batch %v (%v), want completed (a progress report held: %v)", st, err, held.Load())
		}
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if held.Load() {
			select {
			case <-release:
			default:
				close(release)
			}
		}
	}()
	for try := 0; !held.Load(); try++ {
		if try == 100 {
			t.Fatal("the first unit never finished before the second in 100 READs")
		}
		read() // freed with the report still held when it was
	}
	close(release)
	// The held report is dropped; the lanes go on serving.
	got := make([]byte, size)
	if _, err := r.WriteAt(got, 0); err != nil {
		t.Fatal(err)
	}
	read()
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("memory differs from the file after a READ (%v)", err)
	}
}
