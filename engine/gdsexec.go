// gdsexec.go owns the GDS path: device memory <-> file through cuFile.
//
// cuFile is loaded when a submission first considers it (never at New,
// segment open or info). Each segment entry gets one cuFile handle on its
// O_DIRECT fd, registered on first use and deregistered when the entry
// closes. Device regions are registered with cuFile on first GDS use; a
// failed registration is counted and leaves the region to staging
// (an explicit gds request for it is Unavailable).
//
// A registration that failed uncertainly (ErrUncertain), a failed
// deregistration and a failed handle destroy keep what cuFile may still
// reference: the device allocation is never freed, the O_DIRECT fd never
// closed, and the call is never retried (counted in GDSStats.Retained).
//
// A job's units are slices of at most 16 MiB (gdsSlice) of one device
// range; gds_batch_depth lanes shared by every batch (lanepool.go) run
// them, each a blocking cuFile call on its own goroutine. A call that does not return by deadline +
// quiesce_grace leaves its units unquiesced: the group keeps its loans and
// charges, and the handle is never deregistered. backends/gds also offers
// cuFile's native batch and a parallel batch; the engine drives calls
// itself so that each unit resolves, and each cutoff applies, on its own
// (and the native batch measured slower in compatibility mode).

package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// gdsSlice is the largest cuFile call (the spec splits requests at
// 16 MiB).
const gdsSlice = 16 << 20

type gdsState struct {
	b         GDS
	probeOnce sync.Once
	probeErr  error       // written once inside probeOnce
	probed    atomic.Bool // set after probeOnce: readers without the Once see probeErr through it

	mu      sync.Mutex
	files   map[uint64]GDSFile // by the entry's direct fd key
	regs    map[uint64]error   // device region key -> registration result
	busy    map[uint64]int     // calls in flight per file key
	refused map[uint64]error   // entries cuFile would not register

	regFailures atomic.Uint64
	retained    atomic.Uint64
	reads       atomic.Uint64
	writes      atomic.Uint64
	unquiesced  atomic.Uint64
}

// GDSStats reports the cuFile path.
type GDSStats struct {
	// Mode is "unavailable" (no backend or disabled), "unprobed" (not
	// loaded yet), or the driver's policy once probed.
	Mode                       string `json:"mode"`
	ProbeError                 string `json:"probe_error,omitempty"`
	Files                      int    `json:"files"`
	BufferRegistrations        int    `json:"buffer_registrations"`
	BufferRegistrationFailures uint64 `json:"buffer_registration_failures"`
	Reads                      uint64 `json:"reads"`
	Writes                     uint64 `json:"writes"`
	Unquiesced                 uint64 `json:"unquiesced_calls"`
	// Retained counts device allocations and file descriptors kept for
	// good because cuFile may still reference them (an uncertain
	// registration, a failed deregistration or handle destroy).
	Retained uint64 `json:"retained"`
}

// gdsReady probes cuFile once.
func (e *Engine) gdsReady() error {
	if e.gds.b == nil {
		return errors.New("cuFile is not available in this build")
	}
	if err := e.gpuReady("", ""); err != nil {
		return err
	}
	e.gds.probeOnce.Do(func() {
		e.gds.probeErr = e.gds.b.Probe()
		e.gds.probed.Store(true)
	})
	if e.gds.probeErr != nil {
		return e.gds.probeErr
	}
	if e.cfg.GDSRequireNative && e.gds.b.Mode() != "native" {
		return fmt.Errorf("gds_require_native is set and cuFile runs in mode %s", e.gds.b.Mode())
	}
	return nil
}

func (e *Engine) gdsMode() string {
	switch {
	case e.gds.b == nil:
		return "unavailable"
	case !e.gds.probed.Load():
		return "unprobed" // Stats never probes
	case e.gds.probeErr != nil:
		return "unavailable"
	}
	return e.gds.b.Mode()
}

func (e *Engine) gdsStats() GDSStats {
	s := GDSStats{Mode: e.gdsMode(), BufferRegistrationFailures: e.gds.regFailures.Load(),
		Reads: e.gds.reads.Load(), Writes: e.gds.writes.Load(), Unquiesced: e.gds.unquiesced.Load(), Retained: e.gds.retained.Load()}
	if e.gds.probed.Load() && e.gds.probeErr != nil {
		s.ProbeError = e.gds.probeErr.Error()
	}
	e.gds.mu.Lock()
	s.Files = len(e.gds.files)
	for _, err := range e.gds.regs {
		if err == nil {
			s.BufferRegistrations++
		}
	}
	e.gds.mu.Unlock()
	return s
}

// gdsRegister registers device region r with cuFile once; the result is
// cached (a failure leaves r to staging).
func (e *Engine) gdsRegister(r *Region) error {
	e.gds.mu.Lock()
	defer e.gds.mu.Unlock()
	if e.gds.regs == nil {
		e.gds.regs = map[uint64]error{}
	}
	if err, ok := e.gds.regs[r.key]; ok {
		return err
	}
	// Unregister marks the region closed before it deregisters (under
	// gds.mu, which this holds): a region closed by now is never
	// registered, and one closed after this check is deregistered by its
	// Unregister once this returns.
	r.mu.Lock()
	closed := r.mu.closed
	r.mu.Unlock()
	if closed {
		return fmt.Errorf("%s was unregistered", r.name())
	}
	err := e.gds.b.RegisterBuffer(r.dev.Device(), r.BaseAddress(), r.Len())
	if err != nil {
		e.gds.regFailures.Add(1)
		err = fmt.Errorf("cuFile buffer registration of %s failed: %w", r.name(), err)
	}
	e.gds.regs[r.key] = err
	return err
}

// gdsForgetRegion deregisters r before its memory is freed. It returns
// why r's memory must never be freed (cuFile may still reference it), or
// nil.
func (e *Engine) gdsForgetRegion(r *Region) error {
	if e.gds.b == nil || r.dev == nil {
		return nil
	}
	e.gds.mu.Lock()
	err, ok := e.gds.regs[r.key]
	delete(e.gds.regs, r.key)
	e.gds.mu.Unlock()
	switch {
	case !ok:
		return nil
	case errors.Is(err, ErrUncertain):
		// Never deregistered: whether there is a registration to undo
		// is what is unknown.
	case err != nil:
		return nil // a clean failure registered nothing
	default:
		if err = e.gds.b.DeregisterBuffer(r.dev.Device(), r.BaseAddress()); err == nil {
			return nil
		}
		err = fmt.Errorf("cuFile deregistration of %s failed: %w", r.name(), err)
	}
	e.gds.retained.Add(1)
	e.log.Error("device memory retained for good", "region", r.name(), "err", err)
	return err
}

// gdsHandle returns the entry's cuFile handle, registering it on first
// use; a refusal is cached, so the entry stays on staging.
func (e *Engine) gdsHandle(ent *segEntry) (GDSFile, error) {
	e.gds.mu.Lock()
	defer e.gds.mu.Unlock()
	if e.gds.files == nil {
		e.gds.files, e.gds.busy, e.gds.refused = map[uint64]GDSFile{}, map[uint64]int{}, map[uint64]error{}
	}
	if err, ok := e.gds.refused[ent.direct.Key]; ok {
		return nil, err
	}
	f, ok := e.gds.files[ent.direct.Key]
	if !ok {
		var err error
		if f, err = e.gds.b.OpenFile(ent.direct.FD); err != nil {
			err = fmt.Errorf("cuFile refused %s: %w", ent.path, err)
			e.gds.refused[ent.direct.Key] = err
			return nil, err
		}
		e.gds.files[ent.direct.Key] = f
	}
	return f, nil
}

// gdsCall counts a cuFile call in flight on ent's handle; gdsDone ends
// it, when the call returns and before its unit resolves. A segment
// close drains its groups first, so the count matters only for a call
// that never returned: its handle is then never closed. (Counting the
// whole job instead, until after its last unit resolved, let a close
// that followed the batch's completion find the handle busy and leave it
// registered for good: TestRoutes, under load.)
func (e *Engine) gdsCall(ent *segEntry) {
	e.gds.mu.Lock()
	e.gds.busy[ent.direct.Key]++
	e.gds.mu.Unlock()
}

func (e *Engine) gdsDone(ent *segEntry) {
	e.gds.mu.Lock()
	e.gds.busy[ent.direct.Key]--
	e.gds.mu.Unlock()
}

// gdsForgetFile deregisters the entry's handle before its fds close.
// A handle with a call still in flight (unquiesced) is never closed. It
// reports whether the entry's O_DIRECT fd must stay open for good (the
// handle's destroy failed: cuFile may still use the fd).
func (e *Engine) gdsForgetFile(ent *segEntry) (keepDirect bool) {
	if e.gds.b == nil {
		return false
	}
	e.gds.mu.Lock()
	f, ok := e.gds.files[ent.direct.Key]
	busy := e.gds.busy[ent.direct.Key] > 0
	if ok && !busy {
		delete(e.gds.files, ent.direct.Key)
		delete(e.gds.busy, ent.direct.Key)
	}
	delete(e.gds.refused, ent.direct.Key)
	e.gds.mu.Unlock()
	if ok && !busy {
		if err := f.Close(); err != nil {
			e.gds.retained.Add(1)
			e.log.Error("cuFile handle destroy failed; its O_DIRECT fd stays open for good", "segment", ent.path, "err", err)
			return true
		}
	}
	return false
}

// gdsExec is the engine-wide cuFile executor: gds_batch_depth lanes,
// each making one blocking call at a time.
type gdsExec struct{ *lanePool }

func newGDSExec(e *Engine) gdsExec {
	return gdsExec{newLanePool(e.cfg.GDSBatchDepth, func(x *offRing, k int) {
		f, err := e.gdsHandle(x.g.ent)
		if err != nil {
			x.resolve(k, 0, wrap(KindIO, x.g.op.String(), x.g.seg.name(), fmt.Errorf("cuFile handle: %w", err)))
			return
		}
		e.gdsUnit(x, f, k)
	})}
}

func (gdsExec) cut() (uint64, bool) { return gdsSlice, true }

func (gdsExec) path() string { return "gds" }

func (gdsExec) transport() TransportKind { return TransportGDS }

// gdsUnit runs one cuFile call. One that does not return by deadline +
// quiesce_grace is left running on its own goroutine (its handle stays
// busy for good) and the lane goes on with other units.
func (e *Engine) gdsUnit(x *offRing, f GDSFile, k int) {
	g := x.g
	u := &x.units[k]
	if err := x.startable(k); err != nil {
		x.resolve(k, 0, err)
		return
	}
	p := u.pieces[0]
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	if g.op == OpWrite {
		x.markSubmitted(k)
	}
	e.gdsCall(g.ent)
	go func() {
		var r result
		defer func() { done <- r }()
		defer e.gdsDone(g.ent)
		if g.op == OpRead {
			r.n, r.err = f.Read(p.dev, p.addr, u.n, u.off)
			e.gds.reads.Add(1)
		} else {
			r.n, r.err = f.Write(p.dev, p.addr, u.n, u.off)
			e.gds.writes.Add(1)
		}
	}()
	cut := time.NewTimer(time.Until(g.deadline.Add(e.cfg.QuiesceGrace.D())))
	defer cut.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			x.resolve(k, 0, unitErr(g, u, KindIO, r.err))
		} else {
			x.resolve(k, uint64(max(r.n, 0)), nil)
		}
	case <-cut.C:
		e.gds.unquiesced.Add(1)
		x.mu.Lock()
		x.undrained = true
		x.mu.Unlock()
		x.resolve(k, 0, unitErr(g, u, KindUnquiesced, fmt.Errorf("cuFile call did not return %s after the deadline; its memory and file stay retained", e.cfg.QuiesceGrace.D())))
		for j := x.take(); j >= 0; j = x.take() {
			x.resolve(j, 0, unitErr(g, &x.units[j], KindTimeout, errors.New("deadline passed before these bytes started")))
		}
	}
}
