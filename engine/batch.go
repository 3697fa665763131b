// batch.go owns batches: allocation against the engine's reservation
// limits, submission (validation and admission of a group), seal, status,
// wait, cancel and free.
//
// A batch is a FIFO of groups (one group per Submit). Each group's
// requests become consecutive public tasks. One worker per batch (worker.go)
// dispatches groups in order; different batches run concurrently.
//
// Invariants:
//   - A rejected Submit adds no task and changes no counter but
//     groups_rejected; an accepted group is never replayed or rolled back.
//   - Task i belongs to exactly one group and its state only moves forward:
//     pending -> running -> completed|failed, or pending -> cancelled, or
//     running -> cancelled for a task whose failed transport attempt was
//     parked and then cancelled (failover.go).
//   - Status, TaskStatus, TaskStatuses and Submissions are polls: each may
//     decide one parked transport attempt (failover.go); Wait decides all.
//   - Before seal the state is open; after seal it becomes terminal once
//     every group has finished, and a terminal state never changes.
//   - b.mu guards everything in mu; b.mu.changed (made when someone waits)
//     is closed at every published change, so waiters never miss one.
//   - A freed batch with an unquiesced group is quarantined: its ID is
//     retired but its capacity and its max_allocated_batches slot stay
//     consumed (Engine.mu.quarantined) for the engine's life.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// State is a batch's overall state.
type State uint8

const (
	StateOpen State = iota
	StateCompleted
	StateFailed
	StateCancelled
)

func (s State) String() string {
	return [...]string{"open", "completed", "failed", "cancelled"}[s]
}

// Terminal reports whether the state can no longer change.
func (s State) Terminal() bool { return s != StateOpen }

// TaskRange is the public task indices a Submit appended.
type TaskRange struct {
	First int `json:"first"`
	Count int `json:"count"`
}

// TaskStatus is one task's published state.
type TaskStatus struct {
	Index       int           `json:"index"`
	State       TaskState     `json:"-"`
	Length      uint64        `json:"length"`
	Transferred uint64        `json:"transferred_bytes"`
	Transport   TransportKind `json:"-"`
	// FailoverCount is how many times the task moved to its next
	// transport after a failed attempt (failover.go).
	FailoverCount int          `json:"failover_count"`
	PhysicalOwner int          `json:"physical_owner"`
	Err           error        `json:"-"`
	RemoteEffect  RemoteEffect `json:"-"`
}

// Report describes one group (one Submit).
type Report struct {
	Tasks  TaskRange `json:"tasks"`
	Op     Op        `json:"-"`
	Target string    `json:"target"`
	Done   bool      `json:"done"`
	// CompletedRequests is the consecutive fully successful prefix;
	// CompletedBytes sums only that prefix.
	CompletedRequests int    `json:"completed_requests"`
	CompletedBytes    uint64 `json:"completed_bytes"`
	// RequestIndex is the first unsuccessful request (group-relative),
	// or -1.
	RequestIndex int `json:"request_index"`
	// AffectedRequests counts requests from RequestIndex through the last
	// one handed to the kernel: the span that may have executed.
	AffectedRequests int `json:"affected_requests"`
	// LocallyDrained is false when the group ended unquiesced: the engine
	// could not prove the kernel is done with its memory. Err then has
	// KindUnquiesced, at the first unsuccessful request, whatever that
	// request's own failure was.
	LocallyDrained bool `json:"locally_drained"`
	// RemoteEffect is EffectUnknown for a WRITE group when any request in
	// the affected span (RequestIndex through the last one the kernel
	// consumed) was submitted: those may have changed the file, even the
	// ones that completed after the first failure.
	RemoteEffect RemoteEffect `json:"-"`
	Err          error        `json:"-"`
	// FailedAt is when the group finished with Err; zero while it runs
	// or when it succeeded.
	FailedAt time.Time `json:"-"`
}

// Batch is an asynchronous batch. Safe for concurrent use.
type Batch struct {
	e        *Engine
	id       uint64
	capacity int

	// free: recycled one-request groups, handed out before the engine's
	// pool (groupinline.go). Set at allocation and never changed; it is
	// cut into one part per shard, and freeNext[k] is the next index to
	// take in part k.
	free     []*group
	freeNext [1 << shardBits]struct {
		atomic.Int64
		_ [56]byte
	}

	comb combiner // caller copies' entries and finishes (combine.go)
	// Claimed copies (claim.go): those in flight (closing is set while
	// claims are closed), the next task slot, and those finished, on the
	// stack of their submitter's shard, until a fold applies them.
	claiming  users
	claimNext struct {
		atomic.Int64
		_ [56]byte
	}
	claimDone [1 << shardBits]struct {
		head atomic.Pointer[group]
		_    [56]byte
	}
	deliverMu sync.Mutex // one goroutine at a time runs onDone
	spare     []Report   // guarded by deliverMu: the emptied notify slice, reused
	// reports is len(mu.notify) > 0, written under b.mu at each change
	// and read without it: a deliverer looks for more reports, and a
	// poller for any, without taking b.mu (runReports).
	reports atomic.Bool

	mu struct {
		sync.Mutex
		sealed   bool
		freed    bool
		tasks    []task
		groups   []*group // every accepted group, in order
		queue    []*group // accepted, not yet dispatched
		inflight []*group // dispatched, not finished (worker-owned order)
		// hazards counts the groups in inflight that a file read may
		// have to wait for other than through its memory (group.hazard).
		hazards int
		active  int // groups accepted and not finished
		// laneCopies: caller copies queued or running on the host copy
		// lanes; callerRun: caller copies since the last lane copy
		// (lanecopy.go); callerCopying: caller copies running on their
		// submitters now.
		laneCopies    int
		callerRun     int
		callerCopying int
		worker        bool
		w             *worker // the running worker, for submit-through
		onDone        func(Report)
		notify        []Report // finished groups not yet handed to onDone
		changed       chan struct{}
		state         State
		// parked are failed attempts awaiting a failover decision, in
		// the order they failed (failover.go).
		parked []parked
		// deferred: freed while busy (enable_progress_worker); the
		// reservation returns when the last group finishes (deferfree.go).
		deferred bool
		retired  chan struct{} // closed once the reservation is settled
		// recyclable counts the finished groups that may be recycled
		// (group.recyclable), so Free knows without reading every group
		// whether all of them may be (group.go, recycle).
		recyclable int
		// unquiesced is set when a group ends unquiesced; Free then
		// quarantines the batch instead of returning its reservation.
		unquiesced bool
		// claimsOpen: claims were opened since the last fold (claim.go).
		claimsOpen bool
	}
	// claimed is a fold's scratch: claimed copies by task slot. Guarded
	// by mu; pooled with the lists.
	claimed []*group
}

// ID is the engine-scoped, increasing batch ID.
func (b *Batch) ID() uint64 { return b.id }

// Capacity is the number of task slots reserved.
func (b *Batch) Capacity() int { return b.capacity }

func (b *Batch) name() string { return fmt.Sprintf("batches/%d", b.id) }

// AllocateBatch reserves capacity task slots and returns a new batch with
// the next ID. Capacity must be in [1, max_batch_requests]; the engine's
// max_allocated_batches and max_allocated_requests bound all live batches.
func (e *Engine) AllocateBatch(capacity int) (*Batch, error) {
	const op = "allocate"
	if capacity < 1 || capacity > e.cfg.MaxBatchRequests {
		return nil, errorf(KindInvalid, op, "batches", "capacity %d: must be in [1, max_batch_requests (%d)]", capacity, e.cfg.MaxBatchRequests)
	}
	b := &Batch{e: e, capacity: capacity}
	b.claiming.closing.Store(true) // claim.go: closed until a locked entry opens them
	l := b.takeLists()             // group.go; before b is shared
	e.mu.Lock()
	defer e.mu.Unlock()
	fail := func(err error) (*Batch, error) {
		if l != nil {
			e.lists.Put(l)
		}
		return nil, err
	}
	if e.closed.Load() {
		return fail(errorf(KindClosed, op, "batches", "engine is closed"))
	}
	if n := len(e.mu.batches) + e.mu.quarantined + len(e.mu.deferred); n >= e.cfg.MaxAllocatedBatches {
		return fail(errorf(KindExhausted, op, "batches", "%d live, %d deferred and %d quarantined batches reach max_allocated_batches (%d); free some", len(e.mu.batches), len(e.mu.deferred), e.mu.quarantined, e.cfg.MaxAllocatedBatches))
	}
	if e.mu.reserved+capacity > e.cfg.MaxAllocatedRequests {
		return fail(errorf(KindExhausted, op, "batches", "capacity %d + %d reserved exceeds max_allocated_requests (%d)", capacity, e.mu.reserved, e.cfg.MaxAllocatedRequests))
	}
	e.mu.nextBatch++
	b.id = e.mu.nextBatch
	e.mu.batches[b.id] = b
	e.mu.reserved += capacity
	return b, nil
}

// Batch returns the live batch with id, or ErrNotFound.
func (e *Engine) Batch(id uint64) (*Batch, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if b, ok := e.mu.batches[id]; ok {
		return b, nil
	}
	return nil, errorf(KindNotFound, "lookup", fmt.Sprintf("batches/%d", id), "no such batch")
}

// Batches returns the live batches in ID order.
func (e *Engine) Batches() []*Batch {
	e.mu.RLock()
	out := make([]*Batch, 0, len(e.mu.batches))
	for _, b := range e.mu.batches {
		out = append(out, b)
	}
	e.mu.RUnlock()
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].id < out[j-1].id; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Target is what a submission addresses: a file (*Segment), a region of
// this engine (*MemSegment) or a peer's region (*RemoteSegment).
type Target interface{ isTarget() }

// Submit validates requests, admits them as one group and queues it.
// It returns the group's task range. A rejected group adds no task and
// the error names the first bad request and value. timeout <= 0 uses
// default_timeout; the deadline starts now and covers queueing and I/O.
func (b *Batch) Submit(op Op, target Target, reqs []Request, note *Notification, timeout time.Duration) (TaskRange, error) {
	return b.SubmitWith(op, target, reqs, note, SubmitOptions{Timeout: timeout})
}

// SubmitWith is Submit with options: a QoS policy and a deadline
// (admission.go).
func (b *Batch) SubmitWith(op Op, target Target, reqs []Request, note *Notification, opts SubmitOptions) (TaskRange, error) {
	g, err := b.e.prepare(b, op, target, reqs, note, opts)
	if err != nil {
		b.e.st.groupsRejected.Add(1)
		return TaskRange{}, err
	}
	if opts.Inline != nil && g.claimable() {
		g.inlineAsked = true
		if tr, ok := b.claimCopy(g, opts.Inline); ok { // claim.go
			return tr, nil
		}
	}
	var en entry
	if g.callerCopyEligible() { // callercopy.go; needs no lock
		en = b.enterCombined(g, reqs) // combine.go
		// An entry that combined left others' reports: deliver them once
		// this submission is done with g.
		defer b.deliver()
	} else {
		b.mu.Lock()
		en = b.enterLocked(g, reqs, false)
		b.mu.Unlock()
	}
	if en.err != nil {
		g.release()
		b.e.st.groupsRejected.Add(1)
		return TaskRange{}, en.err
	}
	tr := TaskRange{First: en.first, Count: len(reqs)}
	b.e.st.groupsSubmitted.Add(1) // counters out of b.mu: each add may miss the cache
	switch {
	case en.copy:
		b.e.st.callerCopies.Add(1)
		b.runCallerCopy(g, en.lane) // lanecopy.go; and delivers
	case en.fast:
		en.w.fastPath()
	case en.start:
		en.w.start()
	case en.w != nil:
		en.w.submitThrough()
		b.deliver() // a group it finished without I/O reports here
	}
	return tr, nil
}

// entry is what became of a submission at the batch: refused (err), a
// caller copy its submitter (or a host copy lane) now runs, or queued
// for the worker, which its submitter starts, runs the fast path of, or
// submits through. The submitter acts on it after b.mu is released.
type entry struct {
	err         error
	first       int  // the group's first task, read under b.mu
	copy, lane  bool // a caller copy; lane: the host copy lanes run it
	w           *worker
	start, fast bool
}

// enterLocked accepts admitted group g into the batch, or refuses it,
// and decides how it runs (entry). reqs are its requests; copyOK is
// g.callerCopyEligible(). REQUIRES: b.mu.
func (b *Batch) enterLocked(g *group, reqs []Request, copyOK bool) entry {
	b.foldLocked() // claim.go: the lists whole, and no claim passes this entry
	if err := b.acceptLocked(len(reqs)); err != nil {
		return entry{err: err}
	}
	// first is read here, under b.mu: once a caller copy finishes, its
	// group may be recycled after a Free (group.go).
	if b.mu.tasks == nil {
		b.listsForLocked() // group.go
	}
	en := entry{first: len(b.mu.tasks)}
	g.first = en.first
	for i := range reqs {
		b.mu.tasks = append(b.mu.tasks, task{length: reqs[i].extent(), g: g})
	}
	b.mu.groups = append(b.mu.groups, g)
	b.mu.active++
	if copyOK && b.startCallerCopyLocked(g) {
		en.copy = true
		en.lane = b.laneCopyLocked(g) // lanecopy.go
		b.changedLocked()
		if g.inlineAsked && !en.lane {
			b.openClaimsLocked() // claim.go: the next such copies claim
		}
		return en
	}
	b.mu.queue = append(b.mu.queue, g)
	en.start = !b.mu.worker
	// The caller fast path serves a batch's first group only (what
	// SubmitAndWait and SubmitAsync create). A client streaming groups into
	// one batch would otherwise block for the whole wait window each time
	// the batch drains, with the rest of its queue depth idle
	// (docs/performance.md measured 0.26x fio for 4 KiB at QD 32).
	en.fast = en.start && len(b.mu.groups) == 1 && len(b.mu.inflight) == 0 && g.fastPathEligible()
	en.w = b.mu.w
	if en.start {
		en.w = &worker{b: b, wake: make(chan struct{}, 1), fast: en.fast}
		b.mu.worker, b.mu.w = true, en.w
	}
	b.changedLocked()
	return en
}

// acceptLocked says whether an admitted group of n requests may join the
// batch. REQUIRES: b.mu.
func (b *Batch) acceptLocked(n int) error {
	if err := b.checkLocked("submit"); err != nil {
		return err
	}
	if b.mu.sealed {
		return errorf(KindInvalid, "submit", b.name(), "batch is sealed")
	}
	// Close may have begun after admission; checking again under b.mu
	// (which Close's drain also takes) means Close either sees this group
	// active or this Submit sees Close.
	if err := b.e.checkOpen("submit"); err != nil {
		return err
	}
	// The same for close_requester, whose drain also takes b.mu: a
	// submission admitted before it began either is seen by its drain or
	// is refused here.
	if err := b.e.checkRequester("submit"); err != nil {
		return err
	}
	if used := len(b.mu.tasks); used+n > b.capacity {
		return errorf(KindExhausted, "submit", b.name(), "%d requests do not fit: %d of %d task slots used", n, used, b.capacity)
	}
	return nil
}

// lockFolded takes b.mu with the batch's lists whole: every claimed copy
// applied, and no claim while it is held (claim.go).
func (b *Batch) lockFolded() {
	b.mu.Lock()
	b.foldLocked()
}

func (b *Batch) checkLocked(op string) error {
	if b.mu.freed {
		return errorf(KindNotFound, op, b.name(), "batch was freed")
	}
	return nil
}

// changedLocked wakes every waiter. REQUIRES: b.mu.
func (b *Batch) changedLocked() {
	if b.mu.changed != nil {
		close(b.mu.changed)
		b.mu.changed = nil
	}
	if b.mu.sealed && b.mu.active == 0 && b.mu.state == StateOpen {
		b.mu.state = b.terminalStateLocked()
	}
}

func (b *Batch) terminalStateLocked() State {
	cancelled := false
	for i := range b.mu.tasks {
		switch b.mu.tasks[i].state {
		case TaskFailed:
			return StateFailed
		case TaskCancelled:
			cancelled = true
		}
	}
	if cancelled {
		return StateCancelled
	}
	return StateCompleted
}

// Seal stops appends. Sealing twice is harmless.
func (b *Batch) Seal() error {
	b.lockFolded()
	defer b.mu.Unlock()
	if err := b.checkLocked("seal"); err != nil {
		return err
	}
	b.mu.sealed = true
	b.changedLocked()
	return nil
}

// OnGroupDone registers fn to receive each group's final report. fn runs
// on the goroutine that finished the group (usually the batch worker,
// right after reaping), with no engine lock held, one call at a time and
// in finishing order. It must not block; it may call Submit, on this batch
// or another, and that submission then reaches the ring from the same
// goroutine with no handoff, the way fio's loop reaps and resubmits.
// Register it before the first Submit; groups finished earlier are not
// reported.
func (b *Batch) OnGroupDone(fn func(Report)) {
	b.mu.Lock()
	b.mu.onDone = fn
	if fn == nil {
		b.mu.notify = nil
		b.reports.Store(false)
	}
	b.mu.Unlock()
}

// deliver hands finished groups' reports to onDone. A goroutine that
// finds another delivering returns at once: the deliverer re-checks for
// new reports after it lets go, so none is stranded, and an onDone that
// submits (and so comes back here) cannot deadlock.
func (b *Batch) deliver() {
	if !b.reports.Load() || !b.deliverMu.TryLock() {
		return
	}
	b.mu.Lock()
	reps, fn, ok := b.takeReportsLocked()
	b.mu.Unlock()
	if ok {
		b.runReports(reps, fn)
	}
}

// takeReportsLocked takes the finished groups' reports for the deliverer,
// or, when there are none, lets deliverMu go and reports false.
// REQUIRES: b.mu, deliverMu (released when it returns false).
func (b *Batch) takeReportsLocked() ([]Report, func(Report), bool) {
	if len(b.mu.notify) == 0 {
		b.deliverMu.Unlock()
		return nil, nil, false
	}
	reps, fn := b.mu.notify, b.mu.onDone
	b.mu.notify, b.spare = b.spare, nil
	b.reports.Store(false)
	return reps, fn, true
}

// runReports calls fn for reps, then for whatever finished meanwhile,
// and returns with deliverMu released. It lets go of deliverMu before
// it looks for more, never while it waits for b.mu: a goroutine whose
// group finishes then delivers its report itself instead of leaving it
// to this one (which would have to wake it). A report appended before
// the look is seen by it; one appended after it comes from a goroutine
// whose TryLock follows the Unlock. The look reads b.reports, not
// b.mu.notify: a third hold of b.mu per caller copy (after submitting
// and finishing) that every one of a batch's submitters queued for.
// REQUIRES: deliverMu, reps taken by takeReportsLocked; not b.mu.
func (b *Batch) runReports(reps []Report, fn func(Report)) {
	for {
		for _, r := range reps {
			if fn != nil { // unregistered meanwhile: reports are dropped
				fn(r)
			}
		}
		clear(reps) // keep no error or report alive through the reuse
		b.spare = reps[:0]
		b.deliverMu.Unlock()
		if !b.reports.Load() || !b.deliverMu.TryLock() {
			return
		}
		var ok bool
		b.mu.Lock()
		reps, fn, ok = b.takeReportsLocked()
		b.mu.Unlock()
		if !ok {
			return
		}
	}
}

// Changed returns a channel closed at the batch's next published change
// (a task finishing, a group queued or finished, seal, cancel, free).
// Callers re-read state after it fires and call Changed again.
func (b *Batch) Changed() <-chan struct{} {
	b.lockFolded()
	defer b.mu.Unlock()
	return b.changedChanLocked()
}

// changedChanLocked returns the channel the next change closes, making it
// on demand: most changes have nobody waiting. REQUIRES: b.mu.
func (b *Batch) changedChanLocked() chan struct{} {
	if b.mu.changed == nil {
		b.mu.changed = make(chan struct{})
	}
	return b.mu.changed
}

// Sealed reports whether Seal was called.
func (b *Batch) Sealed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.sealed
}

// Status returns the overall state: open until sealed, then terminal once
// every group has finished.
func (b *Batch) Status() State {
	defer b.deliver()
	b.lockFolded()
	defer b.mu.Unlock()
	b.pollLocked()
	return b.mu.state
}

// TaskStatus returns task i's published state.
func (b *Batch) TaskStatus(i int) (TaskStatus, error) {
	defer b.deliver()
	b.lockFolded()
	defer b.mu.Unlock()
	if err := b.checkLocked("status"); err != nil {
		return TaskStatus{}, err
	}
	if i < 0 || i >= len(b.mu.tasks) {
		return TaskStatus{}, errorf(KindNotFound, "status", b.name(), "task %d: batch has %d tasks", i, len(b.mu.tasks))
	}
	b.pollLocked()
	return b.taskStatusLocked(i), nil
}

// TaskStatuses returns every task's state, in index order.
func (b *Batch) TaskStatuses() []TaskStatus {
	defer b.deliver()
	b.lockFolded()
	defer b.mu.Unlock()
	b.pollLocked()
	out := make([]TaskStatus, len(b.mu.tasks))
	for i := range out {
		out[i] = b.taskStatusLocked(i)
	}
	return out
}

// TaskCount is the number of tasks appended so far.
func (b *Batch) TaskCount() int {
	b.lockFolded()
	defer b.mu.Unlock()
	return len(b.mu.tasks)
}

// Submissions returns one report per accepted group, in order.
func (b *Batch) Submissions() []Report {
	defer b.deliver()
	b.lockFolded()
	defer b.mu.Unlock()
	b.pollLocked()
	out := make([]Report, len(b.mu.groups))
	for i, g := range b.mu.groups {
		out[i] = g.reportLocked()
	}
	return out
}

// Wait blocks until the sealed batch is terminal or timeout passes
// (ErrTimeout; the work is neither cancelled nor released). It fails with
// ErrInvalid before Seal.
func (b *Batch) Wait(timeout time.Duration) (State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := b.WaitContext(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return st, errorf(KindTimeout, "wait", b.name(), "not terminal after %s", timeout)
	}
	return st, err
}

// WaitContext is Wait bounded by ctx; on ctx's end it returns ctx.Err()
// wrapped, changing nothing.
func (b *Batch) WaitContext(ctx context.Context) (State, error) {
	for {
		b.lockFolded()
		if err := b.checkLocked("wait"); err != nil {
			b.mu.Unlock()
			return StateOpen, err
		}
		if !b.mu.sealed {
			b.mu.Unlock()
			return StateOpen, errorf(KindInvalid, "wait", b.name(), "batch is not sealed; seal it first")
		}
		// Wait may start every parked attempt (failover.go).
		b.advanceLocked(-1, true)
		st, ch := b.mu.state, b.changedChanLocked()
		b.mu.Unlock()
		b.deliver()
		if st.Terminal() {
			return st, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, fmt.Errorf("wait %s: %w", b.name(), ctx.Err())
		}
	}
}

// drain waits until no group is queued or running (sealed or not).
func (b *Batch) drain(ctx context.Context) error {
	for {
		b.lockFolded()
		active, ch := b.mu.active, b.changedChanLocked()
		b.mu.Unlock()
		if active == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Cancel stops task i if it has not started, or a running one whose
// executor can stop it (canceller, executor.go: the peer and CUDA IPC
// executors); that executor's refusal is returned as it is. Any other
// running task cannot be recalled: ErrBusy. Cancelling a finished task
// does nothing.
func (b *Batch) Cancel(i int) error {
	defer b.deliver()
	b.lockFolded()
	defer b.mu.Unlock()
	if err := b.checkLocked("cancel"); err != nil {
		return err
	}
	if i < 0 || i >= len(b.mu.tasks) {
		return errorf(KindNotFound, "cancel", b.name(), "task %d: batch has %d tasks", i, len(b.mu.tasks))
	}
	t := &b.mu.tasks[i]
	switch {
	case t.parked:
		b.fenceParkedLocked(i)
		b.changedLocked()
		return nil
	case t.state == TaskRunning:
		c, ok := b.cancellerLocked(i)
		if !ok {
			return errorf(KindBusy, "cancel", b.name(), "task %d is running; file I/O already handed to the kernel cannot be recalled", i)
		}
		if err := c.cancelRunning(t.g, i-t.g.first); err != nil {
			return errorf(KindOf(err), "cancel", b.name(), "task %d is running: %w", i, err)
		}
		b.changedLocked()
		return nil
	case t.state.terminal():
		return nil
	}
	b.cancelTaskLocked(i)
	b.changedLocked()
	b.pokeLocked()
	return nil
}

// CancelAll cancels every task that has not started, and cuts every
// running task whose executor can stop it (as Cancel does); the others
// run on.
func (b *Batch) CancelAll() error { return b.cancelAll(true) }

// cancelAll is CancelAll; Close passes live=false to reach deferred
// (freed) batches too.
func (b *Batch) cancelAll(live bool) error {
	defer b.deliver()
	b.lockFolded()
	defer b.mu.Unlock()
	if err := b.checkLocked("cancel"); err != nil && live {
		return err
	}
	for i := range b.mu.tasks {
		switch {
		case b.mu.tasks[i].parked:
			b.fenceParkedLocked(i)
		case b.mu.tasks[i].state == TaskPending:
			b.cancelTaskLocked(i)
		case b.mu.tasks[i].state == TaskRunning:
			if c, ok := b.cancellerLocked(i); ok {
				g := b.mu.tasks[i].g
				_ = c.cancelRunning(g, i-g.first) // a refusal: it runs on
			}
		}
	}
	b.changedLocked()
	b.pokeLocked()
	return nil
}

// cancellerLocked is the executor of running task i when it can stop
// running work (executor.go). REQUIRES: b.mu.
func (b *Batch) cancellerLocked(i int) (canceller, bool) {
	g := b.mu.tasks[i].g
	c, ok := b.e.executor(g.routes[i-g.first]).(canceller)
	return c, ok
}

var (
	errCancelled      = errors.New("cancelled before it started")
	errCancelledRetry = errors.New("cancelled after a failed transport attempt, before the next one")
)

// Free releases the batch's reservation. A batch with queued or running
// groups returns ErrBusy and stays valid. A batch with an unquiesced group
// is quarantined: Free succeeds and retires its ID, but its capacity stays
// reserved and it still counts against max_allocated_batches
// (Stats.QuarantinedBatches). After Free every method returns ErrNotFound.
func (b *Batch) Free() error {
	b.lockFolded()
	if err := b.checkLocked("free"); err != nil {
		b.mu.Unlock()
		return err
	}
	if b.mu.active > 0 {
		if b.e.cfg.EnableProgressWorker {
			b.deferFreeLocked() // deferfree.go
			b.mu.Unlock()
			b.deliver()
			return nil
		}
		n := b.mu.active
		b.mu.Unlock()
		return errorf(KindBusy, "free", b.name(), "%d group(s) still queued or running; wait or cancel first", n)
	}
	b.mu.freed = true
	quarantine := b.mu.unquiesced
	b.changedLocked()
	b.retiredLocked()
	lists := b.detachGroupsLocked() // group.go; and the free list's rest
	b.mu.Unlock()
	e := b.e
	if !quarantine {
		e.recycle(lists)
	}
	e.mu.Lock()
	delete(e.mu.batches, b.id)
	if quarantine {
		// The kernel may still complete into this batch's memory: its ID
		// is retired (IDs are never reused) but its capacity and its place
		// under max_allocated_batches stay consumed. Nothing in this
		// engine ever resolves an unquiesced group, so this is for good.
		e.mu.quarantined++
	} else {
		e.mu.reserved -= b.capacity
	}
	e.mu.Unlock()
	return nil
}

// SubmitAsync allocates a batch sized for reqs, submits them as one group
// and seals it. The caller owns the batch and must Free it.
func (e *Engine) SubmitAsync(op Op, target Target, reqs []Request, note *Notification, timeout time.Duration) (*Batch, error) {
	n := len(reqs)
	if n == 0 {
		n = 1 // let Submit report the empty request list
	}
	b, err := e.AllocateBatch(n)
	if err != nil {
		return nil, err
	}
	if _, err := b.Submit(op, target, reqs, note, timeout); err != nil {
		b.Free()
		return nil, err
	}
	b.Seal()
	return b, nil
}

// SubmitAndWait transfers reqs synchronously and returns the group report.
// The error is nil only when every request completed; otherwise it is the
// first failure, and the report tells the completed prefix.
func (e *Engine) SubmitAndWait(op Op, target Target, reqs []Request, timeout time.Duration) (Report, error) {
	if timeout <= 0 {
		timeout = e.cfg.DefaultTimeout.D()
	}
	b, err := e.SubmitAsync(op, target, reqs, nil, timeout)
	if err != nil {
		return Report{RequestIndex: 0}, err
	}
	// The worker's own cutoff is deadline + quiesce grace; wait that long.
	if _, err := b.Wait(timeout + e.cfg.QuiesceGrace.D() + time.Second); err != nil {
		rep := b.Submissions()[0]
		go func() { // free the reservation once the work has ended
			b.WaitContext(context.Background())
			b.Free()
		}()
		return rep, err
	}
	rep := b.Submissions()[0]
	b.Free()
	return rep, rep.Err
}
