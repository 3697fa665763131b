package engine_test

// Fairness of admission between tenants and priorities: a waiter holds
// back only the waiters it competes with, aging bounds how long priority
// can pass a waiter, and a request may ask for more than the default
// priority only where its contract allows it.

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func submitWith(t *testing.T, e *engine.Engine, seg *engine.Segment, reqs []engine.Request, o engine.SubmitOptions) *engine.Batch {
	t.Helper()
	b, err := e.AllocateBatch(len(reqs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SubmitWith(engine.OpRead, seg, reqs, nil, o); err != nil {
		t.Fatal(err)
	}
	b.Seal()
	return b
}

// The starvation table: tenant a's contract is full and 8 of its
// submissions wait for it; tenant b has its own contract, empty. b's
// reads are admitted at once, whatever the priorities, while a's still
// wait; a's complete once its capacity frees.
func TestQoSFullContractHoldsBackOnlyItsOwn(t *testing.T) {
	for _, c := range []struct {
		name         string
		aPrio, bPrio string // contract priority of a, request priority of b
		// tight: 6 KiB of engine-wide max_inflight_bytes, so b's 4 KiB
		// and one of a's would not both fit: a's waiters still cannot
		// use them while their own contract is full.
		tight bool
	}{
		{"a high, b low", `,"priority":"high"`, "low", false},
		{"a medium, b medium", "", "medium", false},
		{"engine bytes tight", "", "low", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			const cap = 8 << 20
			e := newEngine(t, func(cfg *config.Engine) {
				if c.tight {
					cfg.MaxInflightBytes = 6 << 10
					cfg.MaxTransferBytes = 4 << 10
					cfg.CallerFastPathBytes = 4 << 10
				}
				cfg.RuntimeQueue.Enabled = true
				cfg.QoS = mustQoS(t, fmt.Sprintf(`{"qos":{"defaults":{"max_inflight_bytes":"8MiB","allowed_degraded_actions":["delay"]},
					"tenants":[{"name":"a","defaults":{"max_inflight_bytes":"8MiB"%s}},{"name":"b"}]}}`, c.aPrio))
			})
			seg, reg := smallTarget(t, e, 64<<10)
			a := resolve(t, e, "a", "", nil)
			bp, err := config.ParsePriority(c.bPrio)
			if err != nil {
				t.Fatal(err)
			}
			b := resolve(t, e, "b", "", &bp)
			release := e.HoldQoSForTest(a, 0, cap) // a's contract is full
			var as []*engine.Batch
			for i := 0; i < 8; i++ {
				as = append(as, submitWith(t, e, seg, read4k(reg, uint64(i)*4096), engine.SubmitOptions{QoS: a, Timeout: time.Minute}))
			}
			waitFor(t, "a's 8 submissions to wait", func() bool { return e.QoSUsage()[1].Waiting == 8 })
			for i := 0; i < 4; i++ {
				bb := submitWith(t, e, seg, read4k(reg, uint64(8+i)*4096), engine.SubmitOptions{QoS: b, Timeout: 5 * time.Second})
				st, err := bb.Wait(10 * time.Second)
				if err != nil || st != engine.StateCompleted {
					ts, _ := bb.TaskStatus(0)
					t.Fatalf("b's read %d behind a's full contract: %v %v (task %v: %v), want completed at once", i, st, err, ts.State, ts.Err)
				}
				bb.Free()
			}
			if u := e.QoSUsage()[1]; u.Waiting != 8 {
				t.Fatalf("a's usage %+v: want its 8 submissions still waiting", u)
			}
			release()
			for _, ab := range as {
				if st, err := ab.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
					t.Fatalf("a after its capacity freed: %v %v", st, err)
				}
				ab.Free()
			}
		})
	}
}

// The engine-wide max_inflight_bytes is shared: a better waiter that only
// lacks those bytes (its contract has room) still holds back a worse
// waiter of another contract that would fit, so the bytes x returns go to
// it first.
func TestQoSSharedBytesKeepOrder(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.MaxInflightBytes = 16 << 10
		c.MaxTransferBytes = 16 << 10
		c.CallerFastPathBytes = 4 << 10
		c.QoS = mustQoS(t, `{"qos":{"defaults":{"max_priority":"high"},"tenants":[
			{"name":"a","defaults":{"allowed_degraded_actions":["delay"]}},
			{"name":"b","defaults":{"allowed_degraded_actions":["delay"]}}]}}`)
	})
	seg, reg := smallTarget(t, e, 32<<10)
	releaseWin := e.HoldWindowForTest(64, 0)
	// x (default contract, not delayed) takes 8 KiB of the 16 at submit,
	// then waits for the held window, keeping them.
	x := submitWith(t, e, seg, append(read4k(reg, 0), read4k(reg, 4096)...), engine.SubmitOptions{})
	waitFor(t, "x to hold 8 KiB", func() bool { return e.Stats().InflightBytes == 8<<10 })
	high, low := config.PriorityHigh, config.PriorityLow
	var twelve []engine.Request
	for i := 0; i < 3; i++ {
		twelve = append(twelve, read4k(reg, uint64(2+i)*4096)...)
	}
	a := submitWith(t, e, seg, twelve, engine.SubmitOptions{QoS: resolve(t, e, "a", "", &high)})
	waitFor(t, "a to wait for the engine bytes", func() bool { return e.Stats().QoS.Delayed == 1 })
	b := submitWith(t, e, seg, read4k(reg, 5*4096), engine.SubmitOptions{QoS: resolve(t, e, "b", "", &low)})
	waitFor(t, "b to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 3 })
	if s := e.Stats(); s.InflightBytes != 8<<10 || s.QoS.Delayed != 2 {
		t.Fatalf("b (4 KiB, would fit) passed a (12 KiB, waiting for the shared bytes): in-flight bytes %d, head waits %d; want 8192 and 2", s.InflightBytes, s.QoS.Delayed)
	}
	releaseWin()
	for _, bb := range []*engine.Batch{x, a, b} {
		if st, err := bb.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
			t.Fatalf("batch %d: %v %v", bb.ID(), st, err)
		}
		bb.Free()
	}
}

// A waiter whose capacity has come back but that has not re-run its gate
// yet (held there: no wake-ups) holds back nobody it would fit beside: a
// later low-priority read, of another contract or of its own, goes at
// once although a's waiter is better placed. The read's deadline comes
// before the workers' own 1 s poll, so a read held back would fail.
func TestQoSWaiterThatFitsHoldsBackNobody(t *testing.T) {
	for _, tenant := range []string{"b", "a"} {
		t.Run("later read of "+tenant, func(t *testing.T) {
			e := newEngine(t, func(c *config.Engine) {
				c.RuntimeQueue.Enabled = true
				c.RuntimeQueue.PriorityAging = 0
				c.ProgressFallbackInterval = 0
				c.QoS = mustQoS(t, `{"qos":{"tenants":[
					{"name":"a","defaults":{"max_inflight_requests":2,"allowed_degraded_actions":["delay"]}},
					{"name":"b","defaults":{"allowed_degraded_actions":["delay"]}}]}}`)
			})
			seg, reg := smallTarget(t, e, 16<<10)
			pa := resolve(t, e, "a", "", nil)
			low := config.PriorityLow
			pl := resolve(t, e, tenant, "", &low)
			hold := e.HoldQoSForTest(pa, 2, 0)
			a := submitWith(t, e, seg, read4k(reg, 0), engine.SubmitOptions{QoS: pa, Timeout: time.Minute})
			waitFor(t, "a to wait for its contract", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
			resume := e.QuietWakesForTest()
			hold() // room for two again; a is not poked
			l := submitWith(t, e, seg, read4k(reg, 4096), engine.SubmitOptions{QoS: pl, Timeout: 900 * time.Millisecond})
			st, err := l.Wait(10 * time.Second)
			resume()
			if err != nil || st != engine.StateCompleted {
				ts, _ := l.TaskStatus(0)
				t.Fatalf("low read beside a waiter that fits: %v %v (%v), want completed at once", st, err, ts.Err)
			}
			l.Free()
			if st, err := a.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
				t.Fatalf("a: %v %v", st, err)
			}
			a.Free()
		})
	}
}

// The same for the dispatch window: a better window waiter that would
// fit beside a later one, but has not re-run its gate, does not hold it
// back.
func TestRuntimeQueueWaiterThatFitsHoldsBackNobody(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = 2
		c.RuntimeQueue.PriorityAging = 0
		c.ProgressFallbackInterval = 0
	})
	seg, reg := smallTarget(t, e, 16<<10)
	high, low := config.PriorityHigh, config.PriorityLow
	hold := e.HoldWindowForTest(2, 0)
	h := submitWith(t, e, seg, read4k(reg, 0), engine.SubmitOptions{QoS: resolve(t, e, "", "", &high), Timeout: time.Minute})
	waitFor(t, "h to wait for the window", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	resume := e.QuietWakesForTest()
	hold() // room for two owners; h is not poked
	l := submitWith(t, e, seg, read4k(reg, 4096), engine.SubmitOptions{QoS: resolve(t, e, "", "", &low), Timeout: 900 * time.Millisecond})
	st, err := l.Wait(10 * time.Second)
	resume()
	if err != nil || st != engine.StateCompleted {
		ts, _ := l.TaskStatus(0)
		t.Fatalf("low read beside a window waiter that fits: %v %v (%v), want completed at once", st, err, ts.Err)
	}
	l.Free()
	if st, err := h.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
		t.Fatalf("h: %v %v", st, err)
	}
	h.Free()
}

// Aging: a low-priority waiter that has waited priority_aging goes before
// a fresh high-priority one; before that, or with aging off, priority
// wins. Each case only depends on "at least this long", never on "at
// most".
func TestRuntimeQueuePriorityAging(t *testing.T) {
	for _, c := range []struct {
		name     string
		aging    time.Duration
		sleep    time.Duration // between the low and the high submission
		lowFirst bool
	}{
		{"not yet aged", time.Hour, 0, false},
		{"aged", 50 * time.Millisecond, 100 * time.Millisecond, true},
		{"aging off", 0, 100 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, func(cfg *config.Engine) {
				cfg.RuntimeQueue.Enabled = true
				cfg.RuntimeQueue.MaxDispatchOwners = 1
				cfg.RuntimeQueue.PriorityAging = config.Duration(c.aging)
			})
			seg, reg := smallTarget(t, e, 16<<10)
			var mu sync.Mutex
			var order []uint64
			e.OnGrantForTest(func(id uint64, _ int) { mu.Lock(); order = append(order, id); mu.Unlock() })
			release := e.HoldWindowForTest(1, 0)
			low, high := config.PriorityLow, config.PriorityHigh
			l := submitWith(t, e, seg, read4k(reg, 0), engine.SubmitOptions{QoS: resolve(t, e, "", "", &low)})
			waitFor(t, "the low one to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
			time.Sleep(c.sleep)
			h := submitWith(t, e, seg, read4k(reg, 4096), engine.SubmitOptions{QoS: resolve(t, e, "", "", &high)})
			waitFor(t, "both to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 2 })
			release()
			for _, b := range []*engine.Batch{l, h} {
				if st, err := b.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
					t.Fatalf("batch %d: %v %v", b.ID(), st, err)
				}
				b.Free()
			}
			want := []uint64{h.ID(), l.ID()}
			if c.lowFirst {
				want = []uint64{l.ID(), h.ID()}
			}
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(order) != fmt.Sprint(want) {
				t.Fatalf("grants %v, want %v (low %d, high %d)", order, want, l.ID(), h.ID())
			}
		})
	}
}

// Under sustained high-priority load on a one-owner window (four
// submitters, so high ones always wait when the window frees), a low
// priority read still completes, within its deadline of 20 aging
// intervals; without aging it starves until that deadline.
func TestPriorityAgingUnderSustainedLoad(t *testing.T) {
	const aging = 100 * time.Millisecond
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = 1
		c.RuntimeQueue.PriorityAging = config.Duration(aging)
	})
	seg, reg := smallTarget(t, e, 64<<10)
	high, low := config.PriorityHigh, config.PriorityLow
	hp, lp := resolve(t, e, "", "", &high), resolve(t, e, "", "", &low)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var highDone atomic.Int64
	errs := make(chan error, 4)
	for k := 0; k < 4; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				b, err := e.AllocateBatch(1)
				if err == nil {
					_, err = b.SubmitWith(engine.OpRead, seg, read4k(reg, uint64(1+k)*4096), nil, engine.SubmitOptions{QoS: hp})
				}
				if err == nil {
					b.Seal()
					var st engine.State
					if st, err = b.Wait(10 * time.Second); err == nil && st != engine.StateCompleted {
						err = fmt.Errorf("high read %v", st)
					}
					b.Free()
				}
				if err != nil {
					errs <- err
					return
				}
				highDone.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	waitFor(t, "high-priority load", func() bool { return highDone.Load() > 100 })
	before := highDone.Load()
	t0 := time.Now()
	l := submitWith(t, e, seg, read4k(reg, 0), engine.SubmitOptions{QoS: lp, Timeout: 20 * aging})
	st, err := l.Wait(10 * time.Second)
	during := highDone.Load() - before
	if err != nil || st != engine.StateCompleted {
		ts, _ := l.TaskStatus(0)
		t.Fatalf("low read under load: %v %v (%v), %d high reads ran meanwhile", st, err, ts.Err, during)
	}
	l.Free()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if during == 0 {
		t.Fatal("no high read ran while the low one waited: the load was not sustained")
	}
	t.Logf("%d high reads ran while the low one waited %v", during, time.Since(t0))
}

// A request may ask for a priority more urgent than the default only
// where its contract's max_priority allows it; a contract that sets its
// own priority replaces the request's; without QoS any priority goes.
func TestQoSMaxPriority(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.QoS = mustQoS(t, `{"qos":{"tenants":[
			{"name":"plain"},
			{"name":"vip","defaults":{"max_priority":"high"}},
			{"name":"bulk","defaults":{"max_priority":"low"}},
			{"name":"fixed","defaults":{"priority":"low"}}]}}`)
	})
	high, med, low := config.PriorityHigh, config.PriorityMedium, config.PriorityLow
	for _, c := range []struct {
		tenant string
		prio   *config.Priority
		want   config.Priority
		denied bool
	}{
		{"plain", nil, med, false},
		{"plain", &low, low, false},
		{"plain", &med, med, false},
		{"plain", &high, 0, true},
		{"nobody", &high, 0, true}, // the global default
		{"vip", &high, high, false},
		{"bulk", &med, 0, true},
		{"bulk", &low, low, false},
		{"fixed", &high, low, false},
	} {
		p, err := e.ResolveQoS(engine.QoSContext{Tenant: c.tenant, Priority: c.prio})
		if c.denied {
			wantKind(t, err, engine.KindPermission)
			continue
		}
		if err != nil || p.Priority() != c.want {
			t.Errorf("%s asking %v: %v %v, want %v", c.tenant, c.prio, p, err, c.want)
		}
	}
	if _, err := e.ResolveQoS(engine.QoSContext{Tenant: "plain", Priority: &high}); err == nil ||
		err.Error() != `resolve qos: permission denied: priority high: qos contract "plain" allows requests at most priority medium (its max_priority)` {
		t.Errorf("message: %v", err)
	}
	if got := e.QoSContracts()[2].MaxPriority; got != "high" {
		t.Errorf("/qos/contracts max_priority of vip: %q", got)
	}
	off := newEngine(t, nil)
	if p, err := off.ResolveQoS(engine.QoSContext{Priority: &high}); err != nil || p.Priority() != high {
		t.Errorf("QoS off, asking high: %v %v", p, err)
	}
}

// Names compare exactly: no control characters, no Unicode case folding.
func TestQoSResolveNames(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.QoS = mustQoS(t, `{"qos":{"tenants":[{"name":"key"}]}}`)
	})
	for _, c := range []struct {
		tenant, matched string
	}{
		{"key", "key"},
		{" KEY\t", "key"},
		{"\u212aey", "default"}, // KELVIN SIGN is not 'k'
		{"\u212aEY", "default"},
	} {
		if p := resolve(t, e, c.tenant, "", nil); p.Matched() != c.matched {
			t.Errorf("tenant %q matched %q, want %q", c.tenant, p.Matched(), c.matched)
		}
	}
	for _, bad := range []string{"ke\x00y", "key\x00", "k\x7fy", "k\u0085y", "k\ney", "\xff"} {
		_, err := e.ResolveQoS(engine.QoSContext{Tenant: bad})
		wantKind(t, err, engine.KindInvalid)
		_, err = e.ResolveQoS(engine.QoSContext{Intent: bad})
		wantKind(t, err, engine.KindInvalid)
	}
}

// A waiter held back only by the order (its own share fits, a better one
// does not) goes once it ages, with no capacity returned to poke it and
// no fallback polling: the worker's sleep ends when its waiter ages. The
// low read's deadline comes before the worker's own 1 s poll, so a worker
// that slept on would fail it at its deadline.
func TestPriorityAgingWakesWaiter(t *testing.T) {
	const aging = 200 * time.Millisecond
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchBytes = 16 << 10
		c.RuntimeQueue.PriorityAging = config.Duration(aging)
		c.ProgressFallbackInterval = 0
	})
	seg, reg := smallTarget(t, e, 32<<10)
	hold := e.HoldWindowForTest(0, 8<<10)
	full := e.HoldWindowForTest(0, 8<<10) // the window is full
	high, low := config.PriorityHigh, config.PriorityLow
	l := submitWith(t, e, seg, read4k(reg, 16<<10), engine.SubmitOptions{QoS: resolve(t, e, "", "", &low), Timeout: 900 * time.Millisecond})
	waitFor(t, "the low one to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	h := submitWith(t, e, seg, []engine.Request{{Address: reg.BaseAddress(), Length: 12 << 10}}, engine.SubmitOptions{QoS: resolve(t, e, "", "", &high)})
	waitFor(t, "the high one to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 2 })
	full() // 8 KiB free: the low read fits, the high one does not but goes first until the low one ages
	if st, err := l.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
		ts, _ := l.TaskStatus(0)
		t.Fatalf("low read behind a high one that does not fit: %v %v (%v), want completed once aged", st, err, ts.Err)
	}
	l.Free()
	if ts, _ := h.TaskStatus(0); ts.State != engine.TaskPending {
		t.Fatalf("the high read is %v, want still pending (its share does not fit)", ts.State)
	}
	hold()
	if st, err := h.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
		t.Fatalf("high after the window freed: %v %v", st, err)
	}
	h.Free()
}

// BenchmarkQoSOtherTenantLatency: tenant a keeps its 8 MiB delay contract
// full (16 submitters of 1 MiB reads, so about 8 always wait at their
// batch heads); each iteration is one 1 MiB read of tenant b, whose own 8
// MiB contract is empty. Reports b's latency percentiles.
func BenchmarkQoSOtherTenantLatency(b *testing.B) {
	for _, prio := range []config.Priority{config.PriorityMedium, config.PriorityLow} {
		b.Run("b "+prio.String(), func(b *testing.B) {
			if !haveIOUring {
				b.Skip("io_uring backend not built")
			}
			cfg := config.DefaultEngine()
			cfg.RuntimeQueue.Enabled = true
			q, err := config.ParseQoSJSON([]byte(`{"qos":{"defaults":{"max_inflight_bytes":"8MiB","allowed_degraded_actions":["delay"]},"tenants":[{"name":"a"},{"name":"b"}]}}`))
			if err != nil {
				b.Fatal(err)
			}
			cfg.QoS = q
			var bs []engine.Backend
			for _, t := range realTransports(cfg) {
				bs = append(bs, t)
			}
			e, err := engine.New(cfg, bs...)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(5 * time.Second)
			const size, readers = 1 << 20, 16
			buf := make([]byte, size)
			path := b.TempDir() + "/f"
			if err := os.WriteFile(path, buf, 0o644); err != nil {
				b.Fatal(err)
			}
			seg, err := e.OpenFileSegment("file://"+path, engine.PermRead)
			if err != nil {
				b.Fatal(err)
			}
			reg, err := e.RegisterMemory(size * (readers + 1))
			if err != nil {
				b.Fatal(err)
			}
			pa, err := e.ResolveQoS(engine.QoSContext{Tenant: "a"})
			if err != nil {
				b.Fatal(err)
			}
			pb, err := e.ResolveQoS(engine.QoSContext{Tenant: "b", Priority: &prio})
			if err != nil {
				b.Fatal(err)
			}
			read := func(k int, p *engine.QoSPolicy) error {
				bt, err := e.AllocateBatch(1)
				if err != nil {
					return err
				}
				defer bt.Free()
				req := []engine.Request{{Address: reg.BaseAddress() + uint64(k*size), Length: size}}
				if _, err := bt.SubmitWith(engine.OpRead, seg, req, nil, engine.SubmitOptions{QoS: p, Timeout: 10 * time.Second}); err != nil {
					return err
				}
				bt.Seal()
				st, err := bt.Wait(20 * time.Second)
				if err == nil && st != engine.StateCompleted {
					err = fmt.Errorf("read %v", st)
				}
				return err
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for k := 1; k <= readers; k++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := read(k, pa); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			time.Sleep(50 * time.Millisecond)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := read(0, pb); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// Aging counts a wait, not a group's age: a low-priority group that
// spent priority_aging behind its own batch's earlier work (not waiting
// for capacity at all) must not arrive at the window already aged and go
// before a high-priority waiter that arrived meanwhile. Aging counted
// from submission let any group older than priority_aging (a long bulk
// transfer, or one queued behind its own batch) outrank every newer
// submission of any priority.
func TestPriorityAgingCountsTheWait(t *testing.T) {
	needIOUring(t)
	// L's wait, from E's grant to the grant after E, must stay under
	// aging: 2 s is a budget for a loaded machine (at 200 ms, a CI run
	// under -race and a load of 17 took longer, and L aged).
	const aging = 2 * time.Second
	spy := &spyTransport{FileTransport: realTransports(config.DefaultEngine())[0].(engine.FileTransport)}
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = 1
		c.RuntimeQueue.PriorityAging = config.Duration(aging)
		c.CallerCopy = false
	}, spy)
	seg, reg := smallTarget(t, e, 64<<10)
	var mu sync.Mutex
	var order []int // grants by first task: E 0, L 1 (batch b1), H 100
	e.OnGrantForTest(func(id uint64, task int) { mu.Lock(); order = append(order, int(id)*1000+task); mu.Unlock() })
	// E is held inside Prepare once it has the window.
	inE, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	spy.onPrepare = func(op *engine.FileOp) {
		if op.Offset == 0 {
			once.Do(func() { close(inE); <-unblock })
		}
	}
	release := e.HoldWindowForTest(1, 0)
	high, low := config.PriorityHigh, config.PriorityLow
	b1, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b1.SubmitWith(engine.OpRead, seg, read4k(reg, 0), nil, engine.SubmitOptions{QoS: resolve(t, e, "", "", &high)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b1.SubmitWith(engine.OpRead, seg, read4k(reg, 8192), nil, engine.SubmitOptions{QoS: resolve(t, e, "", "", &low)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "E to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	time.Sleep(aging + 100*time.Millisecond) // L, behind E, is older than priority_aging
	h := submitWith(t, e, seg, read4k(reg, 16384), engine.SubmitOptions{QoS: resolve(t, e, "", "", &high)})
	waitFor(t, "E and H to wait", func() bool { return e.Stats().RuntimeQueue.Waiting == 2 })
	release() // E has waited longest: it gets the window and stops in Prepare
	<-inE
	resume := e.QuietWakesForTest()
	close(unblock)
	mu.Lock()
	eID := order[0]
	mu.Unlock()
	granted := func(id int) bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(order, id) }
	lID, hID := int(b1.ID())*1000+1, int(h.ID())*1000
	waitFor(t, "L to wait or go", func() bool { return e.Stats().RuntimeQueue.Waiting == 2 || granted(lID) })
	resume()
	b1.Seal()
	for _, b := range []*engine.Batch{b1, h} {
		if st, err := b.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
			t.Fatalf("batch %d: %v %v", b.ID(), st, err)
		}
		b.Free()
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{eID, hID, lID}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("grants %v, want %v (E, then the high H before the low L, which has not waited priority_aging)", order, want)
	}
}
