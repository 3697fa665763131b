// cluster.go owns the /cluster directory of a daemon that is a cluster
// member: status (this engine's registration and the view's counts) and
// peers, one read-only file per live engine holding its record.
//
// Invariants:
//   - /cluster exists only when the Service has a cluster view.
//   - A peer file's inode is its incarnation's (name and epoch): after a
//     restart the name shows a new inode, and the old one reads ENOENT.
//   - Peer names are looked up again on every walk (never cached), so an
//     engine that left is gone from ls and from lookups at once.

package fusefs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/orbitefs/orbitefs/control"
)

// clusterSeqBase keeps peer inode numbers (objIno(clusterSeqBase+seq, ...))
// clear of the Service's object sequence numbers.
const clusterSeqBase = 1 << 40

func (f *fsys) clusterDir() child {
	kids := fixedKids{
		{name: "status", ino: inoClusterStatus, node: f.staticFile(f.svc.ClusterStatus)},
		{name: "peers", ino: inoClusterPeers, dir: true, node: f.staticDir(clusterPeersKids{f})},
	}
	return child{name: "cluster", ino: inoCluster, dir: true, node: f.staticDir(kids)}
}

// clusterPeersKids is /cluster/peers: one file per live engine.
type clusterPeersKids struct{ f *fsys }

func (k clusterPeersKids) peerFile(p control.ClusterPeer) child {
	f := k.f
	name, seq := p.Name, p.Seq
	return child{name: name, ino: objIno(clusterSeqBase+seq, slotInfo), node: func() fs.InodeEmbedder {
		return newReadFile(f, who{}, p.Since, func(context.Context) ([]byte, error) { return f.svc.ClusterPeerInfo(name, seq) })
	}}
}

func (k clusterPeersKids) list() []child {
	var out []child
	for _, p := range k.f.svc.ClusterPeers() {
		out = append(out, k.peerFile(p))
	}
	return out
}

func (k clusterPeersKids) find(name string) (child, bool) {
	if p, ok := k.f.svc.ClusterPeer(name); ok {
		return k.peerFile(p), true
	}
	return child{}, false
}
