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
