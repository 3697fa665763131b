// batch.go owns the batch side of the mount: clone, submit, ctl, state,
// status, wait, tasks, error and free, each a thin step over the engine's
// Batch plus the two things the engine does not keep: the last error
// text of the batch's control operations, and which segment name each
// submission used.
//
// Invariants:
//   - A Batch is in the table from clone until a successful free; the
//     engine batch is freed only through Service.free, so "in the table"
//     and "live in the engine" agree (except after Shutdown, when the
//     engine is closed and every call answers KindClosed or KindNotFound).
//   - No lock is held while Wait blocks; waits on different batches are
//     independent.

package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// Batch is one allocated batch.
type Batch struct {
	ID      uint64
	seq     uint64
	created time.Time
	b       *engine.Batch
	idle    *time.Timer  // reclaims the batch if it stays unused (idle.go); nil for a txn's
	active  atomic.Int64 // UnixNano of the last write to submit or ctl, or of the clone (idle.go)
	owner   owner

	mu struct {
		sync.Mutex
		lastErr    string
		targets    map[int]string // first task index -> segment name
		used       bool           // a submission was accepted
		submitting int            // submits in progress
		reclaimed  bool           // freed by the idle timer
		freed      bool           // freed; listed until its deferred work drains
		// notices are the submissions' notifications by first task
		// (notify.go); nil until the first submission with notify.
		notices map[int]*notice
	}
}

// Seq is the object's unique sequence number (inode numbering).
func (bt *Batch) Seq() uint64 { return bt.seq }

// Owner is the uid and gid of the allocating caller; ok is false when
// the daemon allocated it for itself.
func (bt *Batch) Owner() (uid, gid uint32, ok bool) { return ownerIDs(bt.owner) }

// mine refuses c acting on bt unless it owns it (owner.go). Its error
// is recorded in c's view of /error, not in bt's error file, where a
// refused stranger would replace the owner's last error.
func (s *Service) mine(c *engine.Caller, bt *Batch, op string) error {
	if s.owns(c, bt.owner) {
		return nil
	}
	sc := bt.scope(op)
	sc.batch, sc.caller = nil, c
	return s.fail(sc, s.notYours(c, bt.name(), bt.owner))
}

// Created is the allocation time.
func (bt *Batch) Created() time.Time { return bt.created }

func (bt *Batch) name() string { return fmt.Sprintf("batches/%d", bt.ID) }

func (bt *Batch) scope(op string) scope {
	return scope{batch: bt, caller: bt.owner, op: op, name: bt.name(), logKey: "batch", logName: bt.ID}
}

func (bt *Batch) setErr(text string) {
	bt.mu.Lock()
	bt.mu.lastErr = text
	bt.mu.Unlock()
}

// maxFailureLines bounds the failed submissions the error file lists;
// status lists them all.
const maxFailureLines = 16

// Error is /ctl/batches/<N>/error, one line per failure, oldest first:
// the last failed control operation on the batch, and each submission
// that ended failed (when, which request failed first and why, how many
// of its tasks failed). Transfers fail after the write that submitted
// them returned, so without these lines a failed batch would have an
// empty error file.
func (bt *Batch) Error() []byte {
	bt.mu.Lock()
	last := bt.mu.lastErr
	bt.mu.Unlock()
	lines := failureLines(bt.b.Submissions(), bt.b.TaskStatuses())
	if last != "" {
		lines = append(lines, last)
	}
	if len(lines) == 0 {
		return nil
	}
	sort.Strings(lines) // each starts with its fixed-width UTC time
	var out []byte
	for _, l := range lines {
		out = append(append(out, l...), '\n')
	}
	return out
}

// failureLines renders each finished, failed submission as an error
// line: "TIME OP batches/N: KIND: submissions[i] requests[j] (task k):
// DETAIL (F of T tasks failed)". Past maxFailureLines one line counts
// the rest.
func failureLines(reports []engine.Report, tasks []engine.TaskStatus) []string {
	var lines []string
	more, lastMore := 0, time.Time{}
	for i, r := range reports {
		if !r.Done || r.Err == nil {
			continue
		}
		if len(lines) == maxFailureLines {
			more++
			if r.FailedAt.After(lastMore) {
				lastMore = r.FailedAt
			}
			continue
		}
		failed := 0
		for j := r.Tasks.First; j < r.Tasks.First+r.Tasks.Count && j < len(tasks); j++ {
			if tasks[j].State == engine.TaskFailed {
				failed++
			}
		}
		what := r.Err.Error()
		var ee *engine.Error
		if errors.As(r.Err, &ee) && ee.Err != nil {
			what = fmt.Sprintf("%s %s: %s: submissions[%d] %s", ee.Op, ee.Name, ee.Kind, i, ee.Err)
		}
		lines = append(lines, fmt.Sprintf("%s %s (%d of %d tasks failed)",
			r.FailedAt.UTC().Format(errorTimeLayout), what, failed, r.Tasks.Count))
	}
	if more > 0 {
		lines = append(lines, fmt.Sprintf("%s and %d more failed submissions, the last at this time: see status",
			lastMore.UTC().Format(errorTimeLayout), more))
	}
	return lines
}

// Batch returns the live batch with id, or nil.
func (s *Service) Batch(id uint64) *Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.batches[id]
}

// Batches returns the live batches in ID order.
func (s *Service) Batches() []*Batch {
	s.mu.Lock()
	out := make([]*Batch, 0, len(s.mu.batches))
	for _, bt := range s.mu.batches {
		out = append(out, bt)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// live fails with KindNotFound once the batch was freed.
func (s *Service) live(bt *Batch, op string) error {
	bt.mu.Lock()
	freed := bt.mu.freed
	bt.mu.Unlock()
	if freed || s.Batch(bt.ID) != bt {
		// The batch's own error file is gone with it: the text goes to
		// /error.
		sc := bt.scope(op)
		sc.batch = nil
		if bt.wasReclaimed() {
			return s.fail(sc, s.errReclaimed(bt))
		}
		return s.fail(sc, notFound("batch %d was freed", bt.ID))
	}
	return nil
}

// Clone allocates a batch with the default capacity for c, who owns it
// (/ctl/batches/clone).
func (s *Service) Clone(c *engine.Caller) (*Batch, error) {
	sc := scope{caller: c, op: "allocate", name: "batches"}
	if s.closing.Load() {
		return nil, s.fail(sc, errClosing())
	}
	bt, err := s.allocate(c, s.opts.DefaultBatchCapacity, true)
	if err != nil {
		return nil, s.fail(sc, err)
	}
	return bt, nil
}

// allocate allocates an engine batch owned by c and publishes it in the
// table; with idle, its idle timer runs (idle.go). Its error is not
// recorded.
func (s *Service) allocate(c *engine.Caller, capacity int, idle bool) (*Batch, error) {
	done, err := s.reserve(c, quota{batches: 1, slots: uint64(capacity)})
	if err != nil {
		return nil, err
	}
	defer done()
	b, err := s.e.AllocateBatch(capacity)
	if err != nil {
		return nil, err
	}
	bt := &Batch{ID: b.ID(), seq: s.nextSeq(), created: time.Now(), b: b, owner: c}
	bt.mu.targets = make(map[int]string, 1)
	bt.active.Store(bt.created.UnixNano())
	if idle {
		bt.idle = time.AfterFunc(s.opts.IdleBatchTimeout, func() { s.reclaimIdle(bt) })
	}
	s.mu.Lock()
	s.mu.batches[bt.ID] = bt
	s.mu.Unlock()
	if s.debug() {
		s.log.Debug("batch allocated", "op", "allocate", "batch", bt.ID, "capacity", b.Capacity())
	}
	return bt, nil
}

// SubmitWriter returns the handle state for one open of the batch's
// submit file by c.
func (s *Service) SubmitWriter(c *engine.Caller, bt *Batch) *DocWriter {
	return &DocWriter{doc: s.newDocument(c), onWrite: bt.touch,
		commit: func(doc []byte) error { return s.Submit(c, bt, doc) },
		fail:   func(err error) error { return s.fail(bt.scope("submit"), err) }}
}

// Submit parses a submission by c, resolves its names and submits it as
// one group. Nothing is appended unless every request is valid and the
// batch and everything it names are c's (owner.go).
func (s *Service) Submit(c *engine.Caller, bt *Batch, doc []byte) error {
	sc := bt.scope("submit")
	if s.closing.Load() {
		return s.fail(sc, errClosing())
	}
	if err := s.mine(c, bt, "submit"); err != nil {
		return err
	}
	if !bt.beginSubmit() {
		sc.batch, sc.caller = nil, c // its error file went with it: /error
		return s.fail(sc, s.errReclaimed(bt))
	}
	accepted := false
	defer func() { bt.endSubmit(accepted) }()
	if err := s.live(bt, "submit"); err != nil {
		return err
	}
	p, err := s.prepare(c, doc)
	if err != nil {
		return s.fail(sc, err)
	}
	if err := s.submitPrepared(bt, p); err != nil {
		return s.fail(sc, err)
	}
	accepted = true
	return nil
}

// prepared is a parsed submission with its names resolved: everything
// but the engine call, so nothing has changed yet.
type prepared struct {
	sub  *Submission
	seg  *Segment
	reqs []engine.Request
	opts engine.SubmitOptions
}

// prepare parses doc and resolves its names for c (submit and txn
// share it). Its error is not recorded.
func (s *Service) prepare(c *engine.Caller, doc []byte) (prepared, error) {
	sub, err := ParseSubmission(doc, s.opts.MaxDocumentBytes)
	if err != nil {
		return prepared{}, err
	}
	seg, reqs, regions, err := s.resolve(c, sub)
	if err != nil {
		return prepared{}, err
	}
	if len(sub.Notify) > 0 && !s.privileged(c) {
		// The receiver takes the sender to be this daemon, as proved with
		// its key: another user of the mount must not speak for it.
		return prepared{}, detail(engine.KindPermission, "notify: a notification is sent with the daemon's peer key; only root or the daemon's user (uid %d) may send one, not uid %d", s.euid, c.UID)
	}
	if len(sub.Notify) > 0 && seg.mem == nil && seg.remote == nil {
		return prepared{}, invalid("notify: target %q is a file segment; a notification rides a memory submission (mem://, or a peer's region) only", sub.Target)
	}
	opts, err := s.submitOptions(sub) // qos.go
	if err != nil {
		return prepared{}, err
	}
	// The engine resolves the addresses again when it submits: it must
	// find them in the regions checked here, not in whatever another
	// user registered at the same address after c's was unregistered.
	opts.Regions = regions
	// A script truncates a file and submits in its next command: it
	// gets ERANGE at submit, as for any range past the end, not a short
	// read afterwards.
	opts.SizeNow = true
	if s.afterResolve != nil {
		s.afterResolve()
	}
	return prepared{sub: sub, seg: seg, reqs: reqs, opts: opts}, nil
}

// submitPrepared appends p to bt as one group. Its error is not
// recorded.
func (s *Service) submitPrepared(bt *Batch, p prepared) error {
	n, err := s.newNotice(p.sub)
	if err != nil {
		return err
	}
	if n != nil {
		n.deadline = s.notifyDeadline(p.opts)
		s.watchGroups(bt) // before the submit: the group may end inside it
	}
	tr, err := bt.b.SubmitWith(p.sub.EngineOp(), p.seg.target(), p.reqs, nil, p.opts)
	if err != nil {
		if n != nil {
			s.dropNotice(n)
		}
		return err
	}
	bt.mu.Lock()
	bt.mu.targets[tr.First] = p.sub.Target
	bt.mu.Unlock()
	if n != nil {
		s.attach(bt, tr.First, n)
	}
	if s.debug() {
		s.log.Debug("submitted", "op", "submit", "batch", bt.ID, "segment", p.sub.Target, "task", tr.First, "count", tr.Count)
	}
	return nil
}

// resolve turns names into the engine's target and requests, refusing
// a segment or memory that is not c's. For an unprivileged c it also
// returns the regions the requests were found in (nil for a privileged
// c, who may use any).
func (s *Service) resolve(c *engine.Caller, sub *Submission) (*Segment, []engine.Request, []*engine.Region, error) {
	seg := s.Segment(sub.Target)
	if seg == nil {
		return nil, nil, nil, notFound("target %q: no such segment; open it through segments/open", sub.Target)
	}
	if !s.owns(c, seg.owner) {
		return nil, nil, nil, s.notYours(c, fmt.Sprintf("target %q: segment", sub.Target), seg.owner)
	}
	rv := resolver{s: s, c: c, priv: s.privileged(c)}
	reqs := make([]engine.Request, len(sub.Requests))
	for i := range sub.Requests {
		r := &sub.Requests[i]
		t, _ := ParseTransport(r.Transport) // validated
		er := engine.Request{Transport: t, TargetOffset: uint64(r.TargetOffset)}
		if len(r.Elements) == 0 {
			addr, err := rv.localAddress(r.Memory, r.Offset, r.Address, uint64(*r.Length))
			if err != nil {
				return nil, nil, nil, fmt.Errorf("requests[%d]: %w", i, err)
			}
			er.Address, er.Length = addr, uint64(*r.Length)
		} else {
			er.Elements = make([]engine.Element, len(r.Elements))
			for j := range r.Elements {
				el := &r.Elements[j]
				if el.Padding != nil {
					er.Elements[j] = engine.Pad(uint64(*el.Padding))
					continue
				}
				addr, err := rv.localAddress(el.Memory, el.Offset, el.Address, uint64(*el.Length))
				if err != nil {
					return nil, nil, nil, fmt.Errorf("requests[%d].elements[%d]: %w", i, j, err)
				}
				er.Elements[j] = engine.Range(addr, uint64(*el.Length))
			}
		}
		reqs[i] = er
	}
	if rv.priv {
		return seg, reqs, nil, nil
	}
	return seg, reqs, append(make([]*engine.Region, 0, len(rv.used)), rv.used...), nil // non-nil: limits the engine
}

// resolver resolves one submission's memory references for caller c.
type resolver struct {
	s    *Service
	c    *engine.Caller
	priv bool
	own  []*Memory        // c's registrations, loaded at the first raw address
	read bool             // own is loaded
	used []*engine.Region // the regions the requests lie in, each once
}

// use notes that a request lies in r.
func (rv *resolver) use(r *engine.Region) {
	if !slices.Contains(rv.used, r) {
		rv.used = append(rv.used, r)
	}
}

// localAddress resolves memory+offset against the memory table for c.
// A raw address is checked by the engine, and, for an unprivileged c,
// must lie in one of c's own registrations.
func (rv *resolver) localAddress(memory *string, offset *config.Size, address *Address, length uint64) (uint64, error) {
	if memory == nil {
		return uint64(*address), rv.ownAddress(uint64(*address), length)
	}
	m := rv.s.Memory(*memory)
	if m == nil {
		return 0, notFound("memory %q: no such memory region; register it through memory/register", *memory)
	}
	if !rv.priv && (m.owner == nil || m.owner.UID != rv.c.UID) {
		return 0, rv.s.notYours(rv.c, fmt.Sprintf("memory %q", *memory), m.owner)
	}
	var off uint64
	if offset != nil {
		off = uint64(*offset)
	}
	end := off + length
	if end < off {
		return 0, invalid("memory %q: offset %d + length %d overflows", *memory, off, length)
	}
	if end > m.Len() {
		return 0, detail(engine.KindRange, "memory %q: offset %d + length %d = %d is beyond its %d bytes", *memory, off, length, end, m.Len())
	}
	rv.use(m.region)
	return m.region.BaseAddress() + off, nil
}

// Ctl runs one ctl command (see ctl.go) for caller, who must own bt.
func (s *Service) Ctl(caller *engine.Caller, bt *Batch, text string) error {
	if err := s.mine(caller, bt, "ctl"); err != nil {
		return err
	}
	bt.touch()
	c, err := ParseCtl(text)
	if err != nil {
		return s.fail(bt.scope("ctl"), err)
	}
	op := string(c.Verb)
	if err := s.live(bt, op); err != nil {
		return err
	}
	switch c.Verb {
	case CtlSeal:
		err = bt.b.Seal()
	case CtlCancel:
		err = bt.b.Cancel(c.Task)
	case CtlCancelAll:
		err = bt.b.CancelAll()
	case CtlProgress:
		// One explicit step (engine Progress): starts one transport
		// attempt waiting after a failure; the per-batch worker drives
		// everything else by itself.
		_, err = bt.b.Progress()
	case CtlFree:
		return s.free(bt)
	}
	if err != nil {
		return s.fail(bt.scope(op), err)
	}
	return nil
}

// FreeBatch frees the batch with id for c (rmdir): KindBusy while work
// is queued or running, KindNotFound when there is no such batch,
// KindPermission when it is not c's.
func (s *Service) FreeBatch(c *engine.Caller, id uint64) error {
	bt := s.Batch(id)
	if bt == nil {
		return s.fail(scope{caller: c, op: "free", name: fmt.Sprintf("batches/%d", id), logKey: "batch", logName: id}, notFound("no batch %d", id))
	}
	if err := s.mine(c, bt, "free"); err != nil {
		return err
	}
	return s.free(bt)
}

func (s *Service) free(bt *Batch) error { return s.settleFreed(bt, bt.b.Free()) }

// settleFreed finishes a free whose engine call returned err: it records
// a failure, or marks the batch freed and drops it from the table once
// its work has drained.
func (s *Service) settleFreed(bt *Batch, err error) error {
	if err != nil {
		return s.fail(bt.scope("free"), err)
	}
	if bt.idle != nil {
		bt.idle.Stop()
	}
	bt.mu.Lock()
	bt.mu.freed = true
	bt.mu.Unlock()
	// A deferred free (engine.enable_progress_worker) returns while the
	// batch's work still runs: its directory stays listed, answering
	// ENOENT ("batch was freed"), until the work drains.
	retired := bt.b.Retired()
	select {
	case <-retired:
		s.forget(bt)
	default:
		s.log.Debug("batch free deferred until its work drains", "op", "free", "batch", bt.ID)
		go func() {
			select {
			case <-retired:
			case <-s.stopCtx.Done():
			}
			s.forget(bt)
		}()
	}
	return nil
}

// forget drops a freed batch from the table.
func (s *Service) forget(bt *Batch) {
	s.mu.Lock()
	if s.mu.batches[bt.ID] == bt {
		delete(s.mu.batches, bt.ID)
	}
	s.mu.Unlock()
	if s.debug() {
		s.log.Debug("batch freed", "op", "free", "batch", bt.ID)
	}
}

// State is /ctl/batches/<N>/state: open, completed, failed or cancelled.
func (s *Service) State(bt *Batch) ([]byte, error) {
	if err := s.live(bt, "state"); err != nil {
		return nil, err
	}
	return []byte(bt.b.Status().String() + "\n"), nil
}

// Status is /ctl/batches/<N>/status. The state is read first: when it is
// terminal, every task and submission read after it is final too.
func (s *Service) Status(bt *Batch) ([]byte, error) {
	if err := s.live(bt, "status"); err != nil {
		return nil, err
	}
	snap := BatchSnapshot{ID: bt.ID, State: bt.b.Status(), Sealed: bt.b.Sealed(), Capacity: bt.b.Capacity()}
	snap.Tasks = bt.b.TaskStatuses()
	snap.Reports = bt.b.Submissions()
	bt.mu.Lock()
	snap.Targets = make(map[int]string, len(bt.mu.targets))
	for k, v := range bt.mu.targets {
		snap.Targets[k] = v
	}
	bt.mu.Unlock()
	snap.Notify = bt.notices()
	return marshal(RenderStatus(snap)), nil
}

// Wait blocks until the sealed batch is terminal and returns its state
// word. It ends early, changing nothing, when ctx is cancelled (the
// caller was interrupted: the error wraps context.Canceled, errno EINTR,
// not recorded) or when Shutdown wakes it (KindClosed). Before seal it
// fails with KindInvalid.
func (s *Service) Wait(ctx context.Context, bt *Batch) ([]byte, error) {
	if err := s.live(bt, "wait"); err != nil {
		return nil, err
	}
	// Already terminal (a small transfer often ends within its submit):
	// no context to set up. Terminal implies sealed.
	if st := bt.b.Status(); st.Terminal() {
		return []byte(st.String() + "\n"), nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.stopCtx, cancel)
	defer stop()
	st, err := bt.b.WaitContext(wctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("wait %s: interrupted: %w", bt.name(), ctx.Err())
		case s.stopCtx.Err() != nil:
			return nil, s.fail(bt.scope("wait"), errClosing())
		}
		return nil, s.fail(bt.scope("wait"), err)
	}
	if st == engine.StateCancelled && s.stopCtx.Err() != nil {
		// Shutdown's wake and the engine's Close (which cancels what has
		// not started) race to end this wait; a waiter still blocked
		// after the drain gets ESHUTDOWN either way, as documented.
		return nil, s.fail(bt.scope("wait"), errClosing())
	}
	return []byte(st.String() + "\n"), nil
}

// TaskCount is the number of tasks appended so far (0 once freed).
func (s *Service) TaskCount(bt *Batch) int {
	if s.Batch(bt.ID) != bt {
		return 0
	}
	return bt.b.TaskCount()
}

// Task renders /ctl/batches/<N>/tasks/<i>.
func (s *Service) Task(bt *Batch, i int) ([]byte, error) {
	if err := s.live(bt, "status"); err != nil {
		return nil, err
	}
	t, err := bt.b.TaskStatus(i)
	if err != nil {
		return nil, s.fail(bt.scope("status"), err)
	}
	return marshal(RenderTask(t)), nil
}

// ownAddress refuses an unprivileged c a raw range [addr, addr+length)
// that is not inside one of its own registrations: another user's
// memory is reached by address as well as by name.
func (rv *resolver) ownAddress(addr, length uint64) error {
	if rv.priv {
		return nil
	}
	if !rv.read {
		for _, m := range rv.s.Memories() {
			if m.owner != nil && m.owner.UID == rv.c.UID {
				rv.own = append(rv.own, m)
			}
		}
		rv.read = true
	}
	for _, m := range rv.own {
		base := m.region.BaseAddress()
		if addr >= base && length <= m.Len() && addr-base <= m.Len()-length {
			rv.use(m.region)
			return nil
		}
	}
	return detail(engine.KindPermission, "address 0x%x + length %d is not inside a memory region of uid %d; name the memory instead", addr, length, rv.c.UID)
}
