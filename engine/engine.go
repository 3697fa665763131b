// engine.go owns the Engine: construction, the registries of segments,
// regions and batches, engine-wide admission counters, stats and Close.
//
// Invariants:
//   - New starts no goroutine, opens no ring and loads no library; the
//     first file submission (or Stats) probes the file transport, once.
//   - inflightBytes and inflightGroups count admitted, not yet finished
//     groups; a group that ends unquiesced keeps its charge forever. They
//     are budgets (budget.go), taken and given without a lock and mostly
//     on a shard of the calling core's, so a submission takes no
//     engine-wide lock: on 16 cores Engine.mu taken twice per 4 KiB
//     request bound every client to one lock. closed and requesterClosed
//     are atomics for the same reason (set under e.mu, read without it).
//   - Close never closes a segment fd or unmaps a region an unquiesced
//     group holds (the kernel may still complete through them); it
//     reports ErrUnquiesced instead.
//   - Lock order: segMu; ringLane.mu, then Batch.mu, then Engine.mu,
//     then segEntry.mu, then Region.mu. admission.mu (admission.go) comes
//     after Batch.mu, and after Engine.mu when both are held (a batch
//     head waiting for max_inflight_bytes, runqueue.go). No lock is held across a blocking
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
	backends   []Backend
	file       FileTransport // nil in a build without a file backend
	gpu        gpuState      // CUDA memory and staging; zero when no GPU backend
	gds        gdsState      // cuFile; zero when no GDS backend
	staged     *stagedExec   // pinned staging lanes (staged.go), started on first use
	hostCopy   hostCopyExec  // host copy lanes for in-memory files (hostcopy.go)
	groups     sync.Pool     // recycled one-request groups (group.go says when)
	lists      sync.Pool     // freed batches' task and group lists (*batchLists)
	gdsExec    gdsExec       // cuFile lanes (gdsexec.go)
	mappedExec mappedExec    // tmpfs files by DMA (mappedexec.go)
	mapped     mappedState
	peerExec   peerExec // peer lanes (peerexec.go)
	memExec    memExec  // memory segment lanes (memgroup.go)
	ipcExec    *ipcExec // CUDA IPC lanes (ipcexec.go)
	// execs maps every route to its executor (route.go's routeTable).
	execs [routeCount]executor
	// adm is admission (admission.go): QoS budgets and the runtime queue;
	// defaultPolicy is what a submission without a policy resolves to.
	adm           *admission
	defaultPolicy *QoSPolicy
	// credit is receiver credit bindings (credit.go).
	credit *creditLedger

	probeOnce sync.Once
	probeErr  error

	// laneCopyHeld, nil outside tests, runs on the lane before a lane
	// copy's deadline check (lanecopy.go): a test holds lane copies there.
	laneCopyHeld func()
	// unitHeld, nil outside tests, runs on an off-ring executor's lane
	// before each unit's start check (offRing.startable), and before the
	// ring's ops are prepared (ringLane.prepareChosen), with the unit's
	// absolute task index.
	unitHeld func(task int)
	// progressHeld, nil outside tests, runs on an off-ring executor's
	// lane before it publishes a task's progress (not its final report).
	progressHeld func()
	// callerCopyHeld, nil outside tests, runs on a submitter before its
	// caller copy (callercopy.go): a test holds one copy running there.
	callerCopyHeld func()
	// claimHeld, nil outside tests, runs on a claimed copy's submitter
	// while it is counted in flight, before its copy (claim.go).
	claimHeld func()
	// claimLoaned, nil outside tests, runs on a claim's submitter after
	// it took its loans, before its task slot; claimLeft right after it
	// is counted out of the claims in flight (claim.go).
	claimLoaned, claimLeft func()
	// callerCopyCopied, nil outside tests, runs on a submitter after its
	// caller copy moved its bytes and before its finish takes b.mu.
	callerCopyCopied func()
	// combineTook, nil outside tests, runs on a batch's combiner that
	// has taken its list, before it takes b.mu (combine.go).
	combineTook func(b *Batch)
	// combineHeld, nil outside tests, runs on a batch's combiner that
	// applied the list it took, under b.mu, just before it lets the
	// combining lock go (combine.go).
	combineHeld func(b *Batch)
	// peerHandoff, nil outside tests, runs on a peer lane before a unit's
	// context check and its handoff to the Remote (peerexec.go).
	peerHandoff func(g *group, task int)
	// closeDrained, nil outside tests, runs in CloseFileSegment after the
	// close has closed the entry to new work and before it waits for the
	// entry's users: a test holds concurrent closes there.
	closeDrained func()
	// groupTaken, nil outside tests, runs in newGroup after a submission
	// took a group from its batch's free list (groupinline.go).
	groupTaken func(g *group)

	// segMu serializes the share-or-insert step of segment opens; it is
	// never held across the open itself, which may block on the store.
	segMu sync.Mutex
	// openHelpers counts segment opens running on a helper goroutine
	// (storewait.go), stuck ones included; bounded by max_file_segments.
	openHelpers atomic.Int64
	closeMu     sync.Mutex // serializes Close

	mu struct {
		sync.RWMutex
		nextKey   uint64
		nextBatch uint64
		regions   []*Region
		segments  map[string]*segEntry
		batches   map[uint64]*Batch
		reserved  int // sum of live and quarantined batches' capacity
		// quarantined counts freed batches with an unquiesced group: their
		// capacity (still in reserved) and their place under
		// max_allocated_batches stay consumed.
		quarantined int
		closeDone   bool // a Close got past the drain: later calls return nil
		// deferred are batches freed while busy (deferfree.go): their
		// capacity and batch slot stay consumed until their work drains.
		deferred   map[uint64]*Batch
		registered uint64 // page-rounded bytes of regions registered or being mapped
	}
	regLimit uint64 // config RegisteredLimit, fixed at New

	// The in-flight budgets change with every submission; they are
	// allocated apart, so the flags every submission reads (closed,
	// requesterClosed, regions) do not share their cache lines.
	inflightGroups *budget // max_inflight_batches, in groups
	inflightBytes  *budget // max_inflight_bytes

	// closed (Close began) and requesterClosed (CloseRequester ran:
	// Submit is refused for good) are set under e.mu, so a holder of e.mu
	// sees them stable, and read without it on the submission path.
	closed atomic.Bool
	// regions is e.mu.regions as an immutable snapshot, replaced (under
	// e.mu) at every change, so resolving an address takes no lock.
	regions         atomic.Pointer[[]*Region]
	requesterClosed atomic.Bool

	// counters, atomics
	st struct {
		groupsSubmitted  counter
		groupsRejected   atomic.Uint64
		tasksCompleted   counter
		tasksFailed      atomic.Uint64
		tasksCancelled   atomic.Uint64
		bytesRead        counter
		bytesWritten     counter
		fastPathHits     atomic.Uint64
		fastPathHandoffs atomic.Uint64
		submitThrough    atomic.Uint64
		workersStarted   atomic.Uint64
		callerCopies     counter
		laneCopies       counter
		hostCopyUnits    counter
		peerUnits        counter
		ipc              ipcCounters
		workersRunning   atomic.Int64
		unquiesced       atomic.Uint64
		failovers        atomic.Uint64
	}
}

// New validates cfg and builds an idle engine over the given backends
// (file transports, a GPU, GDS). It starts nothing: no goroutine, no
// ring, no library load.
func New(cfg config.Engine, backends ...Backend) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, wrap(KindInvalid, "new", "engine", err)
	}
	e := &Engine{cfg: cfg, log: cfg.Logger, backends: backends, regLimit: cfg.RegisteredLimit(),
		inflightGroups: newBudget(uint64(cfg.MaxInflightBatches), groupQuantum),
		inflightBytes:  newBudget(uint64(cfg.MaxInflightBytes), byteQuantum)}
	if e.log == nil {
		e.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, t := range backends {
		switch t := t.(type) {
		case FileTransport:
			if e.file == nil && t.Kind() == TransportIOUring {
				e.file = t
			}
		case GPU:
			if e.gpu.b == nil {
				e.gpu.b = t
			}
		case GDS:
			if e.gds.b == nil && cfg.GDSEnabled {
				e.gds.b = t
			}
		}
	}
	e.staged = newStagedExec(e)
	e.hostCopy = newHostCopyExec()
	e.gdsExec = newGDSExec(e)
	e.mappedExec = newMappedExec(e)
	e.peerExec = newPeerExec()
	e.memExec = newMemExec(e)
	e.ipcExec = newIPCExec(e)
	e.routeTable() // route.go
	e.mu.segments = make(map[string]*segEntry)
	e.mu.batches = make(map[uint64]*Batch)
	e.adm = newAdmission(cfg)
	e.credit = newCreditLedger(cfg.MaxReceiverCreditSessions)
	e.defaultPolicy, _ = e.ResolveQoS(QoSContext{}) // blank names cannot fail
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() config.Engine { return e.cfg }

func (e *Engine) checkOpen(op string) error {
	if e.closed.Load() {
		return &Error{Op: op, Name: "engine", Kind: KindClosed, Err: os.ErrClosed}
	}
	return nil
}

// isClosed reports whether Close has begun.
func (e *Engine) isClosed() bool { return e.checkOpen("") != nil }

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

// Close refuses new work, cancels queued groups, waits up to timeout for
// running ones, then closes segments, regions and transports. If running
// work does not drain in time it returns ErrTimeout and leaves those
// owners (and the resources they hold) in place; calling Close again
// retries. Segments and regions an unquiesced group holds are never
// closed (their fds and memory stay with the kernel's possible
// completion), and Close then reports ErrUnquiesced. Once a Close got
// past the drain (returning nil, ErrUnquiesced or a transport's error),
// later calls return nil.
func (e *Engine) Close(timeout time.Duration) error {
	e.closeMu.Lock() // one Close at a time; a second one retries the drain
	defer e.closeMu.Unlock()
	e.mu.Lock()
	if e.mu.closeDone {
		e.mu.Unlock()
		return nil
	}
	e.closed.Store(true)
	batches := make([]*Batch, 0, len(e.mu.batches))
	for _, b := range e.mu.batches {
		batches = append(batches, b)
	}
	for _, b := range e.mu.deferred {
		batches = append(batches, b) // freed while busy: drain them too
	}
	e.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, b := range batches {
		b.cancelAll(false)
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
	e.regions.Store(nil)
	e.mu.Unlock()
	// Every batch drained, so a user or loan left now belongs to an
	// unquiesced group: the kernel may still complete into that memory or
	// through those fds. Closing an fd would let its number be reused
	// under such an op, so retained entries and regions stay open.
	var keptSegs, keptRegions int
	for _, ent := range segs {
		ent.mu.Lock()
		ent.mu.gone = true
		held := ent.closeLocked() > 0
		ent.mu.Unlock()
		if held {
			keptSegs++
			continue
		}
		e.closeEntry(ent)
	}
	for _, r := range regions {
		r.mu.Lock()
		n, _, pins := r.loans.closeIfIdle(true)
		r.mu.closed = true
		r.mu.Unlock()
		// A ReadAt/WriteAt still copying (bounded: a host copy, or a
		// device copy within its cut) is waited for, within timeout.
		for pins > 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
			_, _, pins = r.loans.lockAll()
			r.loans.unlockAll()
		}
		r.mu.Lock()
		busy := n > 0 || pins > 0 || r.mu.uncertain // a copy of unknown outcome may still touch it
		r.mu.Unlock()
		if busy {
			keptRegions++
			continue // retained by an unquiesced owner
		}
		if e.file != nil && r.anon {
			e.file.ForgetBuffer(r.key)
		}
		if e.gdsForgetRegion(r) != nil {
			keptRegions++
			continue // cuFile may still reference it
		}
		r.free()
	}
	for _, ex := range e.execs {
		ex.close()
	}
	e.closeMapped()
	e.closeStaging()
	e.closeCopyStage()
	var first error
	for _, t := range e.backends {
		// Transports close idle queues only; an abandoned ring (one an
		// unquiesced group used) stays mapped.
		if err := t.Close(); err != nil && first == nil {
			first = err
		}
	}
	e.backends = nil
	e.mu.Lock()
	e.mu.closeDone = true
	e.mu.Unlock()
	if n := e.st.unquiesced.Load(); n > 0 {
		return errorf(KindUnquiesced, "close", "engine", "%d unquiesced group(s) retain %d segment(s), %d region(s) and their rings; they are never released", n, keptSegs, keptRegions)
	}
	return first
}

// Stats is a snapshot of engine counters.
type Stats struct {
	Segments         int    `json:"segments"`
	SegmentsDraining int    `json:"segments_draining"`
	Regions          int    `json:"regions"`
	RegionBytes      uint64 `json:"region_bytes"`
	Batches          int    `json:"batches"`
	ReservedRequests int    `json:"reserved_requests"`
	// QuarantinedBatches are freed batches whose unquiesced groups keep
	// their capacity (counted in ReservedRequests) and batch slot.
	QuarantinedBatches int           `json:"quarantined_batches"`
	InflightGroups     int           `json:"inflight_groups"`
	InflightBytes      uint64        `json:"inflight_bytes"`
	GroupsSubmitted    uint64        `json:"groups_submitted"`
	GroupsRejected     uint64        `json:"groups_rejected"`
	TasksCompleted     uint64        `json:"tasks_completed"`
	TasksFailed        uint64        `json:"tasks_failed"`
	TasksCancelled     uint64        `json:"tasks_cancelled"`
	BytesRead          uint64        `json:"bytes_read"`
	BytesWritten       uint64        `json:"bytes_written"`
	FastPathHits       uint64        `json:"fast_path_hits"`
	FastPathHandoffs   uint64        `json:"fast_path_handoffs"`
	SubmitThrough      uint64        `json:"submit_through"`
	WorkersStarted     uint64        `json:"workers_started"`
	CallerCopies       uint64        `json:"caller_copies"`   // groups the submitter copied (callercopy.go)
	LaneCopies         uint64        `json:"lane_copies"`     // of those, groups the host copy lanes copied (lanecopy.go)
	HostCopyUnits      uint64        `json:"host_copy_units"` // units the host copy lanes copied (hostcopy.go)
	PeerUnits          uint64        `json:"peer_units"`      // units the peer executor moved (peerexec.go)
	IPC                IPCStats      `json:"cuda_ipc"`        // CUDA IPC executor (ipc.go)
	WorkersRunning     int64         `json:"workers_running"`
	UnquiescedGroups   uint64        `json:"unquiesced_groups"`
	IOUring            *FileStats    `json:"io_uring"`
	Staging            *StagingStats `json:"staging,omitempty"`
	// CopyStaging is the pinned pool of device copies outside the
	// staging lanes (peer transfers, ReadAt/WriteAt), once allocated.
	CopyStaging    *CopyStageStats `json:"copy_staging,omitempty"`
	GDS            GDSStats        `json:"gds"`
	Mapped         MappedStats     `json:"mapped_files"`
	RuntimeQueue   QueueStats      `json:"runtime_queue"`
	QoS            QoSStats        `json:"qos"`
	ReceiverCredit CreditStats     `json:"receiver_credit"`

	// Failovers counts attempts started on a task's next transport.
	Failovers uint64 `json:"failovers"`
	// DeferredBatches are batches freed while busy (enable_progress_worker)
	// whose work has not drained: they keep their capacity (counted in
	// ReservedRequests) and batch slot.
	DeferredBatches int `json:"deferred_batches"`
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
	s.QuarantinedBatches = e.mu.quarantined
	s.DeferredBatches = len(e.mu.deferred)
	s.InflightGroups = int(e.inflightGroups.inUse())
	s.InflightBytes = e.inflightBytes.inUse()
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
	s.CallerCopies = e.st.callerCopies.Load()
	s.LaneCopies = e.st.laneCopies.Load()
	s.HostCopyUnits = e.st.hostCopyUnits.Load()
	s.PeerUnits = e.st.peerUnits.Load()
	s.IPC = e.st.ipc.stats()
	s.WorkersRunning = e.st.workersRunning.Load()
	s.UnquiescedGroups = e.st.unquiesced.Load()
	s.Failovers = e.st.failovers.Load()
	if e.file != nil {
		fs := e.file.FileStats()
		s.IOUring = &fs
	}
	s.GDS = e.gdsStats()
	s.Mapped = e.mappedStats()
	if p := e.gpu.staging.Load(); p != nil {
		st := p.stats()
		st.Lanes = e.staged.laneCount()
		s.Staging = &st
	}
	if cs := e.copyStats(); cs.Allocated {
		s.CopyStaging = &cs
	}
	s.RuntimeQueue, s.QoS = e.adm.stats()
	s.ReceiverCredit = e.ReceiverCreditStats()
	return s
}
