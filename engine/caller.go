// caller.go owns Caller: the user on whose behalf a file is opened (a
// segment's file, a shared-memory file), so the kernel grants or refuses
// the open as it would for that user's own open(2).
//
// Invariants:
//   - A nil Caller, uid 0 and the daemon's own effective uid open with
//     the process's credentials: root may open anything the daemon may,
//     and the daemon's user is the daemon. Every other uid opens on a
//     thread that has taken on its fsuid, fsgid and groups (internal/cred);
//     a daemon that cannot switch refuses (ErrPermission), it never falls
//     back to its own credentials.
//   - Paths opened for any other uid never follow a /proc magic link
//     (Caller.open): in the daemon, /proc/self/fd/N is the daemon's.
//   - Segment entries are shared only between handles of one identity
//     (Caller.key), so one user's open never lends its descriptor to
//     another's.

package engine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/orbitefs/orbitefs/internal/cred"
)

// Caller identifies the user a file open is made for.
type Caller struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups
}

func (c *Caller) String() string {
	if c == nil {
		return "the daemon"
	}
	return fmt.Sprintf("uid %d gid %d", c.UID, c.GID)
}

// self reports whether opens for c use the process's own credentials.
func (c *Caller) self() bool {
	return c == nil || c.UID == 0 || c.UID == uint32(os.Geteuid())
}

// key names c's identity in the segment table; "" for the process.
func (c *Caller) key() string {
	if c.self() {
		return ""
	}
	var b strings.Builder
	b.WriteString(strconv.FormatUint(uint64(c.UID), 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(uint64(c.GID), 10))
	for _, g := range c.Groups {
		b.WriteByte(',')
		b.WriteString(strconv.FormatUint(uint64(g), 10))
	}
	return b.String()
}

// as runs fn with c's filesystem credentials (directly for the process
// itself). A refused switch is KindPermission.
func (c *Caller) as(fn func() error) error {
	if c.self() {
		return fn()
	}
	err := cred.As(cred.User{UID: c.UID, GID: c.GID, Groups: c.Groups}, fn)
	if errors.Is(err, cred.ErrSwitch) {
		return wrap(KindPermission, "", "", fmt.Errorf("opening a file for %s: %w", c, err))
	}
	return err
}

// errNoOpenat2 reports a kernel that cannot open for another user safely.
var errNoOpenat2 = errors.New("openat2 is unavailable (Linux before 5.6, or blocked by a seccomp filter): the daemon cannot open files for other users without following /proc magic links")

// errMagicLink reports a path through a /proc magic link (Caller.open).
var errMagicLink = errors.New("the path goes through a /proc magic link (such as /proc/self/fd/N or /dev/fd/N), which the daemon does not follow for a caller: name the file by its own path")

// open opens path for c like open(2). For a caller other than the
// process itself it refuses to follow a /proc magic link anywhere on the
// way (errMagicLink; ordinary symlinks follow as usual): the process's
// own descriptors are its own to reach, nobody else's. A kernel without
// openat2 (before 5.6, or a seccomp filter hiding it) refuses such
// callers rather than open without the restriction.
func (c *Caller) open(path string, flags int) (int, error) {
	if c.self() {
		return unix.Open(path, flags, 0)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_MAGICLINKS})
	if err == unix.ENOSYS {
		return -1, errNoOpenat2
	}
	if err != unix.ELOOP {
		return fd, err
	}
	// ELOOP is also a symlink loop: a walk without the restriction
	// that does not end in ELOOP met a magic link.
	pfd, perr := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if perr == nil {
		unix.Close(pfd)
	}
	if perr == unix.ELOOP {
		return -1, err
	}
	return -1, errMagicLink
}
