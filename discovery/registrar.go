// registrar.go owns one engine's registration: its record under its key,
// attached to a lease that a keep-alive renews while the engine lives.
//
// Invariants:
//   - The key is created only if absent (one transaction). A key held by
//     another epoch is never overwritten: registration fails with a
//     *HeldError naming the holder. The one key we take over is our own
//     (same name and epoch) left on a lease we lost, such as after the
//     etcd member restarted while our keep-alive had given up.
//   - A killed engine stops renewing; etcd deletes its key when the lease
//     expires, at most the lease TTL after the last renewal.
//   - Writes of the key (register, take-over, update) are serialized by
//     Registrar.put, so the stored record is the latest one asked for.
//   - When the lease ends while the engine lives (expired during a
//     partition, revoked, lost across an etcd restart), run registers
//     again, with backoff, until it succeeds, the name is found held by
//     another epoch (Done closes, Err says why), or Close.
//   - Close stops the keep-alive, waits for run, then revokes the lease,
//     which deletes the key at once; no goroutine of ours outlives Close.

package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orbitefs/orbitefs/engine"
)

// Config is what a Registrar and a Watcher share.
type Config struct {
	// Prefix roots every key of the cluster; it begins and ends with '/'.
	Prefix string
	// LeaseTTL is how long a dead engine's record outlives its last
	// renewal (whole seconds, at least 1s; etcd raises a TTL under its
	// own minimum, 1.5x its election timeout, to that minimum).
	LeaseTTL time.Duration
	// RetryMax bounds the backoff between attempts to register again or
	// list again (default: LeaseTTL, or 1s for a Watcher without one).
	RetryMax time.Duration
	// Logger receives the registration's and the view's changes; nil
	// discards them.
	Logger *slog.Logger
}

// HeldError says the name is registered by another incarnation.
type HeldError struct {
	Name   string
	Holder Record           // the holder's record; zero when unreadable
	Lease  clientv3.LeaseID // the holder's lease
	Bad    error            // why the holder's record is unreadable, or nil
}

func (e *HeldError) Error() string {
	if e.Bad != nil {
		return fmt.Sprintf("name %q is held by an unreadable record (lease %x: %v)", e.Name, int64(e.Lease), e.Bad)
	}
	return fmt.Sprintf("name %q is held by epoch %s at %s (lease %x); it is free once that engine stops, at most the lease TTL after it dies",
		e.Name, e.Holder.Epoch, e.Holder.Addr, int64(e.Lease))
}

// Registrar keeps one engine registered.
type Registrar struct {
	cli *clientv3.Client
	key string
	ttl int64
	max time.Duration
	log *slog.Logger

	cancel context.CancelFunc // stops run and the keep-alive
	done   chan struct{}      // closed when run returns
	once   sync.Once
	cerr   error // Close's result

	// renewals counts the keep-alive's answers (each one a renewal of
	// the lease); lost the times the lease ended under a live engine;
	// failures the attempts to register again that failed; again the
	// attempts that succeeded.
	renewals, lost, failures, again atomic.Uint64

	// put serializes the writes of the key; taken before mu.
	put sync.Mutex
	mu  struct {
		sync.Mutex
		rec   Record           // the record to publish (the latest asked for)
		lease clientv3.LeaseID // the lease the key is attached to
		err   error            // why run gave up, if it did
	}
}

// Register creates rec's key under cfg.Prefix with a new lease and keeps
// it alive until Close. The name must be free, or held by rec's own
// epoch; otherwise the error wraps a *HeldError and engine.ErrExists.
func Register(ctx context.Context, cli *clientv3.Client, cfg Config, rec Record) (_ *Registrar, err error) {
	if err := checkPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.LeaseTTL < time.Second || cfg.LeaseTTL%time.Second != 0 {
		return nil, invalid("register", rec.Name, "lease TTL %v: want whole seconds, at least 1s", cfg.LeaseTTL)
	}
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	r := &Registrar{
		cli:  cli,
		key:  engineKey(cfg.Prefix, rec.Name),
		ttl:  int64(cfg.LeaseTTL / time.Second),
		max:  cfg.RetryMax,
		log:  logger(cfg.Logger).With("op", "discovery", "name", rec.Name, "epoch", rec.Epoch.String()),
		done: make(chan struct{}),
	}
	if r.max <= 0 {
		r.max = cfg.LeaseTTL
	}
	rec.Version = RecordVersion
	r.mu.rec = rec.clone()

	lease, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	ka, err := cli.KeepAlive(runCtx, lease)
	if err != nil {
		cancel()
		r.revoke(lease)
		return nil, &engine.Error{Op: "register", Name: rec.Name, Kind: engine.KindUnavailable, Err: fmt.Errorf("keep-alive of lease %x: %w", int64(lease), err)}
	}
	r.cancel = cancel
	go r.run(runCtx, ka)
	r.log.Info("registered", "key", r.key, "lease", fmt.Sprintf("%x", int64(lease)), "ttl_s", r.ttl)
	return r, nil
}

// Record returns the record this registrar publishes.
func (r *Registrar) Record() Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.rec.clone()
}

// Lease returns the lease the key is attached to now.
func (r *Registrar) Lease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lease
}

// RegistrarStats are a Registrar's counts since Register.
type RegistrarStats struct {
	// Renewals are the lease's keep-alive answers from etcd.
	Renewals uint64
	// LeaseLost counts the leases that ended while the engine lived
	// (expired during a partition, revoked, lost across an etcd restart).
	LeaseLost uint64
	// Reregistered counts the registrations again after a lost lease;
	// RegisterFailures the attempts at it that failed (each retried
	// with backoff, but for a name held by another epoch).
	Reregistered, RegisterFailures uint64
}

// Stats returns the registrar's counts.
func (r *Registrar) Stats() RegistrarStats {
	return RegistrarStats{Renewals: r.renewals.Load(), LeaseLost: r.lost.Load(),
		Reregistered: r.again.Load(), RegisterFailures: r.failures.Load()}
}

// Done closes when the registrar stops: after Close, or when it could not
// register again (Err says why).
func (r *Registrar) Done() <-chan struct{} { return r.done }

// Err is why the registrar gave up registering again, or nil.
func (r *Registrar) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.err
}

// Update publishes a new list of exported regions. Invalid regions change
// nothing. Valid ones become the record to publish even when the write
// fails (the error says so): the next registration publishes them.
func (r *Registrar) Update(ctx context.Context, regions []Region) error {
	r.put.Lock()
	defer r.put.Unlock()
	r.mu.Lock()
	next := r.mu.rec.clone()
	lease := r.mu.lease
	r.mu.Unlock()
	next.Regions = append([]Region(nil), regions...)
	val, err := next.encode()
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.rec = next
	r.mu.Unlock()

	resp, err := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(r.key), "=", lease)).
		Then(clientv3.OpPut(r.key, string(val), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return &engine.Error{Op: "update", Name: next.Name, Kind: engine.KindUnavailable, Err: fmt.Errorf("write %s: %w", r.key, err)}
	}
	if !resp.Succeeded {
		return &engine.Error{Op: "update", Name: next.Name, Kind: engine.KindUnavailable,
			Err: fmt.Errorf("%s is not on our lease %x (lease lost; registering again publishes these regions)", r.key, int64(lease))}
	}
	r.log.Info("record updated", "regions", len(regions))
	return nil
}

// Close deletes the registration (by revoking its lease) and stops.
// Calling it again returns the first result.
func (r *Registrar) Close() error { return r.stop(true) }

// stop ends run; revoke=false leaves the lease to expire, as a killed
// engine would.
func (r *Registrar) stop(revoke bool) error {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		if revoke {
			r.cerr = r.revoke(r.Lease())
		}
	})
	return r.cerr
}

// revoke deletes the lease and the keys on it; a lease already gone is
// not an error.
func (r *Registrar) revoke(lease clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.ttl)*time.Second)
	defer cancel()
	_, err := r.cli.Revoke(ctx, lease)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return &engine.Error{Op: "unregister", Name: r.key, Kind: engine.KindUnavailable, Err: fmt.Errorf("revoke lease %x: %w", int64(lease), err)}
	}
	return nil
}

// acquire grants a lease and puts the record on it: creating the key, or
// taking over our own epoch's key left on a lost lease.
func (r *Registrar) acquire(ctx context.Context) (clientv3.LeaseID, error) {
	r.put.Lock()
	defer r.put.Unlock()
	rec := r.Record()
	val, err := rec.encode()
	if err != nil {
		return 0, err
	}
	unavailable := func(what string, err error) error {
		return &engine.Error{Op: "register", Name: rec.Name, Kind: engine.KindUnavailable, Err: fmt.Errorf("%s: %w", what, err)}
	}
	g, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return 0, unavailable("grant lease", err)
	}
	lease := g.ID
	for {
		resp, err := r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0)).
			Then(clientv3.OpPut(r.key, string(val), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(r.key)).
			Commit()
		if err != nil {
			r.revoke(lease)
			return 0, unavailable("create "+r.key, err)
		}
		if resp.Succeeded {
			break
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // deleted between the compare and the get: try again
		}
		kv := kvs[0]
		holder, bad := decodeRecord(rec.Name, kv.Value)
		if bad != nil || holder.Epoch != rec.Epoch {
			r.revoke(lease)
			held := &HeldError{Name: rec.Name, Lease: clientv3.LeaseID(kv.Lease)}
			if bad != nil {
				held.Bad = bad
			} else {
				held.Holder = holder
			}
			return 0, &engine.Error{Op: "register", Name: rec.Name, Kind: engine.KindExists, Err: held}
		}
		// Our own epoch on a lease we no longer renew: move the key to
		// the new lease, unless it changed since we read it.
		resp, err = r.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(r.key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(r.key, string(val), clientv3.WithLease(lease))).
			Commit()
		if err != nil {
			r.revoke(lease)
			return 0, unavailable("take over "+r.key, err)
		}
		if resp.Succeeded {
			if old := clientv3.LeaseID(kv.Lease); old != lease && old != clientv3.NoLease {
				r.revoke(old) // holds nothing now; free it early
			}
			r.log.Info("took over our own key from a lost lease", "old_lease", fmt.Sprintf("%x", kv.Lease))
			break
		}
	}
	r.mu.Lock()
	r.mu.lease = lease
	r.mu.Unlock()
	return lease, nil
}

// run drains the keep-alive; when it ends while ctx lives, the lease is
// gone (or etcd has not answered for a TTL), so it registers again.
func (r *Registrar) run(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range ka {
			r.renewals.Add(1)
		}
		if ctx.Err() != nil {
			return
		}
		r.lost.Add(1)
		r.log.Warn("lease ended; registering again", "lease", fmt.Sprintf("%x", int64(r.Lease())))
		var ok bool
		if ka, ok = r.reacquire(ctx); !ok {
			return
		}
	}
}

// reacquire registers again with backoff until it succeeds (the new
// keep-alive), the name is held by another epoch, or ctx ends.
func (r *Registrar) reacquire(ctx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, bool) {
	b := backoff{max: r.max}
	for {
		lease, err := r.acquire(ctx)
		if err == nil {
			ka, kerr := r.cli.KeepAlive(ctx, lease)
			if kerr == nil {
				r.again.Add(1)
				r.log.Info("registered again", "lease", fmt.Sprintf("%x", int64(lease)))
				return ka, true
			}
			err = kerr
		}
		if ctx.Err() != nil {
			return nil, false
		}
		r.failures.Add(1)
		var held *HeldError
		if errors.As(err, &held) {
			r.log.Error("cannot register again", "err", err)
			r.mu.Lock()
			r.mu.err = err
			r.mu.Unlock()
			return nil, false
		}
		r.log.Warn("register again failed; retrying", "err", err)
		if !b.wait(ctx) {
			return nil, false
		}
	}
}

// backoff doubles a wait from 50ms up to max.
type backoff struct {
	cur, max time.Duration
}

// wait sleeps the next step; false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	switch {
	case b.cur == 0:
		b.cur = 50 * time.Millisecond
	case b.cur < b.max:
		b.cur = min(2*b.cur, b.max)
	}
	t := time.NewTimer(b.cur)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// WaitFree returns once no record holds name under prefix (at once if
// none does), so that a restarted engine can wait out its previous
// incarnation's lease after a HeldError; or ctx's error.
func WaitFree(ctx context.Context, cli *clientv3.Client, prefix, name string) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	if err := checkName("name", name); err != nil {
		return invalid("wait", name, "%v", err)
	}
	key := engineKey(prefix, name)
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return &engine.Error{Op: "wait", Name: name, Kind: engine.KindUnavailable, Err: fmt.Errorf("get %s: %w", key, err)}
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if waitDeleted(ctx, cli, key, resp.Header.Revision+1) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// The watch broke (compacted, no leader): look again.
	}
}

// waitDeleted watches key from rev and reports whether it saw it deleted.
func waitDeleted(ctx context.Context, cli *clientv3.Client, key string, rev int64) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(rev)) {
		if wr.Err() != nil {
			return false
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return true
			}
		}
	}
	return false
}
