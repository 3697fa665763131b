package engine_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// specQoS is the spec's "JSON QoS configuration" example.
const specQoS = `{
  "qos": {
    "version": 1,
    "defaults": {"priority": "medium", "max_inflight_bytes": "64MiB", "max_inflight_requests": 128},
    "tenants": [
      {
        "name": "tenant-a",
        "defaults": {"max_inflight_bytes": "128MiB"},
        "intents": {
          "foreground_get": {"priority": "high"},
          "background_prefetch": {"priority": "low", "max_inflight_requests": 16}
        }
      }
    ]
  }
}`

func mustQoS(t *testing.T, doc string) *config.QoS {
	t.Helper()
	q, err := config.ParseQoSJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func resolve(t *testing.T, e *engine.Engine, tenant, intent string, prio *engine.Priority) *engine.QoSPolicy {
	t.Helper()
	p, err := e.ResolveQoS(engine.QoSContext{Tenant: tenant, Intent: intent, Priority: prio})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestQoSResolveSpecExample(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) { c.QoS = mustQoS(t, specQoS) })
	low := config.PriorityLow
	p := resolve(t, e, " Tenant-A ", "FOREGROUND_GET", &low)
	if p.Priority() != config.PriorityHigh || p.Matched() != "tenant-a/foreground_get" {
		t.Fatalf("tenant-a/foreground_get requested low: got %v via %q, want high via tenant-a/foreground_get", p.Priority(), p.Matched())
	}
	f := p.Explain().Contract
	if *f.MaxInflightBytes != 128<<20 || *f.MaxInflightRequests != 128 {
		t.Fatalf("foreground_get caps: bytes %d requests %d, want 128MiB (tenant) and 128 (global)", *f.MaxInflightBytes, *f.MaxInflightRequests)
	}
	bg := resolve(t, e, "tenant-a", "background_prefetch", nil).Explain().Contract
	if *bg.MaxInflightRequests != 16 || *bg.MaxInflightBytes != 128<<20 || *bg.Priority != "low" {
		t.Fatalf("background_prefetch: %+v", bg)
	}
	if p := resolve(t, e, "tenant-a", "unknown", nil); p.Matched() != "tenant-a" || p.Priority() != config.PriorityMedium {
		t.Fatalf("unknown intent resolved to %q %v, want the tenant default at medium", p.Matched(), p.Priority())
	}
	for _, who := range []string{"", "  ", "nobody"} {
		if p := resolve(t, e, who, "", nil); p.Matched() != "default" {
			t.Fatalf("tenant %q resolved to %q, want default", who, p.Matched())
		}
	}
	if n := len(e.QoSContracts()); n != 4 {
		t.Fatalf("%d contracts, want 4 (default, tenant-a, two intents)", n)
	}
	other := newEngine(t, func(c *config.Engine) { c.QoS = mustQoS(t, specQoS) })
	b, _ := other.AllocateBatch(1)
	defer b.Free()
	seg, reg := smallTarget(t, other, 4096)
	_, err := b.SubmitWith(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress(), Length: 4096}}, nil, engine.SubmitOptions{QoS: p})
	wantKind(t, err, engine.KindInvalid)
	if !errors.Is(err, engine.ErrForeignQoS) || b.TaskCount() != 0 {
		t.Fatalf("foreign policy: %v (tasks %d), want ErrForeignQoS and no task", err, b.TaskCount())
	}
}

func TestQoSDelayRequiresRuntimeQueue(t *testing.T) {
	cfg := config.DefaultEngine()
	cfg.QoS = mustQoS(t, `{"qos":{"defaults":{"max_inflight_bytes":"64MiB","allowed_degraded_actions":["delay","reject"]}}}`)
	_, err := engine.New(cfg)
	wantKind(t, err, engine.KindInvalid)
	cfg.RuntimeQueue.Enabled = true
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Close(time.Second)
}

// smallTarget is a file of n random bytes on tmpfs or the temp dir, and a
// region of the same size.
func smallTarget(t *testing.T, e *engine.Engine, n int) (*engine.Segment, *engine.Region) {
	t.Helper()
	needIOUring(t)
	path, _ := randomFile(t, t.TempDir(), "f", n)
	return openSeg(t, e, path, engine.PermReadWrite), register(t, e, uint64(n))
}

func read4k(reg *engine.Region, off uint64) []engine.Request {
	return []engine.Request{{Address: reg.BaseAddress() + off, TargetOffset: off, Length: 4096}}
}

func waitState(t *testing.T, b *engine.Batch) engine.State {
	t.Helper()
	b.Seal()
	st, err := b.Wait(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A reject-mode contract refuses a group over its cap at submit, before
// any charge; once the held group completes the same submission passes.
func TestQoSRejectOverCap(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.QoS = mustQoS(t, `{"qos":{"tenants":[{"name":"a","defaults":{"max_inflight_bytes":"8KiB"}}]}}`)
	})
	seg, reg := smallTarget(t, e, 16<<10)
	pol := resolve(t, e, "a", "", nil)
	release := e.HoldWindowForTest(64, 0) // nothing dispatches: A stays charged
	a, _ := e.AllocateBatch(4)
	if _, err := a.SubmitWith(engine.OpRead, seg, []engine.Request{read4k(reg, 0)[0], read4k(reg, 4096)[0]}, nil, engine.SubmitOptions{QoS: pol}); err != nil {
		t.Fatal(err)
	}
	b, _ := e.AllocateBatch(4)
	before := e.Stats().GroupsRejected
	_, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 8192), nil, engine.SubmitOptions{QoS: pol})
	wantKind(t, err, engine.KindExhausted)
	if b.TaskCount() != 0 || e.Stats().GroupsRejected != before+1 || e.Stats().QoS.Rejected != 1 {
		t.Fatalf("rejected group: tasks %d, stats %+v", b.TaskCount(), e.Stats().QoS)
	}
	if u := e.QoSUsage()[1]; u.Bytes != 8192 || u.Owners != 2 {
		t.Fatalf("usage of a: %+v, want 2 owners, 8192 bytes (the rejected group charged nothing)", u)
	}
	// Another tenant (the default contract, uncapped) is not affected.
	if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 8192), nil, engine.SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	release()
	if st := waitState(t, a); st != engine.StateCompleted {
		t.Fatalf("a: %v", st)
	}
	if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 12288), nil, engine.SubmitOptions{QoS: pol}); err != nil {
		t.Fatalf("after capacity freed: %v", err)
	}
	if st := waitState(t, b); st != engine.StateCompleted {
		t.Fatalf("b: %v", st)
	}
	a.Free()
	b.Free()
	if u := e.QoSUsage()[1]; u.Bytes != 0 || u.Owners != 0 {
		t.Fatalf("usage after drain: %+v", u)
	}
}

// Delay mode: a group over its contract's cap waits at its batch head,
// holding up its successors in that batch while another batch proceeds;
// it completes once capacity frees, and never waits past its deadline.
func TestQoSDelayBlockedHeadIndependentBatches(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.QoS = mustQoS(t, `{"qos":{"tenants":[{"name":"slow","defaults":{"max_inflight_requests":1,"allowed_degraded_actions":["delay"]}}]}}`)
	})
	seg, reg := smallTarget(t, e, 32<<10)
	slow := resolve(t, e, "slow", "", nil)
	release := e.HoldQoSForTest(slow, 1, 0)
	b1, _ := e.AllocateBatch(8)
	if _, err := b1.SubmitWith(engine.OpRead, seg, read4k(reg, 0), nil, engine.SubmitOptions{QoS: slow}); err != nil {
		t.Fatal(err)
	}
	if _, err := b1.SubmitWith(engine.OpRead, seg, read4k(reg, 4096), nil, engine.SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	b2, _ := e.AllocateBatch(8)
	if _, err := b2.SubmitWith(engine.OpRead, seg, read4k(reg, 8192), nil, engine.SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, b2); st != engine.StateCompleted {
		t.Fatalf("independent batch: %v", st)
	}
	waitFor(t, "the slow head to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	for i := 0; i < 2; i++ {
		if ts, _ := b1.TaskStatus(i); ts.State != engine.TaskPending {
			t.Fatalf("b1 task %d is %v while its head waits, want pending", i, ts.State)
		}
	}
	// A waiter whose deadline (shortened by Deadline) passes fails at it,
	// charging nothing.
	b3, _ := e.AllocateBatch(1)
	if _, err := b3.SubmitWith(engine.OpRead, seg, read4k(reg, 12288), nil, engine.SubmitOptions{QoS: slow, Timeout: time.Minute, Deadline: time.Now().Add(50 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, b3); st != engine.StateFailed {
		t.Fatalf("short deadline: %v", st)
	}
	if ts, _ := b3.TaskStatus(0); engine.KindOf(ts.Err) != engine.KindTimeout {
		t.Fatalf("short deadline task: %v", ts.Err)
	}
	release()
	if st := waitState(t, b1); st != engine.StateCompleted {
		t.Fatalf("b1 after capacity freed: %v", st)
	}
	if s := e.Stats(); s.QoS.Delayed < 1 || s.RuntimeQueue.Waiting != 0 {
		t.Fatalf("stats: %+v %+v", s.QoS, s.RuntimeQueue)
	}
	for _, b := range []*engine.Batch{b1, b2, b3} {
		b.Free()
	}
	if u := e.QoSUsage()[1]; u.Owners != 0 {
		t.Fatalf("usage after drain: %+v", u)
	}
}

// With a window of one owner, the order in which waiting batches get it
// is admission order (FIFO) or earliest deadline first (EDF).
func TestRuntimeQueueFIFOvsEDF(t *testing.T) {
	for _, edf := range []bool{false, true} {
		name := "fifo"
		if edf {
			name = "edf"
		}
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, func(c *config.Engine) {
				c.RuntimeQueue.Enabled = true
				c.RuntimeQueue.MaxDispatchOwners = 1
				c.RuntimeQueue.DeadlineAware = edf
				c.RuntimeQueue.PriorityAging = 0 // the order without aging (fairness_test.go has it)
			})
			seg, reg := smallTarget(t, e, 16<<10)
			var mu sync.Mutex
			var order []uint64
			e.OnGrantForTest(func(id uint64, _ int) { mu.Lock(); order = append(order, id); mu.Unlock() })
			release := e.HoldWindowForTest(1, 0)
			timeouts := []time.Duration{30 * time.Second, 10 * time.Second, 20 * time.Second}
			var bs []*engine.Batch
			for i, to := range timeouts {
				b, _ := e.AllocateBatch(1)
				if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, uint64(i)*4096), nil, engine.SubmitOptions{Timeout: to}); err != nil {
					t.Fatal(err)
				}
				bs = append(bs, b)
			}
			waitFor(t, "three waiters", func() bool { return e.Stats().RuntimeQueue.Waiting == 3 })
			release()
			for _, b := range bs {
				if st := waitState(t, b); st != engine.StateCompleted {
					t.Fatalf("batch %d: %v", b.ID(), st)
				}
				b.Free()
			}
			want := []uint64{bs[0].ID(), bs[1].ID(), bs[2].ID()}
			if edf {
				want = []uint64{bs[1].ID(), bs[2].ID(), bs[0].ID()}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
				t.Fatalf("dispatch order %v, want %v", order, want)
			}
		})
	}
}

// Many batches of many owners against a small window: the window's peak
// never exceeds its limits, and every byte arrives.
func TestRuntimeQueueWindowLimits(t *testing.T) {
	const owners, winBytes = 3, 48 << 10
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = owners
		c.RuntimeQueue.MaxDispatchBytes = winBytes
	})
	needIOUring(t)
	const n, per, size = 6, 16, 16 << 10
	path, want := randomFile(t, t.TempDir(), "f", n*per*size)
	seg := openSeg(t, e, path, engine.PermRead)
	reg := register(t, e, uint64(len(want)))
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]engine.Request, per)
			for i := range reqs {
				off := uint64((k*per + i) * size)
				reqs[i] = engine.Request{Address: reg.BaseAddress() + off, TargetOffset: off, Length: size}
			}
			if _, err := e.SubmitAndWait(engine.OpRead, seg, reqs, 20*time.Second); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !bytes.Equal(regionBytes(t, reg), want) {
		t.Fatal("bytes differ")
	}
	q := e.Stats().RuntimeQueue
	if q.PeakDispatchOwners > owners || q.PeakDispatchBytes > winBytes || q.Granted != n*per {
		t.Fatalf("window: %+v, want peaks <= %d owners, %d bytes and %d grants", q, owners, winBytes, n*per)
	}
	if q.DispatchOwners != 0 || q.OutstandingOwners != 0 || q.OutstandingBytes != 0 {
		t.Fatalf("charges left after drain: %+v", q)
	}
	// An owner larger than the window fails before any task is published.
	b, _ := e.AllocateBatch(1)
	defer b.Free()
	_, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress(), Length: winBytes + 4096}}, nil, 0)
	wantKind(t, err, engine.KindExhausted)
	if b.TaskCount() != 0 {
		t.Fatalf("%d tasks published", b.TaskCount())
	}
}

// With EDF and a positive mlu_local_threshold, an owner whose predicted
// time (measured rate) over its remaining time reaches the threshold is
// dropped with ErrDeadlineInfeasible; with no rate yet it runs.
func TestRuntimeQueueDeadlineInfeasible(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.DeadlineAware = true
		c.RuntimeQueue.MLULocalThreshold = 1e-9 // any known rate and a finite deadline
		c.IOUring.DirectIO = false
	})
	needIOUring(t)
	const size = 8 << 20
	path, _ := randomFile(t, t.TempDir(), "f", size)
	seg := openSeg(t, e, path, engine.PermRead)
	reg := register(t, e, size)
	reqs := func() []engine.Request {
		var r []engine.Request
		for off := uint64(0); off < size; off += 1 << 20 {
			r = append(r, engine.Request{Address: reg.BaseAddress() + off, TargetOffset: off, Length: 1 << 20})
		}
		return r
	}
	// Unknown rate: everything runs, and the runs measure the rate.
	for tries := 0; ; tries++ {
		if _, err := e.SubmitAndWait(engine.OpRead, seg, reqs(), 20*time.Second); err != nil {
			t.Fatalf("with no estimate yet: %v", err)
		}
		bw := e.Stats().RuntimeQueue.Bandwidth
		if len(bw) == 1 && bw[0].BytesPerSecond > 0 && bw[0].Path == "file_dram" {
			break
		}
		if tries == 100 {
			t.Fatalf("no bandwidth estimate after %d transfers: %+v", tries, bw)
		}
	}
	rep, err := e.SubmitAndWait(engine.OpRead, seg, reqs()[:2], 20*time.Second)
	if !errors.Is(err, engine.ErrDeadlineInfeasible) || engine.KindOf(err) != engine.KindTimeout || rep.CompletedRequests != 0 {
		t.Fatalf("infeasible: %v (report %+v)", err, rep)
	}
	if d := e.Stats().RuntimeQueue.DeadlineInfeasibleDrops; d != 2 {
		t.Fatalf("drops %d, want 2", d)
	}
}

// Priority and promotion_slack order waiters ahead of admission order.
func TestRuntimeQueuePriorityAndPromotion(t *testing.T) {
	for _, c := range []struct {
		name  string
		slack time.Duration
		prio  []config.Priority
		tos   []time.Duration
		want  []int
	}{
		{"priority", 0, []config.Priority{config.PriorityLow, config.PriorityMedium, config.PriorityHigh}, []time.Duration{30 * time.Second, 30 * time.Second, 30 * time.Second}, []int{2, 1, 0}},
		{"promotion", 10 * time.Second, []config.Priority{config.PriorityHigh, config.PriorityLow, config.PriorityLow}, []time.Duration{30 * time.Second, 8 * time.Second, 5 * time.Second}, []int{2, 1, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, func(cfg *config.Engine) {
				cfg.RuntimeQueue.Enabled = true
				cfg.RuntimeQueue.MaxDispatchOwners = 1
				cfg.RuntimeQueue.PromotionSlack = config.Duration(c.slack)
				cfg.RuntimeQueue.PriorityAging = 0 // strict priority (fairness_test.go ages)
			})
			seg, reg := smallTarget(t, e, 16<<10)
			var mu sync.Mutex
			var order []uint64
			e.OnGrantForTest(func(id uint64, _ int) { mu.Lock(); order = append(order, id); mu.Unlock() })
			release := e.HoldWindowForTest(1, 0)
			var bs []*engine.Batch
			for i := range c.prio {
				b, _ := e.AllocateBatch(1)
				pol := resolve(t, e, "", "", &c.prio[i])
				if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, uint64(i)*4096), nil, engine.SubmitOptions{Timeout: c.tos[i], QoS: pol}); err != nil {
					t.Fatal(err)
				}
				bs = append(bs, b)
			}
			waitFor(t, "three waiters", func() bool { return e.Stats().RuntimeQueue.Waiting == 3 })
			release()
			for _, b := range bs {
				if st := waitState(t, b); st != engine.StateCompleted {
					t.Fatalf("batch %d: %v", b.ID(), st)
				}
				b.Free()
			}
			mu.Lock()
			defer mu.Unlock()
			for k, i := range c.want {
				if order[k] != bs[i].ID() {
					t.Fatalf("dispatch order %v, want batches %d, %d, %d", order, bs[c.want[0]].ID(), bs[c.want[1]].ID(), bs[c.want[2]].ID())
				}
			}
		})
	}
}

// When some contract delays, a reject-only contract charges at the batch
// head; if it filled after the submission was accepted, the submission
// fails there, before any I/O, and its batch goes on.
func TestQoSRejectOnlyFillsAfterEnqueue(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.QoS = mustQoS(t, `{"qos":{"tenants":[
			{"name":"d","defaults":{"max_inflight_requests":1,"allowed_degraded_actions":["delay"]}},
			{"name":"r","defaults":{"max_inflight_requests":1}}]}}`)
	})
	seg, reg := smallTarget(t, e, 16<<10)
	d, r := resolve(t, e, "d", "", nil), resolve(t, e, "r", "", nil)
	releaseD := e.HoldQoSForTest(d, 1, 0)
	b, _ := e.AllocateBatch(4)
	if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 0), nil, engine.SubmitOptions{QoS: d}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 4096), nil, engine.SubmitOptions{QoS: r}); err != nil {
		t.Fatal(err) // r is free now
	}
	if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 8192), nil, engine.SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	releaseR := e.HoldQoSForTest(r, 1, 0) // r fills after enqueue
	defer releaseR()
	waitFor(t, "the d head to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	releaseD()
	if st := waitState(t, b); st != engine.StateFailed {
		t.Fatalf("batch: %v", st)
	}
	ts := b.TaskStatuses()
	if ts[0].State != engine.TaskCompleted || ts[1].State != engine.TaskFailed || ts[2].State != engine.TaskCompleted {
		t.Fatalf("tasks %v %v %v, want completed, failed, completed", ts[0].State, ts[1].State, ts[2].State)
	}
	if engine.KindOf(ts[1].Err) != engine.KindExhausted || ts[1].RemoteEffect != engine.EffectNone || ts[1].Transferred != 0 {
		t.Fatalf("task 1: %v (effect %v, %d bytes)", ts[1].Err, ts[1].RemoteEffect, ts[1].Transferred)
	}
	if s := e.Stats().QoS; s.DispatchRejected != 1 {
		t.Fatalf("qos stats %+v", s)
	}
	b.Free()
}

// Cancelling a group that waits for a window share ends it and returns
// its charges, with progress_fallback_interval 0 (wake-ups only): cancel
// wakes the sleeping worker.
func TestRuntimeQueueCancelWakesWaiter(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = 1
		c.ProgressFallbackInterval = 0
	})
	seg, reg := smallTarget(t, e, 16<<10)
	release := e.HoldWindowForTest(1, 0)
	defer release()
	b, _ := e.AllocateBatch(2)
	if _, err := b.SubmitWith(engine.OpRead, seg, append(read4k(reg, 0), read4k(reg, 4096)...), nil, engine.SubmitOptions{Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	if err := b.CancelAll(); err != nil {
		t.Fatal(err)
	}
	b.Seal()
	st, err := b.Wait(5 * time.Second)
	if err != nil || st != engine.StateCancelled {
		t.Fatalf("after cancel: %v %v, want cancelled at once", st, err)
	}
	if q := e.Stats().RuntimeQueue; q.Waiting != 0 || q.OutstandingOwners != 0 {
		t.Fatalf("queue after cancel: %+v", q)
	}
	b.Free()
}

// Device-memory groups (staged GPU path, over the test-only GPU) take the
// window whole at their batch head and return each owner's share as it
// completes; the staged path gets its own bandwidth estimate.
func TestRuntimeQueueStagedGPU(t *testing.T) {
	const owners, winBytes = 4, 1 << 20
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = owners
		c.RuntimeQueue.MaxDispatchBytes = winBytes
	})
	path, orig := randomFile(t, t.TempDir(), "src", 4<<20)
	src := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 4<<20)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reqs []engine.Request
			for i := 0; i < owners; i++ {
				off := uint64(k<<20 + i<<18)
				reqs = append(reqs, engine.Request{Address: d.BaseAddress() + off, TargetOffset: off, Length: 1 << 18})
			}
			if _, err := e.SubmitAndWait(engine.OpRead, src, reqs, 20*time.Second); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := make([]byte, len(orig))
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, orig) {
		t.Fatal("device bytes differ from the file")
	}
	q := e.Stats().RuntimeQueue
	if q.PeakDispatchOwners > owners || q.PeakDispatchBytes > winBytes || q.DispatchOwners != 0 || q.Granted != 16 {
		t.Fatalf("window %+v", q)
	}
	if len(q.Bandwidth) != 1 || q.Bandwidth[0].Path != "staged_gpu" || q.Bandwidth[0].InflightBytes != 0 {
		t.Fatalf("bandwidth %+v", q.Bandwidth)
	}
	// A device group larger than the window fails at submit.
	b, _ := e.AllocateBatch(8)
	defer b.Free()
	var big []engine.Request
	for i := 0; i < owners+1; i++ {
		big = append(big, engine.Request{Address: d.BaseAddress() + uint64(i)<<12, TargetOffset: uint64(i) << 12, Length: 4096})
	}
	_, err := b.Submit(engine.OpRead, src, big, nil, 0)
	wantKind(t, err, engine.KindExhausted)
}

// Under a delay contract the engine-wide max_inflight_bytes waits too: a
// submission over it is accepted and runs once the bytes ahead of it are
// released; without delay it fails at submit.
func TestEngineBytesWaitUnderDelay(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.MaxInflightBytes = 16 << 10
		c.MaxTransferBytes = 16 << 10
		c.CallerFastPathBytes = 4 << 10
		c.QoS = mustQoS(t, `{"qos":{"tenants":[{"name":"d","defaults":{"allowed_degraded_actions":["delay"]}}]}}`)
	})
	seg, reg := smallTarget(t, e, 32<<10)
	d := resolve(t, e, "d", "", nil)
	release := e.HoldWindowForTest(64, 0) // A is charged but cannot run
	a, _ := e.AllocateBatch(4)
	var four []engine.Request
	for i := 0; i < 4; i++ {
		four = append(four, read4k(reg, uint64(i)*4096)...)
	}
	if _, err := a.SubmitWith(engine.OpRead, seg, four, nil, engine.SubmitOptions{QoS: d}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A to hold the engine bytes", func() bool { return e.Stats().InflightBytes == 16<<10 })
	// Not delayed: over max_inflight_bytes fails at submit, as before.
	b0, _ := e.AllocateBatch(1)
	_, err := b0.Submit(engine.OpRead, seg, read4k(reg, 16<<10), nil, 0)
	wantKind(t, err, engine.KindExhausted)
	b0.Free()
	// Delayed: accepted, waits at its head.
	b, _ := e.AllocateBatch(1)
	if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 16<<10), nil, engine.SubmitOptions{QoS: d}); err != nil {
		t.Fatalf("delay contract over max_inflight_bytes: %v, want accepted", err)
	}
	waitFor(t, "B to wait for bytes", func() bool { return e.Stats().QoS.Delayed == 1 })
	if ts, _ := b.TaskStatus(0); ts.State != engine.TaskPending {
		t.Fatalf("B is %v while the bytes are taken", ts.State)
	}
	release()
	if st := waitState(t, a); st != engine.StateCompleted {
		t.Fatalf("a: %v", st)
	}
	if st := waitState(t, b); st != engine.StateCompleted {
		t.Fatalf("b after the bytes freed: %v", st)
	}
	a.Free()
	b.Free()
	if s := e.Stats(); s.InflightBytes != 0 || s.InflightGroups != 0 {
		t.Fatalf("engine charges left: %d bytes, %d groups", s.InflightBytes, s.InflightGroups)
	}
	// One submission larger than the whole budget still fails at submit.
	c, _ := e.AllocateBatch(8)
	defer c.Free()
	_, err = c.SubmitWith(engine.OpRead, seg, append(four, read4k(reg, 16<<10)...), nil, engine.SubmitOptions{QoS: d})
	wantKind(t, err, engine.KindExhausted)
}

// A batch waiting for admission holds no ring: with a pool of one ring,
// an independent batch still runs while the other waits.
func TestAdmissionWaiterHoldsNoRing(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.IOUring.MaxRings = 1
		c.QoS = mustQoS(t, `{"qos":{"tenants":[{"name":"slow","defaults":{"max_inflight_requests":1,"allowed_degraded_actions":["delay"]}}]}}`)
	})
	seg, reg := smallTarget(t, e, 16<<10)
	slow := resolve(t, e, "slow", "", nil)
	release := e.HoldQoSForTest(slow, 1, 0)
	a, _ := e.AllocateBatch(1)
	if _, err := a.SubmitWith(engine.OpRead, seg, read4k(reg, 0), nil, engine.SubmitOptions{QoS: slow, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	waitFor(t, "a's ring back in the pool", func() bool {
		s := e.Stats().IOUring
		return s != nil && s.RingsIdle == s.Rings
	})
	c, _ := e.AllocateBatch(1)
	if _, err := c.SubmitWith(engine.OpRead, seg, read4k(reg, 4096), nil, engine.SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, c); st != engine.StateCompleted {
		t.Fatalf("independent batch: %v", st)
	}
	release()
	if st := waitState(t, a); st != engine.StateCompleted {
		t.Fatalf("a: %v", st)
	}
	a.Free()
	c.Free()
}
