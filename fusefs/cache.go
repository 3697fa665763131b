// cache.go owns what the kernel may cache about the tree, so that a
// control-plane round trip (clone, submit, seal, wait, free) does not pay
// a FUSE request for every path component and permission check: without
// caching one such round trip cost 64 FUSE requests, 25 of them GETATTR
// and 18 LOOKUP (`orbitefs bench ctl`, docs/performance.md).
//
// Invariants:
//   - Attributes are cached (attrTTL) for every node but the root: every
//     node's attributes are fixed
//     for the life of its inode (control files report size 0 and are read
//     through DIRECT_IO handles; a data file's size is its region's, fixed
//     at registration; times are creation times), and an inode number
//     names one object forever (ino.go), so a cached attribute is never
//     stale. The root's are not cached: stat of the mount point must reach
//     the daemon, so a dead daemon's mount reads ENOTCONN (the stale-mount
//     check at start, scripts, the test harness).
//   - Entries are cached (entryTTL) only for names that exist as long as
//     the mount: the fixed files and directories and the fixed entries of
//     the object collections (memory/register, segments/open,
//     ctl/batches/clone, ctl/batches/txn). Names of objects (a batch number, a memory or
//     segment name) and everything beneath them are looked up again on
//     every walk, so an object freed by any path (ctl free, idle reclaim,
//     another mount) is gone at once. Negative entries are never cached.

package fusefs

import "time"

const (
	attrTTL  = time.Hour
	entryTTL = time.Hour
)

// stableNames is implemented by children whose some names live as long
// as the mount.
type stableNames interface {
	stable(name string) bool
}

func (fixedKids) stable(string) bool         { return true }
func (memoryKids) stable(name string) bool   { return name == "register" }
func (segmentsKids) stable(name string) bool { return name == "open" }
func (batchesKids) stable(name string) bool  { return name == "clone" || name == "txn" }
