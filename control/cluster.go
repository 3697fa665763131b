// cluster.go owns what the mount shows of the cluster this engine is a
// member of (discovery through etcd): /cluster/status, one file per live
// engine under /cluster/peers, and the cluster counts in /stats. The view
// itself is kept elsewhere (the daemon's discovery watcher); this file
// only renders it, so control does not depend on etcd.
//
// Invariants:
//   - Without a Cluster in Options there is no /cluster and /stats has
//     no "cluster" object: a single daemon looks as it always did.
//   - A peer's file shows one incarnation: Seq is new for every (name,
//     epoch), so an inode never shows two epochs, and reading the file of
//     an engine that left or restarted fails with ENOENT.

package control

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ClusterPeer is one live engine of the cluster, as /cluster/peers/NAME
// shows it.
type ClusterPeer struct {
	// Seq identifies this incarnation (name and epoch) in the mount.
	Seq     uint64          `json:"-"`
	Name    string          `json:"name"`
	Epoch   string          `json:"epoch"`
	Addr    string          `json:"addr"`
	Regions []ClusterRegion `json:"regions"`
	// State is "live" while the record is in etcd.
	State string `json:"state"`
	// Self is this engine's own record.
	Self bool `json:"self"`
	// Since is when this view first saw this incarnation.
	Since time.Time `json:"since"`
}

// ClusterRegion is one region a peer exports.
type ClusterRegion struct {
	Name       string `json:"name"`
	Bytes      uint64 `json:"bytes"`
	Location   string `json:"location"`
	Permission string `json:"permission"`
}

// ClusterStats is /cluster/status and the "cluster" object of /stats.
type ClusterStats struct {
	Name       string `json:"name"`
	Epoch      string `json:"epoch"`
	Prefix     string `json:"prefix"`
	Registered bool   `json:"registered"`
	// RegistrationError is why the registration stopped (another epoch
	// took the name), if it did.
	RegistrationError string `json:"registration_error,omitempty"`
	Members           int    `json:"members"`
	Joined            uint64 `json:"joined"`
	Left              uint64 `json:"left"`
	Updated           uint64 `json:"updated"`
	Restarted         uint64 `json:"restarted"`
	RecordUpdates     uint64 `json:"record_updates"`
	Revision          int64  `json:"revision"`
	Lists             int    `json:"lists"`
	// LeaseRenewals are etcd's answers to the lease's keep-alive;
	// LeaseLost the leases that ended under this live engine (a
	// partition longer than the TTL, an etcd restart); Reregistered and
	// RegisterFailures the registrations again that followed, and the
	// attempts at one that failed.
	LeaseRenewals    uint64 `json:"lease_renewals"`
	LeaseLost        uint64 `json:"lease_lost"`
	Reregistered     uint64 `json:"reregistered"`
	RegisterFailures uint64 `json:"register_failures"`
	// ConnsDropped are the peer:// segments' connections dropped because
	// the view said their engine left or restarted (the next transfer
	// dials again); EpochsRefused the peer handshakes refused because
	// they came from an epoch the view saw superseded by a restart.
	ConnsDropped  uint64 `json:"conns_dropped"`
	EpochsRefused uint64 `json:"epochs_refused"`
}

// clusterMetrics are /metrics' view of ClusterStats, shown only on a
// cluster member.
var clusterMetrics = []struct {
	name, typ, help string
	value           func(*ClusterStats) float64
}{
	{"cluster_registered", "gauge", "1 while this engine's record is registered in etcd, 0 once it gave up (another epoch took the name).", func(c *ClusterStats) float64 { return b2f(c.Registered) }},
	{"cluster_members", "gauge", "Engines listed in this engine's view of the cluster (itself included).", func(c *ClusterStats) float64 { return float64(c.Members) }},
	{"cluster_joined_total", "counter", "Engines the view saw join.", func(c *ClusterStats) float64 { return float64(c.Joined) }},
	{"cluster_left_total", "counter", "Engines the view saw leave (closed, or lease expired).", func(c *ClusterStats) float64 { return float64(c.Left) }},
	{"cluster_updated_total", "counter", "Records the view saw change address or regions, same epoch.", func(c *ClusterStats) float64 { return float64(c.Updated) }},
	{"cluster_restarted_total", "counter", "Engines the view saw come back with a new epoch.", func(c *ClusterStats) float64 { return float64(c.Restarted) }},
	{"cluster_record_updates_total", "counter", "Rewrites of this engine's record after its exported regions changed.", func(c *ClusterStats) float64 { return float64(c.RecordUpdates) }},
	{"cluster_revision", "gauge", "The etcd revision the view is current to.", func(c *ClusterStats) float64 { return float64(c.Revision) }},
	{"cluster_lists_total", "counter", "Full lists of the prefix (the first, and one after every broken watch).", func(c *ClusterStats) float64 { return float64(c.Lists) }},
	{"cluster_lease_renewals_total", "counter", "etcd's answers to this engine's lease keep-alive.", func(c *ClusterStats) float64 { return float64(c.LeaseRenewals) }},
	{"cluster_lease_lost_total", "counter", "Leases that ended while this engine lived.", func(c *ClusterStats) float64 { return float64(c.LeaseLost) }},
	{"cluster_reregistered_total", "counter", "Registrations again after a lost lease.", func(c *ClusterStats) float64 { return float64(c.Reregistered) }},
	{"cluster_register_failures_total", "counter", "Failed attempts to register again after a lost lease.", func(c *ClusterStats) float64 { return float64(c.RegisterFailures) }},
	{"cluster_conns_dropped_total", "counter", "peer:// segment connections dropped because their engine left or restarted.", func(c *ClusterStats) float64 { return float64(c.ConnsDropped) }},
	{"cluster_epochs_refused_total", "counter", "Peer handshakes refused for coming from an epoch superseded by a restart.", func(c *ClusterStats) float64 { return float64(c.EpochsRefused) }},
}

// renderClusterMetrics renders cs in the exposition format.
func renderClusterMetrics(cs *ClusterStats) string {
	var b strings.Builder
	for _, m := range clusterMetrics {
		fmt.Fprintf(&b, "# HELP orbitefs_%s %s\n# TYPE orbitefs_%s %s\norbitefs_%s %s\n", m.name, m.help, m.name, m.typ, m.name,
			strconv.FormatFloat(m.value(cs), 'f', -1, 64))
	}
	return b.String()
}

// Cluster is the daemon's view of its cluster.
type Cluster interface {
	ClusterPeers() []ClusterPeer // live engines, by name
	ClusterStats() ClusterStats
}

// ClusterEnabled reports whether the mount has a /cluster directory.
func (s *Service) ClusterEnabled() bool { return s.opts.Cluster != nil }

// ClusterPeers lists the live engines, by name.
func (s *Service) ClusterPeers() []ClusterPeer {
	if s.opts.Cluster == nil {
		return nil
	}
	return s.opts.Cluster.ClusterPeers()
}

// ClusterPeer finds a live engine by name.
func (s *Service) ClusterPeer(name string) (ClusterPeer, bool) {
	for _, p := range s.ClusterPeers() {
		if p.Name == name {
			return p, true
		}
	}
	return ClusterPeer{}, false
}

// ClusterPeerInfo renders /cluster/peers/NAME for the incarnation seq:
// KindNotFound once that incarnation left or restarted.
func (s *Service) ClusterPeerInfo(name string, seq uint64) ([]byte, error) {
	p, ok := s.ClusterPeer(name)
	if !ok || p.Seq != seq {
		return nil, s.fail(scope{op: "read", name: "cluster/peers/" + name}, notFound("engine %q left the cluster or restarted with a new epoch (ls /cluster/peers)", name))
	}
	return marshal(p), nil
}

// ClusterStatus renders /cluster/status.
func (s *Service) ClusterStatus() []byte {
	if s.opts.Cluster == nil {
		return marshal(struct{}{})
	}
	return marshal(s.opts.Cluster.ClusterStats())
}

// exportsChanged tells the daemon that the set of exported regions
// changed (it republishes its record).
func (s *Service) exportsChanged() {
	if s.opts.ExportsChanged != nil {
		s.opts.ExportsChanged()
	}
}
