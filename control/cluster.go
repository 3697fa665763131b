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

import "time"

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
