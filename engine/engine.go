// engine.go owns the Engine: construction, the registries of segments,
// regions and batches, engine-wide admission counters, stats and Close.
//
// Invariants:
//   - New starts no goroutine, opens no ring and loads no library; the
//     first file submission (or Stats) probes the file transport, once.
//   - inflightBytes and inflightGroups count admitted, not yet finished
//     groups; a group that ends unquiesced keeps its charge forever.
//   - Lock order: segMu; worker.ringMu, then Batch.mu, then Engine.mu,
//     then segEntry.mu, then Region.mu. No lock is held across a blocking
//     wait; Batch.deliverMu is only ever tried (TryLock).

package engine

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/config"
)

// Engine is the transfer engine. Safe for concurrent use.
type Engine struct {
	cfg        config.Engine
	log        *slog.Logger
	transports []Transport
	file       FileTransport // nil in a build without a file backend

	probeOnce sync.Once
	probeErr  error

	segMu   sync.Mutex // serializes segment opens
	closeMu sync.Mutex // serializes Close

	mu struct {
		sync.RWMutex
		closed         bool
		nextKey        uint64
		nextBatch      uint64
		regions        []*Region
		segments       map[string]*segEntry
		batches        map[uint64]*Batch
		reserved       int // sum of live batches' capacity
		inflightGroups int
		inflightBytes  uint64
		registered     uint64 // page-rounded bytes of regions registered or being mapped
	}
	regLimit uint64 // config RegisteredLimit, fixed at New

	// counters, atomics
	st struct {
		groupsSubmitted  atomic.Uint64
		groupsRejected   atomic.Uint64
		tasksCompleted   atomic.Uint64
		tasksFailed      atomic.Uint64
		tasksCancelled   atomic.Uint64
		bytesRead        atomic.Uint64
		bytesWritten     atomic.Uint64
		fastPathHits     atomic.Uint64
		fastPathHandoffs atomic.Uint64
		submitThrough    atomic.Uint64
		workersStarted   atomic.Uint64
		workersRunning   atomic.Int64
		unquiesced       atomic.Uint64
	}
}

// New validates cfg and builds an idle engine over the given transports.
// It starts nothing: no goroutine, no ring, no library load.
func New(cfg config.Engine, transports ...Transport) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, wrap(KindInvalid, "new", "engine", err)
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, transports: transports, regLimit: cfg.RegisteredLimit()}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, t := range transports {
		if ft, ok := t.(FileTransport); ok && e.file == nil && t.Kind() == TransportIOUring {
			e.file = ft
		}
	}
	e.mu.segments = make(map[string]*segEntry)
	e.mu.batches = make(map[uint64]*Batch)
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() config.Engine { return e.cfg }

func (e *Engine) checkOpen(op string) error {
	e.mu.RLock()
	closed := e.mu.closed
	e.mu.RUnlock()
	if closed {
		return &Error{Op: op, Name: "engine", Kind: KindClosed, Err: os.ErrClosed}
	}
	return nil
}

// fileReady probes the file transport once, lazily.
func (e *Engine) fileReady() error {
	if e.file == nil {
		return errorf(KindUnavailable, "", "", "io_uring: not built into this binary (build tag noiouring)")
	}
	e.probeOnce.Do(func() { e.probeErr = e.file.Probe() })
	if e.probeErr != nil {
		return wrap(KindUnavailable, "", "", e.probeErr)
	}
	return nil
}

func (e *Engine) gdsMode() string { return "unavailable" }

// Close refuses new work, cancels queued groups, waits up to timeout for
// running ones, then closes segments, regions and transports. If running
// work does not drain in time it returns ErrTimeout and leaves those
// owners (and the resources they hold) in place; calling Close again
// retries. Later calls after success return nil.
func (e *Engine) Close(timeout time.Duration) error {
	e.closeMu.Lock() // one Close at a time; a second one retries the drain
	defer e.closeMu.Unlock()
	e.mu.Lock()
	e.mu.closed = true
	batches := make([]*Batch, 0, len(e.mu.batches))
	for _, b := range e.mu.batches {
		batches = append(batches, b)
	}
	e.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, b := range batches {
		b.CancelAll()
	}
	for _, b := range batches {
		if err := b.drain(ctx); err != nil {
			return errorf(KindTimeout, "close", "engine", "batches/%d still running after %s", b.id, timeout)
		}
	}

	e.mu.Lock()
	segs := make([]*segEntry, 0, len(e.mu.segments))
	for _, s := range e.mu.segments {
		segs = append(segs, s)
	}
	e.mu.segments = map[string]*segEntry{}
	regions := e.mu.regions
	e.mu.regions = nil
	e.mu.Unlock()
	for _, ent := range segs {
		ent.mu.Lock()
		ent.mu.gone = true
		ent.mu.Unlock()
		e.closeEntry(ent)
	}
	for _, r := range regions {
		r.mu.Lock()
		busy := len(r.mu.loans) > 0
		r.mu.closed = true
		r.mu.Unlock()
		if busy {
			continue // retained by an unquiesced owner
		}
		if e.file != nil && r.anon {
			e.file.ForgetBuffer(r.key)
		}
		r.m.Close()
	}
	var first error
	for _, t := range e.transports {
		if err := t.Close(); err != nil && first == nil {
			first = err
		}
	}
	e.transports = nil
	return first
}

// Stats is a snapshot of engine counters.
type Stats struct {
	Segments         int        `json:"segments"`
	SegmentsDraining int        `json:"segments_draining"`
	Regions          int        `json:"regions"`
	RegionBytes      uint64     `json:"region_bytes"`
	Batches          int        `json:"batches"`
	ReservedRequests int        `json:"reserved_requests"`
	InflightGroups   int        `json:"inflight_groups"`
	InflightBytes    uint64     `json:"inflight_bytes"`
	GroupsSubmitted  uint64     `json:"groups_submitted"`
	GroupsRejected   uint64     `json:"groups_rejected"`
	TasksCompleted   uint64     `json:"tasks_completed"`
	TasksFailed      uint64     `json:"tasks_failed"`
	TasksCancelled   uint64     `json:"tasks_cancelled"`
	BytesRead        uint64     `json:"bytes_read"`
	BytesWritten     uint64     `json:"bytes_written"`
	FastPathHits     uint64     `json:"fast_path_hits"`
	FastPathHandoffs uint64     `json:"fast_path_handoffs"`
	SubmitThrough    uint64     `json:"submit_through"`
	WorkersStarted   uint64     `json:"workers_started"`
	WorkersRunning   int64      `json:"workers_running"`
	UnquiescedGroups uint64     `json:"unquiesced_groups"`
	IOUring          *FileStats `json:"io_uring"`
	GDS              GDSStats   `json:"gds"`
	RuntimeQueue     QueueStats `json:"runtime_queue"`
}

// GDSStats reports the cuFile path.
type GDSStats struct {
	Mode string `json:"mode"`
}

// QueueStats reports the runtime admission queue.
type QueueStats struct {
	Enabled bool `json:"enabled"`
}

// Stats returns a snapshot. The file transport's part reports its probe
// verdict (the transport runs its cached probe if no submission has yet).
func (e *Engine) Stats() Stats {
	var s Stats
	e.mu.RLock()
	for _, ent := range e.mu.segments {
		s.Segments++
		ent.mu.Lock()
		if ent.mu.draining {
			s.SegmentsDraining++
		}
		ent.mu.Unlock()
	}
	s.Regions = len(e.mu.regions)
	for _, r := range e.mu.regions {
		s.RegionBytes += r.Len()
	}
	s.Batches = len(e.mu.batches)
	s.ReservedRequests = e.mu.reserved
	s.InflightGroups = e.mu.inflightGroups
	s.InflightBytes = e.mu.inflightBytes
	e.mu.RUnlock()
	s.GroupsSubmitted = e.st.groupsSubmitted.Load()
	s.GroupsRejected = e.st.groupsRejected.Load()
	s.TasksCompleted = e.st.tasksCompleted.Load()
	s.TasksFailed = e.st.tasksFailed.Load()
	s.TasksCancelled = e.st.tasksCancelled.Load()
	s.BytesRead = e.st.bytesRead.Load()
	s.BytesWritten = e.st.bytesWritten.Load()
	s.FastPathHits = e.st.fastPathHits.Load()
	s.FastPathHandoffs = e.st.fastPathHandoffs.Load()
	s.SubmitThrough = e.st.submitThrough.Load()
	s.WorkersStarted = e.st.workersStarted.Load()
	s.WorkersRunning = e.st.workersRunning.Load()
	s.UnquiescedGroups = e.st.unquiesced.Load()
	if e.file != nil {
		fs := e.file.FileStats()
		s.IOUring = &fs
	}
	s.GDS.Mode = e.gdsMode()
	s.RuntimeQueue.Enabled = e.cfg.RuntimeQueue.Enabled
	return s
}
