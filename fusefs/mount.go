// mount.go owns mounting and unmounting: checking the mount point
// (clearing a stale mount left by a crashed daemon), choosing between a
// direct mount (root) and fusermount3 (everyone else), the mount options,
// and an unmount that falls back to a lazy one while files are open.
//
// Invariants:
//   - The mount is private to its owner unless Options.AllowOther: the
//     kernel refuses other users, and default_permissions makes it check
//     the modes (0700/0400/0200/0600) too. With AllowOther the mount's
//     own files grant group and others what the owner has, and each
//     object's files belong to its creator (fsys.go).
//   - The kernel caches only what cannot go stale (cache.go): attributes
//     of every node but the root, entries of names that live as long as
//     the mount, never negative entries; so the tree is never stale.
//   - Unmount never leaves a mount behind: a busy mount is detached
//     (MNT_DETACH / fusermount3 -uz); if a client still holds it after the
//     grace period, the connection is aborted through fusectl, or else
//     when the daemon exits and closes /dev/fuse.

package fusefs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/orbitefs/orbitefs/control"
)

// Options configures a mount.
type Options struct {
	// MaxWrite is the largest write request the kernel sends
	// (mount.max_write); 0 takes 1 MiB.
	MaxWrite int
	// AllowOther lets other users in (mount.allow_other).
	AllowOther bool
	// Logger receives lifecycle logs and go-fuse's diagnostics; nil
	// discards.
	Logger *slog.Logger
	// Debug logs every FUSE request (very verbose).
	Debug bool
	// CountRequests counts FUSE requests by opcode (Server.Requests,
	// reqcount.go), for `orbitefs bench ctl`. It slows every request.
	CountRequests bool
}

// Server is a mounted control filesystem.
type Server struct {
	srv    *fuse.Server
	dir    string
	direct bool
	conn   uint32 // /sys/fs/fuse/connections/<conn>; 0 if unknown
	dev    string // "major:minor" of the mount; "" if unknown
	log    *slog.Logger
	done   chan struct{}
	reqs   *requestCounter // nil unless Options.CountRequests
}

// Mount mounts the tree for svc at dir and starts serving. A stale mount
// at dir is cleared first; an already live FUSE mount is an error.
func Mount(dir string, svc *control.Service, opts Options) (*Server, error) {
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("mount point %q: %w", dir, err)
	}
	direct := os.Geteuid() == 0
	if err := prepareMountpoint(abs, direct, lg); err != nil {
		return nil, err
	}
	if !direct {
		if _, err := fusermount(); err != nil {
			return nil, fmt.Errorf("mounting as a non-root user needs fusermount3, which was not found: install the fuse3 package (apt-get install fuse3) or run orbitefs as root")
		}
	}
	if opts.MaxWrite <= 0 {
		opts.MaxWrite = 1 << 20
	}
	f := &fsys{svc: svc, uid: uint32(os.Geteuid()), gid: uint32(os.Getegid()), allowOther: opts.AllowOther, log: lg}
	goLog := slog.NewLogLogger(lg.Handler(), slog.LevelWarn)
	var fuseLog io.Writer = &slogWriter{lg}
	var reqs *requestCounter
	if opts.CountRequests {
		reqs = &requestCounter{next: slogWriter{lg}}
		fuseLog = reqs
	}
	fo := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:            "orbitefs",
			Name:              "orbitefs",
			MaxWrite:          opts.MaxWrite,
			AllowOther:        opts.AllowOther,
			Options:           []string{"default_permissions"},
			DirectMountStrict: direct,
			DisableXAttrs:     true,
			// No reply is ever spliced from a file (every read result
			// is a byte slice), but with splice enabled go-fuse takes a
			// pipe, resizes it and writes the reply header into it before
			// finding that out: three wasted syscalls per READ
			// (docs/performance.md, control plane).
			DisableSplice: true,
			Debug:         opts.Debug || opts.CountRequests,
			Logger:        log.New(fuseLog, "", 0),
		},
		UID:    f.uid,
		GID:    f.gid,
		Logger: goLog,
		// Entry, attribute and negative timeouts stay nil: zero, except
		// where a node sets its own (cache.go).
	}
	srv, err := fs.Mount(abs, newRoot(f), fo)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", abs, fusermountError(err))
	}
	s := &Server{srv: srv, dir: abs, direct: direct, log: lg, done: make(chan struct{})}
	s.reqs = reqs
	// The mount's device comes from mountinfo, not from a stat of the
	// mount point: that stat is a FUSE request to this very process, and
	// a SIGKILL arriving while it waits leaves the process unable to exit
	// (its own request can only be answered by the threads being killed,
	// and the connection ends only when the last of them is gone).
	if major, minor, ok := mountDevice(abs); ok {
		s.conn = minor
		s.dev = fmt.Sprintf("%d:%d", major, minor)
	}
	go func() {
		srv.Wait()
		close(s.done)
	}()
	return s, nil
}

// fusermountExit matches go-fuse's report of a failed fusermount, which
// prints the raw wait status ("exited with code 256" for exit status 1).
var fusermountExit = regexp.MustCompile(`fusermount exited with code (\d+)`)

// fusermountError rewrites go-fuse's failed-fusermount error to name
// fusermount3's exit status (or the signal that killed it); its own
// message went to the daemon's stderr just before. Other errors pass
// through unchanged.
func fusermountError(err error) error {
	m := fusermountExit.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	raw, perr := strconv.ParseUint(m[1], 10, 32)
	if perr != nil {
		return err
	}
	ws := syscall.WaitStatus(raw)
	switch {
	case ws.Exited():
		return fmt.Errorf("fusermount3 exited with status %d (its message is just above)", ws.ExitStatus())
	case ws.Signaled():
		return fmt.Errorf("fusermount3 was killed by signal %v", ws.Signal())
	}
	return err
}

// slogWriter carries go-fuse's debug lines into the daemon log.
type slogWriter struct{ lg *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	w.lg.Debug(strings.TrimRight(string(p), "\n"), "op", "fuse")
	return len(p), nil
}

// Device is the mount's device number as "major:minor" ("" if unknown),
// the form engine.SegmentInfo.Device uses.
func (s *Server) Device() string { return s.dev }

// Dir is the absolute mount point.
func (s *Server) Dir() string { return s.dir }

// Done is closed when serving has stopped (unmounted, by us or by an
// external umount).
func (s *Server) Done() <-chan struct{} { return s.done }

// Unmount unmounts, lazily when files are still open, and waits up to
// grace for serving to stop; after that it aborts the FUSE connection so
// no client can hang on a dead mount. Safe to call after an external
// unmount.
func (s *Server) Unmount(grace time.Duration) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	err := s.srv.Unmount()
	if err != nil {
		s.log.Warn("unmount failed, detaching lazily", "op", "unmount", "dir", s.dir, "err", err)
		if err := s.lazyUnmount(); err != nil {
			s.log.Error("lazy unmount failed", "op", "unmount", "dir", s.dir, "err", err)
		}
	}
	select {
	case <-s.done:
		s.log.Info("unmounted", "op", "unmount", "dir", s.dir)
		return nil
	case <-time.After(grace):
	}
	// A client still holds a file of the detached mount. Abort the
	// connection if fusectl is mounted; otherwise it ends when this
	// process exits and closes /dev/fuse, which aborts it just the same.
	p := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", s.conn)
	if s.conn == 0 || os.WriteFile(p, []byte("1"), 0) != nil {
		s.log.Info("a client still holds the detached mount; its connection ends when the daemon exits", "op", "unmount", "dir", s.dir)
		return nil
	}
	s.log.Warn("connection aborted: a client still held the detached mount", "op", "unmount", "dir", s.dir, "conn", s.conn)
	select {
	case <-s.done:
	case <-time.After(grace):
	}
	return nil
}

// Abort ends the FUSE connection at once: every request in flight and
// every later one fails with ENOTCONN, so no client waits on a daemon that
// is about to exit; then it detaches the mount, so no dead mount stays
// behind. It mounts fusectl if nobody did (root only).
func (s *Server) Abort() error {
	err := s.abortConn()
	if derr := s.lazyUnmount(); derr != nil && err == nil {
		err = fmt.Errorf("detach %s: %w", s.dir, derr)
	}
	return err
}

func (s *Server) abortConn() error {
	if s.conn == 0 {
		return fmt.Errorf("abort %s: no FUSE connection number", s.dir)
	}
	const ctl = "/sys/fs/fuse/connections"
	p := fmt.Sprintf("%s/%d/abort", ctl, s.conn)
	if _, err := os.Stat(p); err != nil {
		if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("abort %s: %s is missing and fusectl cannot be mounted: %w", s.dir, p, err)
		}
	}
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		return fmt.Errorf("abort %s: %w", s.dir, err)
	}
	return nil
}

func (s *Server) lazyUnmount() error {
	return detach(s.dir, s.direct)
}

// detach lazily unmounts dir: MNT_DETACH as root, fusermount3 -uz
// otherwise.
func detach(dir string, direct bool) error {
	if direct {
		return unix.Unmount(dir, unix.MNT_DETACH)
	}
	bin, err := fusermount()
	if err != nil {
		return err
	}
	out, err := exec.Command(bin, "-u", "-z", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -u -z %s: %v: %s", bin, dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func fusermount() (string, error) {
	for _, name := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("fusermount3 not found")
}

// prepareMountpoint checks dir: it must be a directory, a stale FUSE
// mount on it ("transport endpoint is not connected") is detached, and a
// live FUSE mount is refused.
func prepareMountpoint(dir string, direct bool, lg *slog.Logger) error {
	var st unix.Stat_t
	err := unix.Stat(dir, &st)
	if err == unix.ENOTCONN {
		if derr := detach(dir, direct); derr != nil {
			return fmt.Errorf("mount point %s holds a stale FUSE mount (transport endpoint is not connected) that could not be cleared: %v; clear it with `umount -l %s` (root) or `fusermount3 -uz %s`", dir, derr, dir, dir)
		}
		lg.Warn("cleared a stale FUSE mount (transport endpoint is not connected)", "op", "mount", "dir", dir)
		err = unix.Stat(dir, &st)
	}
	if err != nil {
		if err == unix.ENOENT {
			return fmt.Errorf("mount point %s does not exist: create it with `mkdir -p %s`", dir, dir)
		}
		return fmt.Errorf("mount point %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("mount point %s is not a directory", dir)
	}
	if fstype, ok := mountedFUSE(dir); ok {
		return fmt.Errorf("mount point %s already has a live %s mount (another orbitefs?); stop it or unmount with `umount %s`", dir, fstype, dir)
	}
	return nil
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	major, minor uint32
	fstype       string
}

// mountsAt lists the mounts whose mount point is dir, oldest first, from
// /proc/self/mountinfo (no request to any of them).
func mountsAt(dir string) []mountEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts... - fstype source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		var m mountEntry
		if a, b, ok := strings.Cut(fields[2], ":"); ok {
			ma, _ := strconv.ParseUint(a, 10, 32)
			mi, _ := strconv.ParseUint(b, 10, 32)
			m.major, m.minor = uint32(ma), uint32(mi)
		}
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) {
				m.fstype = fields[i+1]
				break
			}
		}
		out = append(out, m)
	}
	return out
}

// mountedFUSE reports whether dir is the mount point of a FUSE mount
// and its type.
func mountedFUSE(dir string) (string, bool) {
	for _, m := range mountsAt(dir) {
		if strings.HasPrefix(m.fstype, "fuse") {
			return m.fstype, true
		}
	}
	return "", false
}

// mountDevice is the device of the newest mount at dir.
func mountDevice(dir string) (major, minor uint32, ok bool) {
	ms := mountsAt(dir)
	if len(ms) == 0 {
		return 0, 0, false
	}
	m := ms[len(ms)-1]
	return m.major, m.minor, true
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
