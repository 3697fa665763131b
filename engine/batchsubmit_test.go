package engine_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// streamFromHook keeps depth single-request 4 KiB reads in flight on one
// batch, each replaced from OnGroupDone (the bench's shape), until total
// groups finished. Submission n reads file page n%depth into region page
// n%depth, so the region ends up holding the file whatever the order.
func streamFromHook(t *testing.T, e *engine.Engine, s *engine.Segment, r *engine.Region, total, depth int) {
	t.Helper()
	b, err := e.AllocateBatch(total)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	var mu sync.Mutex
	submitted, finished := 0, 0
	done := make(chan struct{})
	submit := func() {
		mu.Lock()
		if submitted == total {
			mu.Unlock()
			return
		}
		off := uint64(submitted%depth) * 4096
		submitted++
		mu.Unlock()
		if _, err := b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + off, TargetOffset: off, Length: 4096}}, nil, ioTimeout); err != nil {
			t.Error(err)
		}
	}
	b.OnGroupDone(func(rep engine.Report) {
		if rep.Err != nil || rep.CompletedBytes != 4096 {
			t.Errorf("report %+v", rep)
		}
		mu.Lock()
		finished++
		n := finished
		mu.Unlock()
		if n == total {
			close(done)
			return
		}
		submit() // from the hook, on the worker, as the bench does
	})
	for range depth {
		submit()
	}
	select {
	case <-done:
	case <-time.After(ioTimeout):
		t.Fatalf("only %d of %d groups reported", finished, total)
	}
	b.Seal()
	if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
}

// TestHookResubmitsShareEnter: buffered reads a hook submits while the
// worker drains a burst of completions reach the kernel together in one
// io_uring_enter (batchsubmit.go), instead of one system call each: on
// tmpfs the read completes inside the enter, so a call per 4 KiB op made
// the worker spend most of its time entering the kernel. O_DIRECT reads
// keep going out one by one, at once (the disk works meanwhile).
func TestHookResubmitsShareEnter(t *testing.T) {
	needIOUring(t)
	const total, depth = 2000, 32
	for name, dir := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, func(c *config.Engine) { c.CallerCopy = false }) // ring submissions
			path, data := randomFile(t, dir, "f", depth*4096)
			s := openSeg(t, e, path, engine.PermRead)
			info, err := e.FileSegmentInfo(s)
			if err != nil {
				t.Fatal(err)
			}
			r := register(t, e, depth*4096)
			before := e.Stats().IOUring
			streamFromHook(t, e, s, r, total, depth)
			after := e.Stats().IOUring
			if got := regionBytes(t, r); !bytes.Equal(got, data) {
				t.Fatal("region does not hold the file's bytes")
			}
			sqes, calls := after.Submitted-before.Submitted, after.SubmitCalls-before.SubmitCalls
			t.Logf("%s (direct %v): %d SQEs in %d io_uring_enter calls", name, info.DirectIO, sqes, calls)
			if sqes != total {
				t.Fatalf("%d SQEs submitted, want %d", sqes, total)
			}
			if info.DirectIO {
				// Hook submissions go out at once, one call each (a few
				// meet the worker holding the SQ side and go with its next
				// call: submitThrough is best effort).
				if calls < total/2 {
					t.Fatalf("O_DIRECT: %d SQEs in %d calls, want about one call per hook submission", sqes, calls)
				}
				return
			}
			if calls > total/4 {
				t.Fatalf("buffered: %d SQEs in %d io_uring_enter calls, want at most %d (submissions from a drain share a call)", sqes, calls, total/4)
			}
		})
	}
}
