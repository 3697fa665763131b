// segment.go owns file segments: URI parsing, confined opening, the
// shared entry per (path, permission), cached info, refresh, range
// checks and close-with-drain.
//
// Invariants:
//   - An entry's fds stay bound to the inode resolved at open: refresh and
//     range checks fstat the fd, never the path, so rename and unlink do
//     not change what a segment reads or writes.
//   - A read is range-checked against sizeSeen, the size the engine last
//     saw, without a syscall (an fstat per submission was 13 % of a 4 KiB
//     client's CPU); an end past it fstats before refusing, so a file that
//     grew is read at once. A file that shrank is met by the read itself:
//     end of file fails the task with its exact count (KindRange,
//     shortio.go) and lowers sizeSeen, so later reads past the new end are
//     refused at submit. Writes (which could extend a shrunk file) and
//     submissions with SubmitOptions.SizeNow always fstat.
//   - users counts admitted groups; a draining entry admits none, and its
//     fds close only when users is 0 and the last handle has closed.
//   - Opening never creates, truncates or extends a file.
//   - A URI's path is used literally (never cleaned), and with allowed
//     roots every opened file's real path, read from the opened
//     descriptor, lies beneath one of them (openConfined).
//   - (dev, ino) is fixed at open and names the file itself: two entries
//     (another permission, another path, a hard link) on one inode fence
//     against each other (group.conflicts).
//   - An entry is shared only by handles of one caller identity
//     (segKey), and its file was opened with that identity (caller.go).
//   - Lock order: Engine.mu before segEntry.mu.

package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Segment is a handle on an open file segment. Handles opened with the
// same path and permission share one entry (and its fds). Safe for
// concurrent use.
type Segment struct {
	e   *Engine
	ent *segEntry
	uri string
	// closed is read by every submission through the handle without a
	// lock (a mutex here, shared by every client of the handle, was 15 %
	// of 32 clients' CPU on 16 cores); a close sets it once, by swap.
	closed atomic.Bool
}

// segEntry is the shared state behind aliases.
type segEntry struct {
	key      string // in Engine.mu.segments (segKey)
	path     string
	perm     Permission
	buffered FileRef // always valid
	direct   FileRef // FD -1 when no O_DIRECT fd
	dioMem   uint64
	dioOff   uint64
	fsType   string
	// inMemory: the file lives in memory (tmpfs, ramfs, hugetlbfs), so
	// a buffered copy never waits for a disk (callercopy.go).
	inMemory bool
	// blocking: the filesystem cannot do non-blocking I/O and may wait on
	// a server that never answers (storewait.go): ring ops are punted to
	// io-wq, no caller path runs them, metadata calls are bounded.
	blocking bool
	// statBusy admits one bounded fstat at a time on a blocking entry.
	statBusy atomic.Bool
	// sizeSeen is the file size of the latest fstat, lowered where a read
	// met end of file (noteEOF): what reads are range-checked against.
	sizeSeen atomic.Uint64
	dev      uint64 // st_dev of the bound inode
	ino      uint64 // st_ino of the bound inode: (dev, ino) names the file for fences
	// fmap: the file's pages mapped for DMA (mappedexec.go), tmpfs only.
	fmap entryMap

	closeOnce sync.Once

	// users counts admitted groups (admit/done; users.go), closing set
	// while mu.draining or mu.gone is: a submission takes no lock of the
	// entry, which every client of the file shares (on 16 cores the
	// entry's mutex, twice per 4 KiB request, was the busiest lock of
	// the engine). closing is set or cleared only under mu, with mu.idle
	// made first.
	users users

	mu struct {
		sync.Mutex
		handles  int
		draining bool
		// closers counts CloseFileSegment calls in progress on any alias:
		// only the last to finish reopens the entry to the remaining
		// aliases, so a close that started while another finished (two
		// closes of one handle, or of two aliases) never leaves it
		// draining for good nor reopens it under a close still waiting.
		closers int
		// timedOut is set by a close that timed out and never cleared:
		// the spec leaves every alias closed to new work until all of
		// them have closed (a later successful close of one alias must
		// not reopen the others, the timed-out handle included).
		timedOut bool
		idle     chan struct{} // closed when users drops to 0 while draining
		size     uint64
		sizeAt   time.Time
		gone     bool // fds closed, slot freed
	}
}

// SegmentInfo describes an open segment.
type SegmentInfo struct {
	URI            string     `json:"uri"`
	Path           string     `json:"path"`
	Size           uint64     `json:"size"`
	Offset         uint64     `json:"offset"`
	Permission     Permission `json:"-"`
	DirectIO       bool       `json:"direct_io"`
	DIOMemAlign    uint64     `json:"dio_mem_alignment"`
	DIOOffsetAlign uint64     `json:"dio_offset_alignment"`
	Filesystem     string     `json:"filesystem"`
	// BlockingFS: the filesystem cannot do non-blocking I/O (FUSE, NFS,
	// SMB, ...); its ops run on the kernel's worker threads, never on
	// the submitting caller, and its metadata calls are bounded.
	BlockingFS   bool      `json:"blocking_filesystem"`
	Device       string    `json:"device"` // "major:minor" of the filesystem holding the inode
	GDSMode      string    `json:"gds_mode"`
	Aliases      int       `json:"aliases"`
	Users        int       `json:"users"`
	Draining     bool      `json:"draining"`
	SizeCachedAt time.Time `json:"size_cached_at"`
}

// URI is the text the segment was opened with.
func (s *Segment) URI() string { return s.uri }

// Permission is what the segment allows.
func (s *Segment) Permission() Permission { return s.ent.perm }

func (s *Segment) name() string { return "segments/" + s.uri }

func (*Segment) isTarget() {}

// sameFile reports whether two entries are bound to one inode. Entries
// are keyed by path and permission, so one file can sit behind several.
func (ent *segEntry) sameFile(o *segEntry) bool {
	return ent == o || (ent.dev == o.dev && ent.ino == o.ino)
}

// ParseFileURI returns the path of a file:// URI: "file:///abs" is
// absolute, "file://rel/x" is relative to the working directory. The text
// after file:// is taken literally, never cleaned: "file:///a/link/../f"
// opens what open(2) resolves (the parent of link's target), not /a/f.
func ParseFileURI(uri string) (string, error) {
	rest, ok := strings.CutPrefix(uri, "file://")
	if !ok {
		return "", fmt.Errorf("uri %q: want file:///absolute/path or file://relative/path", uri)
	}
	if rest == "" || rest == "/" {
		return "", fmt.Errorf("uri %q: no file path", uri)
	}
	if strings.ContainsRune(rest, 0) {
		return "", fmt.Errorf("uri %q: path contains a NUL byte", uri)
	}
	if strings.HasPrefix(rest, "/") {
		return rest, nil
	}
	// Relative: joined to the working directory without cleaning, so
	// "link/../f" still means what open(2) makes of it.
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("uri %q: %w", uri, err)
	}
	return strings.TrimSuffix(wd, "/") + "/" + rest, nil
}

// OpenFileSegment opens an existing regular file for transfers with the
// process's own credentials (OpenFileSegmentAs with a nil Caller).
func (e *Engine) OpenFileSegment(uri string, perm Permission) (*Segment, error) {
	return e.OpenFileSegmentAs(nil, uri, perm)
}

// OpenFileSegmentAs opens an existing regular file for transfers on
// behalf of c: the kernel must let c open it with perm's access mode
// (caller.go). Another open of the same path with the same permission by
// the same identity shares the entry, after the same check. It returns
// ErrNotFound when the file is missing, ErrPermission when the file, the
// caller's rights or the allowed roots refuse it, ErrInvalid for a bad
// URI or a non-regular file, ErrExhausted past max_file_segments.
func (e *Engine) OpenFileSegmentAs(c *Caller, uri string, perm Permission) (*Segment, error) {
	const op = "open"
	name := "segments/" + uri
	if err := e.checkOpen(op); err != nil {
		return nil, err
	}
	if perm != PermRead && perm != PermWrite && perm != PermReadWrite {
		return nil, errorf(KindInvalid, op, name, "permission %d: want read, write or read_write", perm)
	}
	path, err := ParseFileURI(uri)
	if err != nil {
		return nil, wrap(KindInvalid, op, name, err)
	}
	key := segKey(path, perm, c)

	// Sharing an entry checks the caller's right to open the file again,
	// as a new open(2) would be: a mode changed since the entry opened
	// counts. That open may block on the store like any other: bounded.
	e.mu.Lock()
	_, shared := e.mu.segments[key]
	e.mu.Unlock()
	if shared && !c.self() {
		_, err := boundedCall(e.cfg.StoreCallTimeout.D(), "open "+path, nil, func() (struct{}, error) {
			fd, err := e.openConfined(c, path, accessFlags(perm)|unix.O_NONBLOCK|unix.O_NOCTTY)
			if err == nil {
				unix.Close(fd)
			}
			return struct{}{}, err
		}, nil)
		if err != nil {
			return nil, openError(op, name, err)
		}
	}
	if s, ok, err := e.shareEntry(key, uri, name, path); ok {
		return s, err
	}
	// The open, fstat and statfs may block in the kernel on a store that
	// does not answer: they run on a helper, and the caller waits at most
	// store_call_timeout (storewait.go). segMu is not held meanwhile, so
	// opens of other files go on.
	if n := e.openHelpers.Add(1); n > int64(e.cfg.MaxFileSegments) {
		e.openHelpers.Add(-1)
		return nil, errorf(KindExhausted, op, name, "%d segment opens are still waiting for their filesystems, more than max_file_segments (%d)", n-1, e.cfg.MaxFileSegments)
	}
	ent, err := boundedCall(e.cfg.StoreCallTimeout.D(), "open "+path, nil,
		func() (*segEntry, error) {
			defer e.openHelpers.Add(-1)
			return e.openEntry(c, path, perm)
		},
		func(ent *segEntry, err error) {
			if err == nil {
				e.closeEntry(ent)
				e.log.Warn("segment open returned after its caller gave up; closed", "segment", uri, "path", path)
			}
		})
	if err != nil {
		return nil, openError(op, name, err)
	}
	ent.key = key
	e.segMu.Lock() // two racing opens of one key share the first entry
	defer e.segMu.Unlock()
	if s, ok, err := e.shareEntry(key, uri, name, path); ok {
		e.closeEntry(ent)
		return s, err
	}
	e.mu.Lock()
	if n := len(e.mu.segments); n >= e.cfg.MaxFileSegments {
		e.mu.Unlock()
		e.closeEntry(ent)
		return nil, errorf(KindExhausted, op, name, "%d open or draining segments reach max_file_segments (%d)", n, e.cfg.MaxFileSegments)
	}
	ent.mu.handles = 1
	e.mu.segments[key] = ent
	e.mu.Unlock()
	e.log.Info("segment opened", "segment", uri, "path", path, "permission", perm.String(), "direct_io", ent.direct.FD >= 0, "filesystem", ent.fsType, "blocking_filesystem", ent.blocking, "for", c.String())
	return &Segment{e: e, ent: ent, uri: uri}, nil
}

// openError gives an open's error its context. openEntry's and
// openConfined's errors carry a kind and no context; a bounded call's
// timeout is a kinded detail.
func openError(op, name string, err error) error {
	cause := err
	if ee, ok := err.(*Error); ok {
		cause = ee.Err
	}
	return &Error{Op: op, Name: name, Kind: KindOf(err), Err: cause}
}

// shareEntry returns a new handle on the open entry for key, or the
// reason it cannot be shared (ok true either way); ok is false when
// there is no entry and max_file_segments leaves room for one.
func (e *Engine) shareEntry(key, uri, name, path string) (*Segment, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ent, found := e.mu.segments[key]
	if !found {
		if n := len(e.mu.segments); n >= e.cfg.MaxFileSegments {
			return nil, true, errorf(KindExhausted, "open", name, "%d open or draining segments reach max_file_segments (%d)", n, e.cfg.MaxFileSegments)
		}
		return nil, false, nil
	}
	ent.mu.Lock()
	defer ent.mu.Unlock()
	if !ent.mu.draining && !ent.mu.gone {
		ent.mu.handles++
		return &Segment{e: e, ent: ent, uri: uri}, true, nil
	}
	return nil, true, errorf(KindBusy, "open", name, "%s is draining after a close timed out; close every alias first", path)
}

// segKey names an entry: path, permission and the opener's identity.
func segKey(path string, perm Permission, c *Caller) string {
	return fmt.Sprintf("%s\x00%d\x00%s", path, perm, c.key())
}

// accessFlags is the open(2) access mode perm needs.
func accessFlags(perm Permission) int {
	switch perm {
	case PermWrite:
		return unix.O_WRONLY
	case PermReadWrite:
		return unix.O_RDWR
	}
	return unix.O_RDONLY
}

// openEntry opens path beneath the allowed roots for c and inspects it.
// The file is opened as c; the O_DIRECT reopen of the same inode below
// then needs no second check.
func (e *Engine) openEntry(c *Caller, path string, perm Permission) (*segEntry, error) {
	acc := accessFlags(perm)
	// O_NONBLOCK keeps a FIFO from blocking the open; it is cleared below
	// because io_uring honours it on regular files (EAGAIN, no punt).
	fd, err := e.openConfined(c, path, acc|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	ent := &segEntry{path: path, perm: perm, buffered: FileRef{FD: fd}, direct: FileRef{FD: -1}}
	ok := false
	defer func() {
		if !ok {
			ent.closeFDs(false)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, wrap(KindIO, "", "", os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, wrap(KindInvalid, "", "", fmt.Errorf("%s is not a regular file", path))
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		return nil, wrap(KindIO, "", "", os.NewSyscallError("fcntl", err))
	}
	ent.mu.size, ent.mu.sizeAt = uint64(st.Size), time.Now()
	ent.sizeSeen.Store(uint64(st.Size))
	ent.dev, ent.ino = st.Dev, st.Ino

	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err == nil {
		ent.fsType = fsName(sfs.Type)
		ent.inMemory = sfs.Type == unix.TMPFS_MAGIC || sfs.Type == unix.RAMFS_MAGIC || sfs.Type == unix.HUGETLBFS_MAGIC
		ent.blocking = isBlockingFS(int64(sfs.Type))
	} else {
		ent.blocking = true // unknown: assume the worst
	}
	ent.dioMem, ent.dioOff = 4096, 4096
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &stx); err == nil &&
		stx.Mask&unix.STATX_DIOALIGN != 0 && stx.Dio_offset_align > 0 {
		ent.dioMem, ent.dioOff = uint64(stx.Dio_mem_align), uint64(stx.Dio_offset_align)
	}
	// tmpfs takes the buffered fd: its "direct" I/O is a page-cache copy.
	if ent.fsType != "tmpfs" && e.cfg.IOUring.DirectIO {
		// Reopening through /proc binds the same inode, even if the path
		// was renamed or unlinked since the first open.
		dfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), acc|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err == nil {
			ent.direct.FD = dfd
		}
	}
	e.mu.Lock()
	e.mu.nextKey++
	ent.buffered.Key = e.mu.nextKey
	e.mu.nextKey++
	ent.direct.Key = e.mu.nextKey
	e.mu.Unlock()
	ok = true
	return ent, nil
}

func fsName(t int64) string {
	switch t {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	if n, ok := blockingFS[t]; ok {
		return n
	}
	return fmt.Sprintf("0x%x", t)
}

// openConfined opens path with flags the way open(2) resolves it (".."
// after a symlink applies to the symlink's target; absolute and relative
// symlinks both follow), and, when allowed roots are configured, refuses
// a file whose real location is not beneath one of them. The check is on
// the opened inode, not the name: the walk takes an O_PATH reference
// first (which opens no device or FIFO and pins the inode), the kernel
// reports that descriptor's real path through /proc/self/fd, and the
// file is then reopened through the same descriptor, so a rename or a
// swapped symlink between check and open cannot substitute another file.
//
// Another user's path never passes through a /proc magic link
// (/proc/self/fd/N, /dev/fd/N, /proc/<pid>/cwd, ...): resolved in the
// daemon, "self" is the daemon, and its descriptors would hand the caller
// files it cannot reach itself (one in a directory it may not search, a
// memfd) while the checks below see only the file's own mode.
func (e *Engine) openConfined(c *Caller, path string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC
	if len(e.cfg.AllowedRoots) == 0 {
		fd := -1
		err := c.as(func() (err error) {
			if fd, err = c.open(path, flags); err != nil {
				return openErr(path, err)
			}
			return nil
		})
		return fd, err
	}
	// The walk and the reopen run as c: the kernel checks c's search
	// rights on every directory and c's read or write right on the file.
	pfd, real := -1, ""
	err := c.as(func() (err error) {
		if pfd, err = c.open(path, unix.O_PATH|unix.O_CLOEXEC); err != nil {
			return openErr(path, err)
		}
		if real, err = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", pfd)); err != nil {
			return wrap(KindIO, "", "", err)
		}
		return nil
	})
	if pfd >= 0 {
		defer unix.Close(pfd)
	}
	if err != nil {
		return -1, err
	}
	if !e.beneathRoot(real) {
		return -1, wrap(KindPermission, "", "", fmt.Errorf("%s resolves to %s, not beneath an allowed root (%s)", path, real, strings.Join(e.cfg.AllowedRoots, ", ")))
	}
	fd := -1
	err = c.as(func() (err error) {
		if fd, err = unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), flags, 0); err != nil {
			return openErr(path, err)
		}
		return nil
	})
	return fd, err
}

// beneathRoot reports whether real (a kernel-reported absolute path) lies
// strictly beneath an allowed root, taken both as configured and with its
// own symlinks resolved (the kernel reports resolved paths).
func (e *Engine) beneathRoot(real string) bool {
	under := func(root string) bool {
		rel, err := filepath.Rel(root, real)
		return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	for _, r := range e.cfg.AllowedRoots {
		if under(r) {
			return true
		}
		if rr, err := filepath.EvalSymlinks(r); err == nil && rr != r && under(rr) {
			return true
		}
	}
	return false
}

func openErr(path string, err error) error {
	pe := &os.PathError{Op: "open", Path: path, Err: err}
	if err == errMagicLink || err == errNoOpenat2 {
		return wrap(KindPermission, "", "", pe)
	}
	switch err {
	case unix.ENOENT, unix.ENOTDIR:
		return wrap(KindNotFound, "", "", pe)
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return wrap(KindPermission, "", "", pe)
	case unix.ELOOP, unix.EISDIR, unix.ENXIO:
		return wrap(KindInvalid, "", "", pe)
	case unix.EMFILE, unix.ENFILE, unix.ENOMEM:
		return wrap(KindExhausted, "", "", pe)
	}
	return wrap(KindIO, "", "", pe)
}

// closeFDs closes the entry's fds exactly once (the last alias's close
// and Engine.Close may both get here). The fd numbers stay in place:
// readers racing a close see a stale number, never a torn write, and
// admit refuses them before any I/O.
func (ent *segEntry) closeFDs(keepDirect bool) {
	ent.closeOnce.Do(func() {
		if ent.direct.FD >= 0 && !keepDirect {
			unix.Close(ent.direct.FD)
		}
		if ent.buffered.FD >= 0 {
			unix.Close(ent.buffered.FD)
		}
	})
}

// closeEntry drops the entry's fd registrations from the transport, then
// closes its fds. Only for an entry no group can use any more.
func (e *Engine) closeEntry(ent *segEntry) {
	e.forgetMapping(ent)
	keepDirect := e.gdsForgetFile(ent)
	if e.file != nil {
		e.file.ForgetFile(ent.buffered.Key)
		e.file.ForgetFile(ent.direct.Key)
	}
	if ent.blocking {
		// close(2) on FUSE sends a FLUSH the kernel waits for without
		// interruption: on a stalled store only this goroutine waits.
		go ent.closeFDs(keepDirect)
		return
	}
	ent.closeFDs(keepDirect)
}

// currentSize fstats the bound inode; on a blocking filesystem the call
// is bounded by store_call_timeout (storewait.go). Errors carry a kind:
// KindTimeout for a store that did not answer, KindIO otherwise.
func (e *Engine) currentSize(ent *segEntry) (uint64, error) {
	var n uint64
	var err error
	if ent.blocking {
		n, err = boundedCall(e.cfg.StoreCallTimeout.D(), "fstat "+ent.path, &ent.statBusy, ent.currentSize, nil)
	} else {
		n, err = ent.currentSize()
	}
	if err != nil && KindOf(err) == KindUnknown {
		err = detail(KindIO, "%w", err)
	}
	return n, err
}

// currentSize fstats the bound inode, however long the kernel takes, and
// remembers what it saw in sizeSeen.
func (ent *segEntry) currentSize() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(ent.buffered.FD, &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	ent.sizeSeen.Store(uint64(st.Size))
	return uint64(st.Size), nil
}

// noteEOF records that a read met end of file at offset end: the file is
// no longer than that, so sizeSeen drops to it (never rises: a lower
// value only costs the next read past it an fstat).
func (ent *segEntry) noteEOF(end uint64) {
	for {
		cur := ent.sizeSeen.Load()
		if cur <= end || ent.sizeSeen.CompareAndSwap(cur, end) {
			return
		}
	}
}

// sizeCheck range-checks one submission's requests against the file's
// size (checkFileRange): a read against sizeSeen, with one fstat when a
// request ends past it; a write, or any op with SubmitOptions.SizeNow,
// against an fstat made for the submission.
type sizeCheck struct {
	e     *Engine
	ent   *segEntry
	size  uint64
	fresh bool // size came from an fstat of this submission
}

func (e *Engine) newSizeCheck(ent *segEntry, op Op, now bool) (sizeCheck, error) {
	c := sizeCheck{e: e, ent: ent}
	if op == OpRead && !now {
		c.size = ent.sizeSeen.Load()
		return c, nil
	}
	return c, c.stat()
}

func (c *sizeCheck) stat() error {
	n, err := c.e.currentSize(c.ent)
	c.size, c.fresh = n, err == nil
	return err
}

// check is checkFileRange against the size, which an end past a size not
// read for this submission first refreshes.
func (c *sizeCheck) check(s *Segment, op Op, offset, length uint64) error {
	err := checkFileRange(s, op, offset, length, c.size)
	if err == nil || c.fresh || KindOf(err) != KindRange {
		return err
	}
	if err := c.stat(); err != nil {
		return err
	}
	return checkFileRange(s, op, offset, length, c.size)
}

func (s *Segment) check(op string) error {
	if s.closed.Load() {
		return errorf(KindNotFound, op, s.name(), "segment handle is closed")
	}
	return nil
}

// Info returns the segment's description. Size comes from a cache
// refreshed at most every file_info_ttl (spec: one hour); Refresh forces it.
func (e *Engine) FileSegmentInfo(s *Segment) (SegmentInfo, error) {
	if err := s.check("info"); err != nil {
		return SegmentInfo{}, err
	}
	ent := s.ent
	ent.mu.Lock()
	stale := time.Since(ent.mu.sizeAt) >= e.cfg.FileInfoTTL.D()
	ent.mu.Unlock()
	if stale {
		if err := e.RefreshFileSegment(s); err != nil {
			return SegmentInfo{}, err
		}
	}
	ent.mu.Lock()
	defer ent.mu.Unlock()
	return SegmentInfo{
		URI: s.uri, Path: ent.path, Size: ent.mu.size, Permission: ent.perm,
		DirectIO: ent.direct.FD >= 0, DIOMemAlign: ent.dioMem, DIOOffsetAlign: ent.dioOff,
		Filesystem: ent.fsType, BlockingFS: ent.blocking, Device: fmt.Sprintf("%d:%d", unix.Major(ent.dev), unix.Minor(ent.dev)), GDSMode: e.gdsMode(), Aliases: ent.mu.handles, Users: ent.userCount(),
		Draining: ent.mu.draining, SizeCachedAt: ent.mu.sizeAt,
	}, nil
}

// RefreshFileSegment re-reads the size of the bound inode into the cache.
func (e *Engine) RefreshFileSegment(s *Segment) error {
	if err := s.check("refresh"); err != nil {
		return err
	}
	n, err := e.currentSize(s.ent)
	if err != nil {
		return wrap(KindOf(err), "refresh", s.name(), err)
	}
	s.ent.mu.Lock()
	s.ent.mu.size, s.ent.mu.sizeAt = n, time.Now()
	s.ent.mu.Unlock()
	return nil
}

// ResolveFileOffset checks that op may touch [offset, offset+length) of
// the segment's current size and returns the file offset (segments have
// base zero). Zero length and overflow are ErrInvalid, an end past the
// current size ErrRange, a disallowed op ErrPermission.
func (e *Engine) ResolveFileOffset(s *Segment, op Op, offset, length uint64) (uint64, error) {
	if err := s.check("resolve"); err != nil {
		return 0, err
	}
	size, err := e.currentSize(s.ent)
	if err != nil {
		return 0, wrap(KindOf(err), "resolve", s.name(), err)
	}
	if err := checkFileRange(s, op, offset, length, size); err != nil {
		return 0, &Error{Op: "resolve", Name: s.name(), Kind: KindOf(err), Err: err}
	}
	return offset, nil
}

func checkFileRange(s *Segment, op Op, offset, length, size uint64) error {
	if !s.ent.perm.allows(op) {
		return detail(KindPermission, "%s on a segment opened %s", op, s.ent.perm)
	}
	if length == 0 {
		return detail(KindInvalid, "zero length")
	}
	end := offset + length
	if end < offset {
		return detail(KindInvalid, "offset %d + length %d overflows", offset, length)
	}
	if end > size {
		return detail(KindRange, "offset %d + length %d = %d is beyond file size %d", offset, length, end, size)
	}
	return nil
}

// admit counts a group as a user of the entry; it fails while draining.
func (ent *segEntry) admit(at shard) bool {
	if ent.users.enter(at) {
		return true
	}
	ent.wakeIfIdle() // its add was counted for an instant
	return false
}

// done drops a user taken by admit; the last one of a draining entry
// wakes its close.
func (ent *segEntry) done(at shard) {
	if ent.users.leave(at) {
		ent.wakeIfIdle()
	}
}

// wakeIfIdle wakes a close waiting for the entry's users once none is
// left. It counts under mu: a close that began after this goroutine's
// leave (with users of its own) must not be woken by it.
func (ent *segEntry) wakeIfIdle() {
	ent.mu.Lock()
	if ent.mu.idle != nil && ent.users.count() == 0 {
		close(ent.mu.idle)
		ent.mu.idle = nil
	}
	ent.mu.Unlock()
}

// userCount is the number of admitted groups.
func (ent *segEntry) userCount() int { return int(ent.users.count()) }

// closeLocked closes the entry to new users and returns how many it has;
// with some, mu.idle is closed when the last one is done.
// REQUIRES: ent.mu.
func (ent *segEntry) closeLocked() int {
	if ent.mu.idle == nil {
		ent.mu.idle = make(chan struct{}) // before closing: see done
	}
	ent.users.closing.Store(true)
	n := int(ent.users.count())
	if n == 0 {
		close(ent.mu.idle)
		ent.mu.idle = nil
	}
	return n
}

// CloseFileSegment closes the handle. It first closes the entry (all
// aliases) to new work and waits up to timeout for admitted groups to
// finish. On timeout it returns ErrTimeout, and the entry stays closed to
// new work for every alias until all of them have closed; a later call
// with the same handle retries. On success the handle is invalid; the
// file's fds close with the last alias, and only once no admitted group
// (an unquiesced one included) still uses them.
func (e *Engine) CloseFileSegment(s *Segment, timeout time.Duration) error {
	const op = "close"
	if err := s.check(op); err != nil {
		return err
	}
	ent := s.ent
	ent.mu.Lock()
	ent.mu.closers++
	ent.mu.draining = true
	var idle chan struct{}
	users := ent.closeLocked()
	if users > 0 {
		idle = ent.mu.idle
	}
	ent.mu.Unlock()
	if e.closeDrained != nil {
		e.closeDrained()
	}
	if idle != nil {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-idle:
		case <-t.C:
			ent.mu.Lock()
			ent.mu.closers--
			ent.mu.timedOut = true
			ent.mu.Unlock()
			return errorf(KindTimeout, op, s.name(), "%d admitted transfer(s) still running after %s; every alias is closed to new work, retry the close", users, timeout)
		}
	}
	ent.mu.Lock()
	ent.mu.closers--
	first := !s.closed.Swap(true) // a second close of this handle closes nothing
	if first {
		ent.mu.handles--
	}
	last := first && ent.mu.handles == 0
	if last {
		ent.mu.gone = true
		// A concurrent close of another alias may have reopened the
		// entry (cleared the bit) after this close drained it: no
		// submission that passed its handle check may be admitted now.
		ent.users.closing.Store(true)
	} else if ent.mu.closers == 0 && !ent.mu.timedOut && !ent.mu.gone {
		ent.mu.draining = false // the remaining aliases reopen to work
		ent.users.closing.Store(false)
	}
	ent.mu.Unlock()
	if !first {
		return nil
	}
	if last {
		e.mu.Lock()
		delete(e.mu.segments, ent.key)
		e.mu.Unlock()
		e.closeEntry(ent)
	}
	e.log.Info("segment closed", "segment", s.uri, "last_alias", last)
	return nil
}
