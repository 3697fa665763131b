// service.go owns the Service: the control plane's state over one engine.
// It holds the name tables (memory, segments), the live batches with
// their last error text, and the mount-wide last error; every file
// operation on the mount is one Service method, so fusefs stays a thin
// translation of FUSE calls and this package is testable without FUSE.
//
// Invariants:
//   - s.mu guards only the tables and the last error; it is never held
//     across an engine call that can block (register, open, close, wait,
//     submit). A name being created is reserved with a nil entry first, so
//     two racing creators get one success and one EEXIST, and lookups
//     skip reserved names.
//   - Every error a method returns has been recorded exactly once: in the
//     batch's error text for batch operations, in the mount-wide last
//     error otherwise (each prefixed with its RFC 3339 UTC time), and in
//     the log. The mount-wide last error is kept per caller as well:
//     /error shows an unprivileged uid only its own (LastError). Interrupted waits (EINTR) are not errors and are not
//     recorded; a document handle that already failed returns its first
//     error again without recording it again (docwriter.go).
//   - After Shutdown begins, creators and submit fail with KindClosed;
//     reads keep working until the engine is closed.
//   - Lock order: Txn.mu (txn.go), then Service.mu, then Batch.mu; engine locks are taken only
//     inside engine calls made with neither held.

package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// Options configures a Service. Zero values take the defaults of the
// embedded config.
type Options struct {
	// Version is what /version reports ("orbitefs <Version>").
	Version string
	// DefaultBatchCapacity is what clone reserves (mount.default_batch_capacity).
	DefaultBatchCapacity int
	// MaxDocumentBytes bounds one JSON document (mount.max_document_bytes).
	MaxDocumentBytes int
	// MaxBufferedDocumentBytes bounds the bytes all unfinished documents
	// may hold together (mount.max_buffered_document_bytes).
	MaxBufferedDocumentBytes int64
	// MaxBufferedDocumentBytesPerUser bounds what one unprivileged uid's
	// unfinished documents may hold of it
	// (mount.max_buffered_document_bytes_per_user; 0: all of it).
	MaxBufferedDocumentBytesPerUser int64
	// MaxUserShare is the fraction of each engine-wide object limit one
	// unprivileged uid may hold (mount.max_user_share; 0: the default).
	MaxUserShare float64
	// CloseTimeout bounds a segment close (mount.close_timeout).
	CloseTimeout time.Duration
	// IdleBatchTimeout is how long a cloned batch may stay without an
	// accepted submission before it is freed (mount.idle_batch_timeout).
	IdleBatchTimeout time.Duration
	// Logger receives one line per failed operation and lifecycle events;
	// nil discards.
	Logger *slog.Logger
	// OwnMount reports whether a path leads into the daemon's own mount
	// (fusefs.LeadsInto). Segments and shm files for which it is true are
	// refused (KindPermission) before anything opens them: the daemon
	// never does I/O on its own mount, which could deadlock it. Nil skips
	// the check.
	OwnMount func(path string) bool
	// OwnDevice returns the mount's device ("major:minor") once mounted,
	// or "". A segment whose file turns out to live on that device is
	// closed again and refused (KindPermission): the path walk above can
	// be raced by a symlink swapped between the check and the open, the
	// device of the opened inode cannot. Nil skips the check.
	OwnDevice func() string
	// DialRemote connects to a peer's exported region for a tcp:// or
	// hp_tcp:// segment (with the daemon's [peer] key); nil refuses such
	// segments (KindUnavailable).
	DialRemote func(ctx context.Context, u RemoteURI) (engine.Remote, error)
	// StoreCallTimeout bounds the OwnMount walk (engine.store_call_timeout):
	// it lstats every component of a path, and one on a filesystem whose
	// server stopped answering waits in the kernel. Past it the open is
	// KindTimeout; 0 waits as long as the kernel does.
	StoreCallTimeout time.Duration
	// Notify sends a submission's completion notification (notify.go);
	// nil: submissions with notify are refused (KindUnavailable).
	Notify NotifyFunc
	// NextNotification waits for the next notification this daemon
	// received and returns it as one JSON line; nil: no peer listener.
	NextNotification func(ctx context.Context) ([]byte, error)
	// MaxNotificationBytes bounds one message; MaxPendingNotifications
	// and MaxPendingNotificationBytes what waits to be sent
	// (engine.max_pending_notifications and
	// engine.max_pending_notification_bytes; 0: their defaults).
	MaxNotificationBytes        int
	MaxPendingNotifications     int
	MaxPendingNotificationBytes int64
	// NotifyRetryInterval is the first wait before a notification
	// definitely not delivered is sent again; the waits double up to
	// NotifyRetryMaxInterval (the [peer] keys; 0: their defaults).
	NotifyRetryInterval, NotifyRetryMaxInterval time.Duration
	// Cluster, when set, is shown under /cluster and in /stats
	// (cluster.go); nil: the daemon is no cluster member.
	Cluster Cluster
	// Peers, when set, lists the daemon's peer connections for /peers,
	// /stats and /metrics (peers.go); nil: none are shown.
	Peers func() []PeerConn
	// PeerListener returns the peer listener's totals (peers.go); nil
	// (or a nil result) without a listener.
	PeerListener func() *PeerListener
	// ExportsChanged, when set, is called after a registration with an
	// export is added or removed. It must not block.
	ExportsChanged func()
	// DialCredit opens the issuer connection of a credit connect
	// (credit.go); nil refuses connect (KindUnavailable).
	DialCredit CreditDialFunc
	// CreditIssuer, when set, reports this daemon's receiver credit
	// issuer (/peers/credit/issuer and /stats).
	CreditIssuer func() any
}

// maxStuckPathChecks bounds the OwnMount walks left waiting in the kernel
// after their timeout (each holds an OS thread): past it, opens fail at
// once until one returns.
const maxStuckPathChecks = 64

// OptionsFromConfig takes the mount section's values.
func OptionsFromConfig(m config.Mount, version string, log *slog.Logger) Options {
	return Options{Version: version, DefaultBatchCapacity: m.DefaultBatchCapacity,
		MaxDocumentBytes: int(m.MaxDocumentBytes), MaxBufferedDocumentBytes: int64(m.MaxBufferedDocumentBytes),
		MaxBufferedDocumentBytesPerUser: int64(m.MaxBufferedDocumentBytesPerUser), MaxUserShare: m.MaxUserShare,
		CloseTimeout:     m.CloseTimeout.D(),
		IdleBatchTimeout: m.IdleBatchTimeout.D(), Logger: log}
}

// Service is the control plane over one engine. Safe for concurrent use.
type Service struct {
	e       *engine.Engine
	opts    Options
	log     *slog.Logger
	started time.Time
	euid    uint32 // the daemon's effective uid: privileged (owner.go)
	seq     atomic.Uint64
	closing atomic.Bool
	docs    *Budget // buffered document bytes, shared by every handle (budget.go)
	// afterResolve, when set (tests only), runs between a submission's
	// ownership checks and its engine submit: the race window between a
	// region checked by name and the engine's own lookup by address.
	afterResolve func()
	// beforeAttach and groupDoneSeen, when set (tests), run in attach
	// before it records a notice, and as a finished group's hook begins
	// (notify.go).
	beforeAttach, groupDoneSeen func(first int)
	// pathChecks counts OwnMount walks still running (stuck ones included).
	pathChecks atomic.Int64
	// notes is what the notifications not yet decided hold of their
	// budget (notify.go).
	notes struct {
		sync.Mutex
		count int
		bytes int64
	}

	// stopCtx is cancelled when Shutdown has drained: blocked waits end.
	stopCtx    context.Context
	stopCancel context.CancelFunc

	mu struct {
		sync.Mutex
		memory   map[string]*Memory // nil: name reserved, creation in progress
		segments map[string]*Segment
		batches  map[uint64]*Batch
		lastErr  string            // anyone's: what privileged callers read
		userErr  map[uint32]string // each unprivileged uid's own
		pending  map[uint32]quota  // what each uid is creating now (quota.go)
	}
}

// New returns a Service over e. The caller keeps ownership of e but must
// close it through Shutdown once the Service is in use.
func New(e *engine.Engine, opts Options) *Service {
	if opts.DefaultBatchCapacity <= 0 {
		opts.DefaultBatchCapacity = 1024
	}
	if opts.MaxDocumentBytes <= 0 {
		opts.MaxDocumentBytes = 1 << 20
	}
	if opts.MaxBufferedDocumentBytes <= 0 {
		opts.MaxBufferedDocumentBytes = defaultMaxBufferedDocumentBytes
	}
	if opts.MaxUserShare <= 0 {
		opts.MaxUserShare = defaultMaxUserShare
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = 5 * time.Second
	}
	if opts.IdleBatchTimeout <= 0 {
		opts.IdleBatchTimeout = defaultIdleBatchTimeout
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.MaxNotificationBytes <= 0 {
		opts.MaxNotificationBytes = defaultMaxNotificationBytes
	}
	if opts.MaxPendingNotifications <= 0 {
		opts.MaxPendingNotifications = defaultMaxPendingNotifications
	}
	if opts.MaxPendingNotificationBytes <= 0 {
		opts.MaxPendingNotificationBytes = defaultMaxPendingNotificationBytes
	}
	if opts.NotifyRetryInterval <= 0 {
		opts.NotifyRetryInterval = defaultNotifyRetryInterval
	}
	if opts.NotifyRetryMaxInterval < opts.NotifyRetryInterval {
		opts.NotifyRetryMaxInterval = max(defaultNotifyRetryMaxInterval, opts.NotifyRetryInterval)
	}
	s := &Service{e: e, opts: opts, log: opts.Logger, started: time.Now(), euid: uint32(os.Geteuid()),
		docs: NewBudget(opts.MaxBufferedDocumentBytes, opts.MaxBufferedDocumentBytesPerUser)}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.stopCtx, s.stopCancel = context.WithCancel(context.Background())
	s.mu.memory = make(map[string]*Memory)
	s.mu.segments = make(map[string]*Segment)
	s.mu.batches = make(map[uint64]*Batch)
	s.mu.userErr = make(map[uint32]string)
	s.mu.pending = make(map[uint32]quota)
	return s
}

// debug reports whether debug logs are wanted. The per-batch debug lines
// are guarded by it: their arguments (integers boxed into interfaces)
// allocate even when the handler drops the line, on every batch.
func (s *Service) debug() bool { return s.log.Enabled(context.Background(), slog.LevelDebug) }

// Started is when the Service was created (the mount's timestamps).
func (s *Service) Started() time.Time { return s.started }

// MaxDocumentBytes is the configured document limit.
func (s *Service) MaxDocumentBytes() int { return s.opts.MaxDocumentBytes }

// nextSeq hands out object sequence numbers: unique per object for the
// Service's life, never reused, starting at 1.
func (s *Service) nextSeq() uint64 { return s.seq.Add(1) }

// checkOutsideMount refuses a path leading into the daemon's own mount.
// The walk runs on a helper bounded by StoreCallTimeout: a path through a
// stalled filesystem must not hold the client's write(2).
func (s *Service) checkOutsideMount(path string) error {
	if s.opts.OwnMount == nil {
		return nil
	}
	if n := s.pathChecks.Add(1); n > maxStuckPathChecks {
		s.pathChecks.Add(-1)
		return detail(engine.KindTimeout, "%d path checks are still waiting for their filesystems; try again when they return", n-1)
	}
	res := make(chan bool, 1)
	go func() {
		defer s.pathChecks.Add(-1)
		res <- s.opts.OwnMount(path)
	}()
	var timeout <-chan time.Time
	if d := s.opts.StoreCallTimeout; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case own := <-res:
		if own {
			return detail(engine.KindPermission, "%s leads into the orbitefs mount itself; the daemon never does I/O on its own mount", path)
		}
		return nil
	case <-timeout:
		return detail(engine.KindTimeout, "%s: looking up its components did not return within store_call_timeout (%s): a filesystem on the path does not answer", path, s.opts.StoreCallTimeout)
	}
}

// errClosing is returned by creators after Shutdown began.
func errClosing() error {
	return detail(engine.KindClosed, "the daemon is shutting down; no new work is accepted")
}

// errorTimeLayout is RFC 3339 with milliseconds, in UTC: the prefix of
// every line in an error file.
const errorTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// scope says where an operation's error text goes.
type scope struct {
	batch *Batch // nil: the mount-wide /error
	// caller is whose view of /error a mount-wide error belongs to: the
	// caller that failed, or, for an object's own files, the object's
	// owner (only the owner and privileged callers can open them). nil:
	// the daemon.
	caller  *engine.Caller
	op      string
	name    string // "memory/buf", "segments/cache", "batches/3"
	logKey  string // "region", "segment", "batch"
	logName any
}

// fail records err for sc and returns it labelled with sc's op and name.
func (s *Service) fail(sc scope, err error) error {
	err = s.record(sc, err)
	level := slog.LevelInfo
	if k := engine.KindOf(err); k == engine.KindUnknown || k == engine.KindIO || k == engine.KindUnquiesced {
		level = slog.LevelError
	}
	attrs := []any{"op", sc.op, "err", capText(err.Error(), maxErrorText)}
	if sc.logKey != "" {
		attrs = append(attrs, sc.logKey, sc.logName)
	}
	s.log.Log(context.Background(), level, "control operation failed", attrs...)
	return err
}

// record labels err with sc's operation and object and writes it, with
// the time, to sc's error file (the batch's, or /error); it returns the
// labelled error.
func (s *Service) record(sc scope, err error) error {
	err = label(sc.op, sc.name, err)
	// The error files keep their text until the next failure; the time
	// says whether it is older than what the reader just did.
	text := time.Now().UTC().Format(errorTimeLayout) + " " + capText(err.Error(), maxErrorText)
	if sc.batch != nil {
		sc.batch.setErr(text)
	} else {
		s.mu.Lock()
		s.mu.lastErr = text
		if !s.privileged(sc.caller) {
			if _, ok := s.mu.userErr[sc.caller.UID]; !ok && len(s.mu.userErr) >= maxErrorUsers {
				for uid := range s.mu.userErr { // forget one at random
					delete(s.mu.userErr, uid)
					break
				}
			}
			s.mu.userErr[sc.caller.UID] = text
		}
		s.mu.Unlock()
	}
	return err
}

// label gives err the operation and object it happened to. An engine
// error at the top keeps its kind and detail under the control name (the
// engine names objects by URI or address, the mount by user name).
func label(op, name string, err error) error {
	var ee *engine.Error
	if errors.As(err, &ee) && error(ee) == err {
		return &engine.Error{Op: op, Name: name, Kind: ee.Kind, Err: ee.Err}
	}
	return &engine.Error{Op: op, Name: name, Kind: engine.KindOf(err), Err: err}
}

// maxErrorUsers bounds the uids whose own last error is kept (each up to
// maxErrorText): a user with a range of subordinate uids (user
// namespaces) could otherwise grow the table by one text per uid.
const maxErrorUsers = 1024

// LastError is /error as c reads it: the last failed operation not tied
// to a batch, with a newline, or empty. A privileged c (owner.go) reads
// the last one of any caller; any other c only the last of its own, so
// one user never reads another's error texts (paths, names).
func (s *Service) LastError(c *engine.Caller) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.privileged(c) {
		return textLine(s.mu.lastErr)
	}
	return textLine(s.mu.userErr[c.UID])
}

func textLine(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s + "\n")
}

// Version is /version.
func (s *Service) Version() []byte { return []byte("orbitefs " + s.opts.Version + "\n") }

// Stats is /stats: the engine's stats as JSON.
func (s *Service) Stats() []byte {
	st := s.e.Stats()
	var cs *ClusterStats
	if s.opts.Cluster != nil {
		c := s.opts.Cluster.ClusterStats()
		cs = &c
	}
	var issuer any
	if s.opts.CreditIssuer != nil {
		issuer = s.opts.CreditIssuer()
	}
	return marshal(struct {
		engine.Stats
		Cluster *ClusterStats `json:"cluster,omitempty"`
		Issuer  any           `json:"receiver_credit_issuer,omitempty"`
		Peers   *[]PeerConn   `json:"peers,omitempty"` // peers.go
		// Listener: the peer listener's totals; absent without one.
		Listener *PeerListener `json:"peer_listener,omitempty"`
	}{st, cs, issuer, s.peerList(), s.peerListener()})
}

// peerListener is the listener's totals, or nil without a listener.
func (s *Service) peerListener() *PeerListener {
	if s.opts.PeerListener == nil {
		return nil
	}
	return s.opts.PeerListener()
}

// peerList is the peer connections, or nil without peer figures.
func (s *Service) peerList() *[]PeerConn {
	if s.opts.Peers == nil {
		return nil
	}
	ps := s.PeerConns()
	if ps == nil {
		ps = []PeerConn{}
	}
	return &ps
}

// Metrics is /metrics.
func (s *Service) Metrics() []byte {
	b := RenderMetrics(s.e.Stats(), s.opts.Version)
	if ps := s.peerList(); ps != nil {
		b = appendPeerMetrics(b, *ps) // peers.go
	}
	if l := s.peerListener(); l != nil {
		b = appendListenerMetrics(b, l)
	}
	if s.opts.Cluster != nil {
		cs := s.opts.Cluster.ClusterStats()
		b = append(b, renderClusterMetrics(&cs)...)
	}
	return b
}

// Readme is /README.
func (s *Service) Readme() []byte { return []byte(Reference()) }

// Shutdown stops accepting work, waits up to timeout for queued and
// running transfers to finish, then wakes every blocked wait and closes
// the engine (which cancels what has not started and gives running work
// what is left of timeout, at least one second). It returns the engine's
// close error; the Service answers KindClosed afterwards. Safe to call
// more than once.
func (s *Service) Shutdown(timeout time.Duration) error {
	s.closing.Store(true)
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	if err := s.drain(ctx); err != nil {
		s.log.Warn("shutdown: transfers still running at the drain timeout; cancelling", "op", "shutdown", "err", err)
	} else {
		s.log.Info("shutdown: transfers drained", "op", "shutdown", "took", time.Since(start).Round(time.Millisecond))
	}
	s.stopCancel()
	left := max(time.Until(deadline), time.Second)
	return s.e.Close(left)
}

// drain waits until no batch has an unfinished submission.
func (s *Service) drain(ctx context.Context) error {
	for _, bt := range s.Batches() {
		for {
			ch := bt.b.Changed()
			if !slices.ContainsFunc(bt.b.Submissions(), func(r engine.Report) bool { return !r.Done }) {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}
