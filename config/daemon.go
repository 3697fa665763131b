// daemon.go owns the daemon's TOML file: the [mount] section, the
// [engine] section (Engine) and loading with defaults.
//
// Invariants:
//   - Load starts from the embedded default.toml, so a key left out keeps
//     its documented default and an empty file is a valid config.
//   - Unknown keys are errors (a typo never silently falls back to a default).
//   - Allowed roots never depend on the working directory: every entry
//     is an absolute path to an existing directory, and a root that
//     resolves to / needs mount.allow_filesystem_root = true.

package config

import (
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

//go:embed default.toml
var defaultTOML string

// DefaultTOML returns the embedded default config text.
func DefaultTOML() string { return defaultTOML }

// Daemon is the whole daemon config file.
type Daemon struct {
	Mount   Mount   `toml:"mount"`
	Engine  Engine  `toml:"engine"`
	Peer    Peer    `toml:"peer"`
	Cluster Cluster `toml:"cluster"`
}

// Mount configures the FUSE front end.
type Mount struct {
	// AllowedRoots confines file segments (see Engine.AllowedRoots).
	AllowedRoots []string `toml:"allowed_roots"`
	// AllowFilesystemRoot accepts an allowed root that resolves to /
	// (every file the caller may open); without it such a root is an
	// error.
	AllowFilesystemRoot bool `toml:"allow_filesystem_root"`
	// AllowOther lets users other than the mount owner use the mount.
	AllowOther bool `toml:"allow_other"`
	// DefaultBatchCapacity is what /ctl/batches/clone reserves.
	DefaultBatchCapacity int `toml:"default_batch_capacity"`
	// MaxDocumentBytes bounds one JSON document written to a control file.
	MaxDocumentBytes Size `toml:"max_document_bytes"`
	// MaxBufferedDocumentBytes bounds the bytes that unfinished documents
	// on all open control files hold together.
	MaxBufferedDocumentBytes Size `toml:"max_buffered_document_bytes"`
	// MaxBufferedDocumentBytesPerUser bounds what one unprivileged uid's
	// unfinished documents hold of MaxBufferedDocumentBytes.
	MaxBufferedDocumentBytesPerUser Size `toml:"max_buffered_document_bytes_per_user"`
	// MaxUserShare is the fraction of each engine-wide object limit
	// (batches, batch slots, segments, registered bytes) one unprivileged
	// uid may hold.
	MaxUserShare float64 `toml:"max_user_share"`
	// CloseTimeout bounds rmdir of a segment (drain of admitted users).
	CloseTimeout Duration `toml:"close_timeout"`
	// IdleBatchTimeout is how long a batch read from clone may go without
	// an accepted submission before it is reclaimed (freed).
	IdleBatchTimeout Duration `toml:"idle_batch_timeout"`
	// ShutdownTimeout bounds the drain on SIGINT/SIGTERM.
	ShutdownTimeout Duration `toml:"shutdown_timeout"`
	// ExitTimeout bounds SIGINT/SIGTERM to process exit: past it the
	// daemon aborts its FUSE connection and exits whatever is left.
	ExitTimeout Duration `toml:"exit_timeout"`
	// MaxWrite is the largest FUSE write request the kernel sends.
	MaxWrite Size `toml:"max_write"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
}

// Load parses the embedded defaults, then the file at path (if path is
// not empty) on top, cleans the allowed roots, and validates. A file with
// problems yields one error listing all of them: unknown keys, values that
// do not decode, and values out of bounds.
func Load(path string) (*Daemon, error) {
	var d Daemon
	d.Engine = DefaultEngine()
	if p, err := decode(defaultTOML, "embedded default.toml", &d); err != nil || len(p) > 0 {
		return nil, fmt.Errorf("embedded default.toml: %v %v", err, p) // a build defect
	}
	var bad []string
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		// A file that sets allowed_roots replaces the list, not appends.
		d.Mount.AllowedRoots = nil
		if bad, err = decode(string(b), path, &d); err != nil {
			return nil, err
		}
		if d.Mount.AllowedRoots == nil {
			var def Daemon
			_, _ = decode(defaultTOML, "embedded default.toml", &def)
			d.Mount.AllowedRoots = def.Mount.AllowedRoots
		}
	}
	roots, err := resolveRoots(d.Mount.AllowedRoots)
	if err != nil {
		return nil, err
	}
	d.Mount.AllowedRoots = roots
	d.Engine.AllowedRoots = roots
	if err := d.Engine.loadQoS(); err != nil {
		return nil, err
	}
	errs := make([]error, 0, len(bad)+1)
	for _, s := range bad {
		errs = append(errs, errors.New(s))
	}
	errs = append(errs, d.Validate())
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &d, nil
}

// Parse is Load for config text instead of a path (tests, embedding).
func Parse(text string) (*Daemon, error) {
	f, err := os.CreateTemp("", "orbitefs-config-*.toml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	return Load(f.Name())
}

func resolveRoots(roots []string) ([]string, error) {
	out := make([]string, 0, len(roots))
	for _, r := range roots {
		if r == "" {
			return nil, errors.New("invalid config: mount.allowed_roots: empty entry")
		}
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("invalid config: mount.allowed_roots %q is not an absolute path: name the directory (a relative root would depend on the daemon's working directory)", r)
		}
		out = append(out, filepath.Clean(r))
	}
	return out, nil
}

// checkRoots reports each allowed root that is missing, not a directory,
// or (without allow_filesystem_root) the filesystem root itself, also
// through symlinks ("/..", a link to /).
func (m Mount) checkRoots(p *problems) {
	for _, r := range m.AllowedRoots {
		fi, err := os.Stat(r)
		switch {
		case errors.Is(err, os.ErrNotExist):
			p.addf("mount.allowed_roots %q does not exist: create the directory or remove it from the list", r)
			continue
		case err != nil:
			p.addf("mount.allowed_roots %q: %v", r, err)
			continue
		case !fi.IsDir():
			p.addf("mount.allowed_roots %q is not a directory: a root must be a directory", r)
			continue
		}
		real, err := filepath.EvalSymlinks(r)
		if err != nil {
			p.addf("mount.allowed_roots %q: %v", r, err)
			continue
		}
		if real == "/" && !m.AllowFilesystemRoot {
			p.addf("mount.allowed_roots %q resolves to /, which lets segments open any file on the host: set mount.allow_filesystem_root = true to allow it", r)
		}
	}
}

// Validate checks both sections and reports every problem at once.
func (d *Daemon) Validate() error {
	var p problems
	m := d.Mount
	if len(m.AllowedRoots) == 0 {
		p.addf("mount.allowed_roots is empty: no file could be opened")
	}
	m.checkRoots(&p)
	p.between("mount.default_batch_capacity", m.DefaultBatchCapacity, 1, d.Engine.MaxBatchRequests)
	if m.MaxDocumentBytes < 64 || m.MaxDocumentBytes > 64<<20 {
		p.addf("mount.max_document_bytes (%d) must be in [64, 64MiB]", m.MaxDocumentBytes)
	}
	if m.MaxBufferedDocumentBytes < m.MaxDocumentBytes || m.MaxBufferedDocumentBytes > 64<<30 {
		p.addf("mount.max_buffered_document_bytes (%d) must be in [mount.max_document_bytes (%d), 64GiB]: one unfinished document of the largest size must fit", m.MaxBufferedDocumentBytes, m.MaxDocumentBytes)
	}
	if !(m.MaxUserShare > 0 && m.MaxUserShare <= 1) {
		p.addf("mount.max_user_share (%g) must be a number in (0, 1]: the fraction of each engine-wide limit one user may hold (1: no share)", m.MaxUserShare)
	}
	if m.MaxBufferedDocumentBytesPerUser < m.MaxDocumentBytes || m.MaxBufferedDocumentBytesPerUser > 64<<30 {
		p.addf("mount.max_buffered_document_bytes_per_user (%d) must be in [mount.max_document_bytes (%d), 64GiB]: one user's unfinished document of the largest size must fit", m.MaxBufferedDocumentBytesPerUser, m.MaxDocumentBytes)
	}
	p.positiveDur("mount.close_timeout", m.CloseTimeout)
	p.positiveDur("mount.shutdown_timeout", m.ShutdownTimeout)
	if m.ExitTimeout <= m.ShutdownTimeout {
		p.addf("mount.exit_timeout (%s) must be longer than mount.shutdown_timeout (%s): the drain has to end before the process is forced out", m.ExitTimeout, m.ShutdownTimeout)
	}
	if m.IdleBatchTimeout < Duration(time.Second) || m.IdleBatchTimeout > Duration(24*time.Hour) {
		p.addf("mount.idle_batch_timeout (%s) must be in [1s, 24h]", m.IdleBatchTimeout)
	}
	if m.MaxWrite < 4096 || m.MaxWrite > 1<<20 {
		p.addf("mount.max_write (%d) must be in [4KiB, 1MiB]", m.MaxWrite)
	}
	if _, err := ParseLevel(m.LogLevel); err != nil {
		p.addf("mount.log_level: %v", err)
	}
	d.Engine.validate(&p, "engine.")
	// The sender's pending budget holds a notification's message while
	// it waits to be sent: one of the largest size must fit, or a
	// submission carrying it is refused with EAGAIN however long it
	// retries (the inbox's own bound is checked in [peer]).
	if d.Engine.MaxPendingNotifyBytes < d.Peer.MaxNotificationBytes {
		p.addf("engine.max_pending_notification_bytes (%s) must be >= peer.max_notification_bytes (%s): one pending notification with the largest message must fit", d.Engine.MaxPendingNotifyBytes, d.Peer.MaxNotificationBytes)
	}
	d.Peer.validate(&p)
	d.Cluster.validate(&p)
	return p.err("invalid config")
}

// ParseLevel maps debug|info|warn|error to a slog level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
