package discovery

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orbitefs/orbitefs/engine"
)

const (
	prefix = "/orbitefs-test/"
	ttl    = 2 * time.Second
)

func cfg() Config { return Config{Prefix: prefix, LeaseTTL: ttl, RetryMax: 200 * time.Millisecond} }

// engineProc is one simulated daemon: its own client, registration and
// view, as a separate process would have.
type engineProc struct {
	cli *clientv3.Client
	reg *Registrar
	w   *Watcher
}

func startEngine(t *testing.T, s *etcdServer, r Record) *engineProc {
	t.Helper()
	cli := s.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reg, err := Register(ctx, cli, cfg(), r)
	if err != nil {
		t.Fatalf("register %s: %v", r.Name, err)
	}
	w, err := NewWatcher(ctx, cli, cfg())
	if err != nil {
		t.Fatalf("watch for %s: %v", r.Name, err)
	}
	p := &engineProc{cli: cli, reg: reg, w: w}
	t.Cleanup(func() { p.w.Close(); p.reg.Close() })
	return p
}

// kill stops the engine the way kill -9 does: no revoke, no more
// keep-alives, its connection gone.
func (p *engineProc) kill() {
	p.w.Close()
	p.reg.stop(false)
	p.cli.Close()
}

func TestThreeSeeEachOther(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	procs := []*engineProc{
		startEngine(t, s, rec("a", 1, Region{Name: "kv", Bytes: 4096, Location: "cpu", Permission: "read_write"})),
		startEngine(t, s, rec("b", 2)),
		startEngine(t, s, rec("c", 3, Region{Name: "w", Bytes: 1 << 30, Location: "cuda:0", Permission: "read"})),
	}
	want := "a@0000000000000001,b@0000000000000002,c@0000000000000003"
	for i, p := range procs {
		eventually(t, 5*time.Second, "view of engine "+string(rune('a'+i)), func() bool { return names(p.w.Records()) == want })
	}
	got, _ := procs[1].w.Lookup("c")
	if !got.equal(procs[2].reg.Record()) || got.Regions[0].Location != "cuda:0" {
		t.Fatalf("b sees c as %+v, want %+v", got, procs[2].reg.Record())
	}

	// A region change reaches every view as Updated, same epoch.
	sub, snap := procs[0].w.Subscribe()
	defer sub.Close()
	if names(snap) != want {
		t.Fatalf("snapshot %s, want %s", names(snap), want)
	}
	regions := []Region{{Name: "kv2", Bytes: 8192, Location: "pinned", Permission: "write"}}
	if err := procs[1].reg.Update(context.Background(), regions); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub)
	if ev.Kind != Updated || ev.Record.Name != "b" || len(ev.Record.Regions) != 1 || ev.Record.Regions[0] != regions[0] ||
		ev.Prev == nil || len(ev.Prev.Regions) != 0 || ev.Prev.Epoch != 2 {
		t.Fatalf("got %v %+v, want b updated with kv2", ev, ev.Record)
	}
	for _, p := range procs {
		eventually(t, 5*time.Second, "update seen", func() bool { r, _ := p.w.Lookup("b"); return len(r.Regions) == 1 })
	}

	// Invalid regions are refused and change nothing.
	err := procs[1].reg.Update(context.Background(), []Region{{Name: "x", Bytes: 0, Location: "cpu", Permission: "read"}})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "bytes 0") {
		t.Fatalf("update with 0 bytes: %v, want invalid naming bytes 0", err)
	}
	if r := procs[1].reg.Record(); len(r.Regions) != 1 || r.Regions[0] != regions[0] {
		t.Fatalf("refused update changed the record to %+v", r)
	}
}

// TestCloseLeavesNoGoroutine counts every goroutine in the process (the
// client's and the embedded server's too) around registrations' and
// watchers' lives: after one warm-up round (the client opens its lease
// and watch streams once and keeps them), more rounds must not add any.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	s := startEtcd(t)
	cli := s.newClient(t)
	ctx := context.Background()
	round := func(epoch Epoch) {
		reg, err := Register(ctx, cli, cfg(), rec("a", epoch))
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewWatcher(ctx, cli, cfg())
		if err != nil {
			t.Fatal(err)
		}
		sub, _ := w.Subscribe()
		eventually(t, 5*time.Second, "view", func() bool { return len(w.Records()) == 1 })
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := reg.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Next(ctx); !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("next after Close: %v, want closed", err)
		}
	}
	// count counts the goroutines of this package and of the etcd client
	// it drives (watches and keep-alive streams a Close must end); the
	// embedded server's own goroutines come and go with its load and are
	// not the package's to close. Not counted: the client's gRPC watch
	// stream itself (its run and receive loops). The client keeps one
	// per context key and reuses it for every later watch; when a watch
	// is cancelled before the server confirmed it, the stream stays open
	// until the client closes (etcd's closeSubstream leaves the resuming
	// slot behind), which is bounded, not a leak. Each watch's own
	// goroutine (serveSubstream) is counted: a watch left open shows.
	streams := 0
	count := func() int {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		n, s := 0, 0
		for _, g := range strings.Split(string(buf), "\n\n") {
			switch {
			case strings.Contains(g, "TestCloseLeavesNoGoroutine"):
			case strings.Contains(g, "(*watchGRPCStream).run("):
				s++
			case strings.Contains(g, "(*watchGRPCStream).serveWatchClient("):
			case strings.Contains(g, "orbitefs/discovery.") || strings.Contains(g, "go.etcd.io/etcd/client/v3"):
				n++
			}
		}
		streams = max(streams, s)
		return n
	}
	// settle waits until the count holds still for 200ms.
	settle := func() int {
		n, still := count(), 0
		for i := 0; i < 250 && still < 10; i++ {
			time.Sleep(20 * time.Millisecond)
			if m := count(); m == n {
				still++
			} else {
				n, still = m, 0
			}
		}
		return n
	}
	round(1)
	before := settle()
	for i := 2; i <= 4; i++ {
		round(Epoch(i))
	}
	after := settle()
	for deadline := time.Now().Add(5 * time.Second); after > before && time.Now().Before(deadline); {
		after = settle()
	}
	if after > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after three more registrations and watchers closed:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
	if streams > 1 {
		t.Fatalf("%d watch streams open at once, want at most the client's one", streams)
	}
	t.Logf("%d goroutines before and %d after three rounds", before, after)
}

func TestKilledEngineVanishesWithinTTL(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	a := startEngine(t, s, rec("a", 1))
	b := startEngine(t, s, rec("b", 2))
	c := startEngine(t, s, rec("c", 3))
	other := s.newClient(t) // a view that is nobody's
	ow, err := NewWatcher(context.Background(), other, cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer ow.Close()
	views := map[string]*Watcher{"a": a.w, "b": b.w, "observer": ow}
	for n, w := range views {
		eventually(t, 5*time.Second, n+" sees 3", func() bool { return len(w.Records()) == 3 })
	}
	sub, _ := ow.Subscribe()
	defer sub.Close()
	// An update keeps the record on the lease.
	if err := c.reg.Update(context.Background(), []Region{{Name: "kv", Bytes: 1, Location: "cpu", Permission: "read"}}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub); ev.Kind != Updated || ev.Record.Name != "c" {
		t.Fatalf("observer got %v, want c updated", ev)
	}

	killed := time.Now()
	c.kill()
	var wg sync.WaitGroup
	var mu sync.Mutex
	gone := map[string]time.Duration{}
	for n, w := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(killed) < ttl+3*time.Second {
				if _, ok := w.Lookup("c"); !ok {
					mu.Lock()
					gone[n] = time.Since(killed)
					mu.Unlock()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for n := range views {
		d, ok := gone[n]
		if !ok {
			t.Errorf("%s: c still there %v after the kill, want gone within TTL %v + 1s", n, ttl+3*time.Second, ttl)
			continue
		}
		if d > ttl+time.Second {
			t.Errorf("%s: c gone %v after the kill, want within TTL %v + 1s", n, d, ttl)
		}
		t.Logf("%s: c gone %v after the kill", n, d.Round(time.Millisecond))
	}
	resp, err := other.Get(context.Background(), engineKey(prefix, "c"))
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("c's key after expiry: %v %v", resp.Kvs, err)
	}
	if ev := nextEvent(t, sub); ev.Kind != Left || ev.Record.Name != "c" || ev.Record.Epoch != 3 {
		t.Fatalf("observer got %v, want c left", ev)
	}
	if got := names(a.w.Records()); got != "a@0000000000000001,b@0000000000000002" {
		t.Fatalf("a's view after the kill: %s", got)
	}
}

func TestRestartWithNewEpoch(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	obs := startEngine(t, s, rec("obs", 9))
	cli := s.newClient(t)
	ctx := context.Background()
	old, err := Register(ctx, cli, cfg(), rec("a", 0x11))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a seen", func() bool { _, ok := obs.w.Lookup("a"); return ok })
	sub, _ := obs.w.Subscribe()
	defer sub.Close()

	// A clean stop, then the new incarnation: left, then restarted with
	// the old epoch as Prev (what a cache of descriptors must drop).
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub)
	if ev.Kind != Left || ev.Record.Epoch != 0x11 {
		t.Fatalf("got %v, want a left", ev)
	}
	neu, err := Register(ctx, cli, cfg(), rec("a", 0x22))
	if err != nil {
		t.Fatal(err)
	}
	defer neu.Close()
	ev = nextEvent(t, sub)
	if ev.Kind != Restarted || ev.Record.Epoch != 0x22 || ev.Prev == nil || ev.Prev.Epoch != 0x11 {
		t.Fatalf("got %v, want a restarted 0x11 -> 0x22", ev)
	}
	if r, _ := obs.w.Lookup("a"); r.Epoch != 0x22 || r.Addr != rec("a", 0x22).Addr {
		t.Fatalf("view has %+v, want epoch 22", r)
	}

	// A kill -9 then a restart: refused while the old lease lives, then
	// registered; the view goes from the old epoch to the new one.
	neu.stop(false)
	third := rec("a", 0x33)
	_, err = Register(ctx, cli, cfg(), third)
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.Epoch != 0x22 {
		t.Fatalf("register over a killed but unexpired epoch: %v, want held by 22", err)
	}
	// WaitFree returns when the old lease expired, not before.
	wctx, cancel := context.WithTimeout(ctx, ttl+3*time.Second)
	defer cancel()
	start := time.Now()
	if err := WaitFree(wctx, cli, prefix, "a"); err != nil {
		t.Fatalf("wait for the name: %v", err)
	}
	if resp, err := cli.Get(ctx, engineKey(prefix, "a")); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("WaitFree returned after %v with the key still there: %v %v", time.Since(start), resp.Kvs, err)
	}
	t.Logf("name free %v after the kill", time.Since(start).Round(time.Millisecond))
	reg, err := Register(ctx, cli, cfg(), third)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for {
		ev = nextEvent(t, sub)
		if ev.Kind == Restarted {
			break
		}
		if ev.Kind != Left || ev.Record.Epoch != 0x22 {
			t.Fatalf("got %v, want a left then a restarted", ev)
		}
	}
	if ev.Record.Epoch != 0x33 || ev.Prev.Epoch != 0x22 {
		t.Fatalf("got %v, want a restarted 0x22 -> 0x33", ev)
	}
}

func TestSameLiveNameRefused(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	a := startEngine(t, s, rec("a", 0xaa))
	cli := s.newClient(t)
	ctx := context.Background()
	before, err := cli.Get(ctx, engineKey(prefix, "a"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Register(ctx, cli, cfg(), rec("a", 0xbb))
	if err == nil {
		r.Close()
		t.Fatal("a second live epoch registered the same name")
	}
	var held *HeldError
	if !errors.Is(err, engine.ErrExists) || !errors.As(err, &held) {
		t.Fatalf("got %v, want exists with a HeldError", err)
	}
	msg := err.Error()
	for _, want := range []string{`"a"`, "epoch 00000000000000aa", "at 127.0.0.1:7170"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	after, err := cli.Get(ctx, engineKey(prefix, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if kv0, kv1 := before.Kvs[0], after.Kvs[0]; kv1.ModRevision != kv0.ModRevision || kv1.Lease != int64(a.reg.Lease()) {
		t.Fatalf("the refused registration changed the key: mod %d -> %d, lease %x", kv0.ModRevision, kv1.ModRevision, kv1.Lease)
	}
	// The refused attempt's lease was revoked, not left to expire.
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Leases) != 1 {
		t.Fatalf("%d leases after a refused registration, want only a's", len(leases.Leases))
	}
}

func TestCompactionForcesRelist(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	ctx := context.Background()
	cli := s.newClient(t)
	b, err := Register(ctx, cli, cfg(), rec("b", 2))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Register(ctx, cli, cfg(), rec("c", 3))
	if err != nil {
		t.Fatal(err)
	}
	// The watcher is held after its first list, before its watch starts:
	// meanwhile b leaves, c restarts, d joins, and etcd compacts past the
	// revision the watch would start from.
	var once sync.Once
	subscribed := make(chan struct{})
	hook := func(rev int64) {
		once.Do(func() {
			<-subscribed
			if err := b.Close(); err != nil {
				t.Error(err)
			}
			c.stop(false)
			if _, err := cli.Delete(ctx, engineKey(prefix, "c")); err != nil {
				t.Error(err)
			}
			c2, err := Register(ctx, cli, cfg(), rec("c", 0x33))
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { c2.Close() })
			d, err := Register(ctx, cli, cfg(), rec("d", 4))
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { d.Close() })
			resp, err := cli.Get(ctx, "any")
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
				t.Error(err)
			}
			if rev+1 >= resp.Header.Revision {
				t.Errorf("compaction at %d does not pass the watch's start %d", resp.Header.Revision, rev+1)
			}
		})
	}
	w, err := newWatcher(ctx, cli, cfg(), hook)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sub, snap := w.Subscribe()
	defer sub.Close()
	close(subscribed)
	if names(snap) != "b@0000000000000002,c@0000000000000003" {
		t.Fatalf("snapshot %s, want b and c", names(snap))
	}
	want := "c@0000000000000033,d@0000000000000004"
	eventually(t, 10*time.Second, "view after relist", func() bool { return names(w.Records()) == want })
	if n := w.Lists(); n != 2 {
		t.Fatalf("listed %d times, want 2 (the first list and the relist after compaction)", n)
	}
	got := []string{nextEvent(t, sub).String(), nextEvent(t, sub).String(), nextEvent(t, sub).String()}
	wantEv := []string{"left b epoch 0000000000000002", "restarted c epoch 0000000000000033 (was 0000000000000003)", "joined d epoch 0000000000000004"}
	if strings.Join(got, "; ") != strings.Join(wantEv, "; ") {
		t.Fatalf("events %q, want %q", got, wantEv)
	}
	// The watch after the relist is live: a later change arrives.
	e, err := Register(ctx, cli, cfg(), rec("e", 5))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	eventually(t, 5*time.Second, "e seen after relist", func() bool { _, ok := w.Lookup("e"); return ok })
}

func TestLeaseLostRegistersAgain(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	a := startEngine(t, s, rec("a", 1))
	obs := startEngine(t, s, rec("obs", 2))
	eventually(t, 5*time.Second, "a seen", func() bool { _, ok := obs.w.Lookup("a"); return ok })
	sub, _ := obs.w.Subscribe()
	defer sub.Close()
	// The lease ends under a live engine, as when it expired during a
	// partition: its key goes, and the engine registers again.
	old := a.reg.Lease()
	if _, err := obs.cli.Revoke(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub); ev.Kind != Left || ev.Record.Name != "a" {
		t.Fatalf("got %v, want a left", ev)
	}
	if ev := nextEvent(t, sub); ev.Kind != Joined || ev.Record.Name != "a" || ev.Record.Epoch != 1 {
		t.Fatalf("got %v, want a joined again with epoch 1", ev)
	}
	// The event can arrive before acquire returns and records the lease.
	eventually(t, 5*time.Second, "a new lease", func() bool { return a.reg.Lease() != old })
	resp, err := obs.cli.Get(context.Background(), engineKey(prefix, "a"))
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != a.reg.Lease() {
		t.Fatalf("a's key %v (%v), want it on the registrar's lease %x", resp.Kvs, err, int64(a.reg.Lease()))
	}
	select {
	case <-a.reg.Done():
		t.Fatalf("registrar stopped: %v", a.reg.Err())
	default:
	}
	// The counts say so: one lease lost, registered again, and the new
	// lease renewed (the keep-alive answers at once, then every TTL/3).
	eventually(t, 5*time.Second, "a renewal of the new lease", func() bool { return a.reg.Stats().Renewals >= 2 })
	if st := a.reg.Stats(); st.LeaseLost != 1 || st.Reregistered != 1 || st.RegisterFailures != 0 {
		t.Fatalf("stats %+v, want 1 lease lost, 1 registered again, no failure", st)
	}
}

// TestLeaseLostNameTaken: when the lease ends and another epoch took the
// name meanwhile, the registrar stops and says who holds it.
func TestLeaseLostNameTaken(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	a := startEngine(t, s, rec("a", 1))
	cli := s.newClient(t)
	ctx := context.Background()
	// Hold a's registration at its lost lease: revoke, and before it can
	// register again, another incarnation takes the name.
	a.reg.put.Lock()
	if _, err := cli.Revoke(ctx, a.reg.Lease()); err != nil {
		a.reg.put.Unlock()
		t.Fatal(err)
	}
	other, err := Register(ctx, cli, cfg(), rec("a", 7))
	a.reg.put.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	select {
	case <-a.reg.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("registrar still running after its name was taken")
	}
	var held *HeldError
	if err := a.reg.Err(); !errors.As(err, &held) || held.Holder.Epoch != 7 {
		t.Fatalf("Err() = %v, want held by epoch 7", err)
	}
	if st := a.reg.Stats(); st.LeaseLost != 1 || st.Reregistered != 0 || st.RegisterFailures != 1 {
		t.Fatalf("stats %+v, want 1 lease lost, 1 failure, not registered again", st)
	}
}

func TestEtcdRestartRegistersAgain(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	a := startEngine(t, s, rec("a", 1))
	ctx := context.Background()
	first, err := a.cli.Get(ctx, engineKey(prefix, "a"))
	if err != nil {
		t.Fatal(err)
	}
	oldLease := a.reg.Lease()

	// Down for longer than the TTL: the client gives the keep-alive up,
	// so the registrar must register again once etcd is back.
	s.stop()
	time.Sleep(ttl + 1500*time.Millisecond)
	s.start()

	obs := s.newClient(t)
	eventually(t, 10*time.Second, "registered on a new lease", func() bool { return a.reg.Lease() != oldLease })
	resp, err := obs.Get(ctx, engineKey(prefix, "a"))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("a's key after the restart: %v %v", resp, err)
	}
	kv := resp.Kvs[0]
	if clientv3.LeaseID(kv.Lease) != a.reg.Lease() {
		t.Fatalf("a's key is on lease %x, the registrar keeps %x alive", kv.Lease, int64(a.reg.Lease()))
	}
	// The old lease came back with etcd and still held the key: it was
	// taken over (same key), not left to expire and recreated.
	if kv.CreateRevision != first.Kvs[0].CreateRevision {
		t.Fatalf("key recreated (create rev %d -> %d), not taken over", first.Kvs[0].CreateRevision, kv.CreateRevision)
	}
	// It outlives the old lease by far and is in a fresh view and in
	// the engine's own (which listed again or resumed).
	time.Sleep(2*ttl + time.Second)
	w, err := NewWatcher(ctx, obs, cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if r, ok := w.Lookup("a"); !ok || r.Epoch != 1 {
		t.Fatalf("a not registered %v after the restart (view %s)", 2*ttl+time.Second, names(w.Records()))
	}
	eventually(t, 5*time.Second, "a's own view", func() bool { _, ok := a.w.Lookup("a"); return ok })
	select {
	case <-a.reg.Done():
		t.Fatalf("registrar stopped: %v", a.reg.Err())
	default:
	}
}

// TestUnreadableRecords: what does not decode is absent from the view
// (and holds its name); a valid record in its place joins.
func TestUnreadableRecords(t *testing.T) {
	s := startEtcd(t)
	noLeak(t)
	cli := s.newClient(t)
	ctx := context.Background()
	for key, val := range map[string]string{
		"z":       `{"v":2,"name":"z","epoch":"1","addr":"h:1"}`,
		"y":       `not json`,
		"x":       `{"v":1,"name":"other","epoch":"1","addr":"h:1"}`,
		"nested/": `{"v":1,"name":"nested","epoch":"1","addr":"h:1"}`,
	} {
		if _, err := cli.Put(ctx, engineKey(prefix, key), val); err != nil {
			t.Fatal(err)
		}
	}
	a := startEngine(t, s, rec("a", 1))
	if got := names(a.w.Records()); got != "a@0000000000000001" {
		t.Fatalf("view %s, want a alone", got)
	}
	sub, _ := a.w.Subscribe()
	defer sub.Close()
	if _, err := cli.Put(ctx, engineKey(prefix, "y"), `{"v":1,"name":"y"}`); err != nil {
		t.Fatal(err)
	}
	b, _ := rec("z", 5).encode()
	if _, err := cli.Put(ctx, engineKey(prefix, "z"), string(b)); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub); ev.Kind != Joined || ev.Record.Name != "z" || ev.Record.Epoch != 5 {
		t.Fatalf("got %v, want z joined (y's record is still invalid)", ev)
	}
	_, err := Register(ctx, cli, cfg(), rec("y", 3))
	var held *HeldError
	if !errors.As(err, &held) || held.Bad == nil || !strings.Contains(err.Error(), `name "y" is held by an unreadable record`) {
		t.Fatalf("register over an unreadable record: %v", err)
	}
}
