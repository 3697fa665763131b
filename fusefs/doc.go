// Package fusefs is the go-fuse node tree of the orbitefs mount: it maps
// file operations to control.Service calls and has no transfer logic of
// its own. The layout and formats are control's (see control/reference.md,
// served as /README); this package decides only how they look as files.
//
// # Tree
//
// Every directory is a dir node whose children come from a small
// children value (rootKids, memoryKids, batchKids, ...) asked on every
// Lookup and Readdir, so the tree always shows the Service's live objects
// and nothing needs to be added or removed when objects come and go.
// Inode numbers are fixed for static files and derived from the object's
// sequence number otherwise (ino.go), so a name reused for a new object
// gets a new inode and a stale handle never reaches the new object.
//
// # Files
//
//   - readFile: content rendered at open into a per-handle snapshot
//     (README, version, stats, metrics, error, info, state, status, tasks,
//     clone); size 0, DIRECT_IO, so each cat sees fresh content.
//   - docFile: JSON documents assembled per handle (control.DocWriter) and
//     acted on by the write that completes them; writes must be
//     sequential from offset 0 (unless O_APPEND), the handle's first
//     error is sticky, and Flush reports it, or an incomplete document,
//     idempotently.
//   - cmdFile: ctl and refresh: one action per write.
//   - dataFile: a memory region's bytes.
//   - waitFile: blocks in Read until the batch is terminal, honouring the
//     request's interrupt.
//   - txnFile: /ctl/batches/txn, the one-file transaction (txn.go,
//     control/txn.go): a read-write handle that runs a submission written
//     to it and blocks in Read until its batch is terminal.
//
// Directories refuse unlink, rename, link, symlink, mknod, create and
// mkdir with EPERM (readonly.go); only rmdir removes objects.
//
// Every writable file accepts Setattr truncating to 0, because `echo x >
// f` truncates with a separate setattr (go-fuse does not negotiate atomic
// O_TRUNC). Every error goes through control.Errno, never go-fuse's
// ToErrno.
//
// # Hazards
//
//   - The daemon never touches its own mount (deadlock).
//   - Mount options: the kernel caches only what cannot go stale
//     (cache.go: attributes of every node but the root, entries of names
//     that live as long as the mount, no negative entries), so removed
//     objects vanish at once and no Notify* call is needed; never
//     SingleThreaded, because a blocked wait would stall every other
//     client.
//   - No lock is held across a Service call from this package; the
//     Service itself never holds one across a blocking engine call.
package fusefs
