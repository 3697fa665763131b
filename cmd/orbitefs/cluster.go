// cluster.go owns the daemon's membership in a cluster (`orbitefs mount`
// with [cluster] etcd_endpoints): the etcd client, this engine's
// registration (name, epoch, advertised peer address, exported regions),
// the watcher that keeps the view of every other engine, and the view the
// mount shows under /cluster and in /stats.
//
// Invariants:
//   - The member registers before the mount appears, so a mounted member
//     is listed; if its name is held by another epoch (its own previous
//     incarnation, killed within the lease TTL) it waits for the key to go
//     at most lease_ttl + dial_timeout, then fails naming the holder.
//   - Region changes are signalled, never waited for, by the FUSE request
//     that made them: one goroutine republishes the record, so a slow
//     etcd never blocks a register or an rmdir, and a burst of changes
//     costs one write.
//   - Close stops the republisher, the watcher and the registrar (which
//     revokes the lease: the key is gone at once), then the client.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/discovery"
	"github.com/orbitefs/orbitefs/peer"
)

// member is this daemon as a cluster member. It implements control.Cluster.
type member struct {
	cfg  config.Cluster
	log  *slog.Logger
	cli  *clientv3.Client
	reg  *discovery.Registrar
	w    *discovery.Watcher
	sub  *discovery.Subscription
	self string

	conns  *namedRemotes // peer:// segments' connections (clusterconns.go)
	server *peer.Server  // set before start; nil without a listener

	exports func() []discovery.Region // the regions to publish now
	changed chan struct{}             // a token: the exports changed
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  sync.Once

	joined, left, updated, restarted, recordUpdates atomic.Uint64
	dropped, refused                                atomic.Uint64

	mu struct {
		sync.Mutex
		seq        uint64
		seen       map[string]seen // name -> the incarnation shown
		superseded superseded      // epochs replaced by a restart
	}
}

// seen is the mount's identity of one incarnation of a name.
type seen struct {
	epoch discovery.Epoch
	seq   uint64
	since time.Time
}

// newMember is a member not yet started: the control Service is built
// with it (its view and its exports hook) before the peer listener, whose
// epoch and address the registration needs.
func newMember(cfg config.Cluster, conns *namedRemotes, lg *slog.Logger) *member {
	m := &member{cfg: cfg, log: lg, conns: conns, changed: make(chan struct{}, 1), stop: make(chan struct{})}
	m.mu.seen = map[string]seen{}
	m.mu.superseded = superseded{}
	return m
}

// exportsChanged is control.Options.ExportsChanged: it never blocks.
func (m *member) exportsChanged() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// etcdClient connects to cfg's endpoints; the first round trip (a status
// of each endpoint until one answers) is bounded by dial_timeout.
func etcdClient(ctx context.Context, cfg config.Cluster) (*clientv3.Client, error) {
	// gRPC's reconnect backoff grows to seconds while etcd is down;
	// capped at a quarter of the TTL so the daemon finds a restarted etcd
	// (and moves its key to a new lease) before the restored leases expire.
	maxDelay := max(cfg.LeaseTTL.D()/4, 50*time.Millisecond)
	reconnect := grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxDelay},
		MinConnectTimeout: cfg.DialTimeout.D(),
	})
	cc := clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: cfg.DialTimeout.D(),
		DialOptions: []grpc.DialOption{reconnect}, Logger: zap.NewNop()}
	if cfg.CAFile != "" || cfg.CertFile != "" {
		tc, err := etcdTLS(cfg)
		if err != nil {
			return nil, err
		}
		cc.TLS = tc
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("cluster.etcd_endpoints %v: %w", cfg.EtcdEndpoints, err)
	}
	var last error
	for _, ep := range cfg.EtcdEndpoints {
		sctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout.D())
		_, last = cli.Status(sctx, ep)
		cancel()
		if last == nil {
			return cli, nil
		}
	}
	cli.Close()
	return nil, fmt.Errorf("cluster.etcd_endpoints %v: no endpoint answered within cluster.dial_timeout (%s): %w", cfg.EtcdEndpoints, cfg.DialTimeout, last)
}

func etcdTLS(cfg config.Cluster) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("cluster.ca_file %q: no PEM certificate in it", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if cfg.CertFile != "" {
		c, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.cert_file/cluster.key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// start connects, registers rec (waiting out a previous incarnation's
// lease), and starts the view and the republisher.
func (m *member) start(ctx context.Context, rec discovery.Record, exports func() []discovery.Region) error {
	cli, err := etcdClient(ctx, m.cfg)
	if err != nil {
		return err
	}
	m.cli, m.self, m.exports = cli, rec.Name, exports
	dcfg := discovery.Config{Prefix: m.cfg.Prefix, LeaseTTL: m.cfg.LeaseTTL.D(), Logger: m.log}
	rec.Regions = exports()
	reg, err := discovery.Register(ctx, cli, dcfg, rec)
	var held *discovery.HeldError
	if errors.As(err, &held) {
		bound := m.cfg.LeaseTTL.D() + m.cfg.DialTimeout.D()
		m.log.Warn("cluster: name held by another epoch; waiting for its lease to expire", "op", "cluster",
			"name", rec.Name, "holder_epoch", held.Holder.Epoch.String(), "holder_addr", held.Holder.Addr, "bound", bound)
		wctx, cancel := context.WithTimeout(ctx, bound)
		werr := discovery.WaitFree(wctx, cli, m.cfg.Prefix, rec.Name)
		cancel()
		if werr != nil {
			cli.Close()
			return fmt.Errorf("cluster: %w; still held after %s (cluster.lease_ttl + cluster.dial_timeout): is another live engine configured with peer.name %q?", err, bound, rec.Name)
		}
		rec.Regions = exports()
		reg, err = discovery.Register(ctx, cli, dcfg, rec)
	}
	if err != nil {
		cli.Close()
		return fmt.Errorf("cluster: %w", err)
	}
	m.reg = reg
	w, err := discovery.NewWatcher(ctx, cli, dcfg)
	if err != nil {
		reg.Close()
		cli.Close()
		return fmt.Errorf("cluster: %w", err)
	}
	m.w = w
	sub, view := w.Subscribe()
	m.sub = sub
	m.mu.Lock()
	for _, r := range view {
		m.seeLocked(r)
	}
	m.mu.Unlock()
	m.wg.Add(2)
	go m.follow()
	go m.republish()
	m.log.Info("cluster: joined", "op", "cluster", "name", rec.Name, "epoch", rec.Epoch.String(), "addr", rec.Addr,
		"prefix", m.cfg.Prefix, "members", len(view))
	return nil
}

// seeLocked gives r's incarnation a sequence number if it has none.
// REQUIRES: m.mu.
func (m *member) seeLocked(r discovery.Record) seen {
	s, ok := m.mu.seen[r.Name]
	if !ok || s.epoch != r.Epoch {
		m.mu.seq++
		s = seen{epoch: r.Epoch, seq: m.mu.seq, since: time.Now()}
		m.mu.seen[r.Name] = s
	}
	return s
}

// follow counts the view's events, forgets the incarnations that left,
// and drops the connections of the epochs that left or restarted
// (clusterconns.go).
func (m *member) follow() {
	defer m.wg.Done()
	for {
		ev, err := m.sub.Next(context.Background())
		if err != nil {
			return
		}
		name := ev.Record.Name
		var gone *discovery.Record // the incarnation whose connections go
		m.mu.Lock()
		switch ev.Kind {
		case discovery.Joined:
			m.joined.Add(1)
			m.seeLocked(ev.Record)
		case discovery.Updated:
			m.updated.Add(1)
		case discovery.Restarted:
			m.restarted.Add(1)
			m.seeLocked(ev.Record)
			if ev.Prev != nil && ev.Prev.Epoch != ev.Record.Epoch {
				gone = ev.Prev
				m.mu.superseded.add(name, ev.Prev.Epoch)
			}
		case discovery.Left:
			m.left.Add(1)
			if s, ok := m.mu.seen[name]; ok && s.epoch == ev.Record.Epoch {
				delete(m.mu.seen, name)
			}
			gone = &ev.Record
		}
		m.mu.Unlock()
		if gone != nil && name != m.self {
			m.dropEpoch(ev.Kind, *gone)
		}
	}
}

// dropEpoch drops the peer:// connections to gone's epoch, and for a
// restart (the epoch is dead) its inbound sessions too.
func (m *member) dropEpoch(kind discovery.EventKind, gone discovery.Record) {
	why := fmt.Sprintf("the cluster reports %q epoch %s %s", gone.Name, gone.Epoch, kind)
	n := m.conns.forget(gone.Name, gone.Epoch, why)
	m.dropped.Add(uint64(n))
	evicted := 0
	if kind == discovery.Restarted && m.server != nil {
		evicted = m.server.Evict(gone.Name, uint64(gone.Epoch))
	}
	if n > 0 || evicted > 0 {
		m.log.Info("cluster: dropped the connections of an old epoch", "op", "cluster", "name", gone.Name,
			"epoch", gone.Epoch.String(), "event", kind.String(), "segments", n, "sessions", evicted)
	}
}

// superseded is peer.ServerConfig.Superseded: a handshake from an epoch
// the view saw replaced by a restart is refused.
func (m *member) superseded(name string, epoch uint64) bool {
	m.mu.Lock()
	dead := m.mu.superseded.has(name, discovery.Epoch(epoch))
	m.mu.Unlock()
	if dead {
		m.refused.Add(1)
	}
	return dead
}

// republish writes the record again after the exports changed.
func (m *member) republish() {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case <-m.changed:
		}
		regions := m.exports()
		if sameRegions(regions, m.reg.Record().Regions) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.DialTimeout.D())
		err := m.reg.Update(ctx, regions)
		cancel()
		if err != nil {
			// The registrar keeps the regions: its next registration
			// publishes them.
			m.log.Warn("cluster: record not updated", "op", "cluster", "err", err)
			continue
		}
		m.recordUpdates.Add(1)
	}
}

func sameRegions(a, b []discovery.Region) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// addrOf is the address the view lists for the live engine name.
func (m *member) addrOf(name string) (string, bool) {
	r, ok := m.w.Lookup(name)
	return r.Addr, ok
}

// ClusterPeers is control.Cluster: the live engines, by name.
func (m *member) ClusterPeers() []control.ClusterPeer {
	recs := m.w.Records()
	out := make([]control.ClusterPeer, 0, len(recs))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		s := m.seeLocked(r) // the watcher may be ahead of follow
		p := control.ClusterPeer{Seq: s.seq, Name: r.Name, Epoch: r.Epoch.String(), Addr: r.Addr, State: "live",
			Self: r.Name == m.self && r.Epoch == m.reg.Record().Epoch, Since: s.since, Regions: []control.ClusterRegion{}}
		for _, g := range r.Regions {
			p.Regions = append(p.Regions, control.ClusterRegion{Name: g.Name, Bytes: g.Bytes, Location: g.Location, Permission: g.Permission})
		}
		out = append(out, p)
	}
	return out
}

// ClusterStats is control.Cluster: /cluster/status and /stats' counts.
func (m *member) ClusterStats() control.ClusterStats {
	rec := m.reg.Record()
	st := control.ClusterStats{Name: rec.Name, Epoch: rec.Epoch.String(), Prefix: m.cfg.Prefix,
		Members: len(m.w.Records()), Joined: m.joined.Load(), Left: m.left.Load(), Updated: m.updated.Load(),
		Restarted: m.restarted.Load(), RecordUpdates: m.recordUpdates.Load(), Revision: m.w.Revision(), Lists: m.w.Lists(),
		ConnsDropped: m.dropped.Load(), EpochsRefused: m.refused.Load()}
	rs := m.reg.Stats()
	st.LeaseRenewals, st.LeaseLost, st.Reregistered, st.RegisterFailures = rs.Renewals, rs.LeaseLost, rs.Reregistered, rs.RegisterFailures
	select {
	case <-m.reg.Done():
		if err := m.reg.Err(); err != nil {
			st.RegistrationError = err.Error()
		}
	default:
		st.Registered = true
	}
	return st
}

// close leaves the cluster: the key is deleted at once (lease revoked).
// Calling it again does nothing.
func (m *member) close() { m.closed.Do(m.leave) }

func (m *member) leave() {
	if m.cli == nil {
		return
	}
	close(m.stop)
	m.w.Close() // ends the subscription, so follow returns
	m.wg.Wait()
	if err := m.reg.Close(); err != nil {
		m.log.Warn("cluster: leaving", "op", "cluster", "err", err)
	} else {
		m.log.Info("cluster: left (lease revoked)", "op", "cluster", "name", m.self)
	}
	m.cli.Close()
}

// exportedRegions is the control Service's exported registrations as
// discovery publishes them.
func exportedRegions(svc *control.Service) func() []discovery.Region {
	return func() []discovery.Region {
		out := []discovery.Region{}
		for _, x := range svc.Exported() {
			out = append(out, discovery.Region{Name: x.Name, Bytes: x.Len(), Location: x.Location, Permission: x.Export})
		}
		return out
	}
}
