// mappedexec.go owns the mapped executor: device memory <-> a file on
// tmpfs, copied by the GPU straight from and into the file's own pages,
// which the engine maps shared and registers for DMA once
// (cuMemHostRegister), with no staging read or write in between.
//
// Why: staging reads each unit into a pinned chunk and only then copies
// it, so at a given number of clients a unit lives for the read plus the
// copy. Measured on the H200 (docs/performance.md): KV groups of 128 KiB
// from tmpfs into cuda:0 at 16 clients reached 19-22 GB/s through
// staging against 35 GB/s into DRAM, while 128 KiB copies from a
// registered tmpfs mapping run at 49 GB/s (16 streams, 16 per batch).
// A tmpfs file's pages are memory already: registered, a unit is one DMA.
//
// Mappings: one per segment entry, of the whole file at its size then,
// made by the first lane that needs it (registration pins every page:
// about 160 ms per GiB on the H200), kept while the entry is open, and
// counted against max_mapped_bytes. A file that does not fit, or whose
// mapping was refused, stays on staging.
//
// Invariants:
//   - Only DMA touches a mapping: the engine never reads or writes it
//     with the CPU, so a file truncated under it cannot fault the daemon.
//   - A take copies only pages that are still the file's. Registration
//     pins the pages the mapping had; a truncation removes the file's
//     pages past its new size (pinned ones stay alive, no longer the
//     file's) and unmaps them from every mapping. So before each take the
//     lane fstats the file: unchanged size and ctime since the mapping was
//     last checked mean nothing was truncated; otherwise the mapping's
//     pages are checked present (/proc/self/pagemap), and a mapping with
//     a page gone, or smaller than the take needs, is retired and a new
//     one made. (The mapping is populated at mmap, so every page starts
//     present, and the engine never touches it again.)
//   - A retired mapping is unregistered and unmapped once no take uses
//     it; one behind a copy of unknown outcome never is (the GPU may
//     still use its pages), nor is its stream pooled again.
//   - A lane copies a take (up to mappedTake units of one job, at most
//     mappedTakeBytes) with one batch call and one event, and waits for
//     it no later than the earliest cut (deadline + quiesce_grace) of
//     its units: past that they are unquiesced and the mapping is kept.
//   - A WRITE unit is marked submitted before its copy is enqueued, so a
//     failed one is never retried elsewhere; one that never got that far
//     (no mapping, no stream) was not, and may be.

package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orbitefs/orbitefs/internal/hostmem"
)

const (
	// mappedTake and mappedTakeBytes bound what one lane copies with one
	// batch call: a 16-group KV batch of 128 KiB in one take, and a large
	// load spread over the lanes in 4 MiB units.
	mappedTake      = 16
	mappedTakeBytes = 4 << 20
	// mappedUnit is the largest unit of a mapped job.
	mappedUnit = 4 << 20
)

// mappedState is the engine's mapped files.
type mappedState struct {
	mu    sync.Mutex
	bytes uint64 // mapped and registered, every entry's (max_mapped_bytes)

	pagemapOnce sync.Once
	pagemapPath string   // "" outside tests: /proc/self/pagemap
	pagemap     *os.File // or nil
	pagemapErr  error

	takes    atomic.Uint64
	units    atomic.Uint64
	remaps   atomic.Uint64
	retained atomic.Uint64
	refused  atomic.Uint64
}

// MappedStats reports the mapped executor.
type MappedStats struct {
	Files    int    `json:"files"`    // entries with a live mapping
	Bytes    uint64 `json:"bytes"`    // mapped and registered
	Takes    uint64 `json:"takes"`    // batch calls (each up to 16 units)
	Units    uint64 `json:"units"`    // units copied
	Remaps   uint64 `json:"remaps"`   // mappings retired because the file changed under them
	Refused  uint64 `json:"refused"`  // mappings the driver or the budget refused
	Retained uint64 `json:"retained"` // mappings kept for good behind an unknown outcome
}

// entryMap is one entry's mapping state, under its own lock: lanes of
// other entries never wait for it. Route selection and Stats read only
// the atomics, so neither a submission nor the engine lock ever waits
// for a registration in progress.
type entryMap struct {
	mu    sync.Mutex
	cur   *fileMap
	err   error  // mapping refused for good: staging from now on
	size  uint64 // the file's size and ctime when cur was last checked
	ctime unix.Timespec

	refused atomic.Bool // err is set
	mapped  atomic.Bool // cur is set
}

// fileMap is one mapping of a file, registered for DMA.
type fileMap struct {
	b       []byte
	unpin   func() error
	users   int  // takes in flight (entryMap.mu)
	retired bool // superseded or its entry closed
	kept    bool // behind a copy of unknown outcome: never unmapped
}

func (m *fileMap) addr() uint64 { return hostmem.AddrOf(m.b) }

// mappedEligible reports whether request r (device memory only, no
// padding, unspec) of entry ent may take the mapped route: a tmpfs file,
// mapping on, a GPU backend, no refusal so far, and the file within
// max_mapped_bytes. It makes no system call.
func (e *Engine) mappedEligible(ent *segEntry, r *Request, m reqMemory) bool {
	if !e.cfg.MappedFiles || e.gpu.b == nil || r.Transport != TransportUnspec || m.host || m.padding || !m.device ||
		ent.fsType != "tmpfs" || ent.blocking {
		return false
	}
	// A shared mapping needs a readable fd: a write-only segment's mmap
	// fails. A read-only one needs a backend that registers read-only
	// memory.
	if !ent.perm.allows(OpRead) {
		return false
	}
	if _, ok := e.gpu.b.(ReadOnlyPinner); !ok && !ent.perm.allows(OpWrite) {
		return false
	}
	em := &ent.fmap
	if em.refused.Load() {
		return false
	}
	if em.mapped.Load() {
		return true
	}
	e.mapped.mu.Lock()
	defer e.mapped.mu.Unlock()
	return e.mapped.bytes+pageRound(ent.sizeSeen.Load()) <= e.cfg.MappedLimit()
}

func pageRound(n uint64) uint64 {
	p := uint64(os.Getpagesize())
	return (n + p - 1) / p * p
}

// mappedExec is the engine-wide mapped executor.
type mappedExec struct {
	*lanePool
	e *Engine
}

func newMappedExec(e *Engine) mappedExec {
	x := mappedExec{e: e}
	// A few lanes: each take is one batch call whose copies the GPU's
	// copy engines run together; 16 streams of 16 x 128 KiB batches
	// measured 49 GB/s, one stream 35.
	x.lanePool = newLanePool(min(runtime.GOMAXPROCS(0), 8), e.mappedTake)
	return x
}

func (mappedExec) cut() (uint64, bool) { return mappedUnit, true }

func (mappedExec) path() string { return "mapped" }

func (mappedExec) transport() TransportKind { return TransportMapped }

// mappedTake copies unit k of job x and up to mappedTake-1 more of the
// same job with one batch call and one event.
func (e *Engine) mappedTake(x *offRing, k int) {
	g := x.g
	ks := []int{k}
	bytes := x.units[k].n
	for len(ks) < mappedTake {
		j := x.take()
		if j < 0 {
			break
		}
		ks = append(ks, j)
		if bytes += x.units[j].n; bytes >= mappedTakeBytes {
			break
		}
	}
	// Units past their deadline or behind a failed WRITE unit never start.
	live := ks[:0]
	for _, j := range ks {
		if err := x.startable(j); err != nil {
			x.resolve(j, 0, err)
			continue
		}
		live = append(live, j)
	}
	ks = live
	if len(ks) == 0 {
		return
	}
	fm, size, err := e.mapFor(g.ent, x, ks)
	if err != nil {
		for _, j := range ks {
			x.resolve(j, 0, unitErr(g, &x.units[j], KindUnavailable, err))
		}
		return
	}
	// Mapping a file registers every page (seconds for a large one): a
	// unit whose deadline passed meanwhile does not start either.
	if time.Now().After(g.deadline) {
		e.releaseMap(g.ent, fm)
		for _, j := range ks {
			x.resolve(j, 0, unitErr(g, &x.units[j], KindTimeout, errors.New("deadline passed before these bytes started")))
		}
		return
	}
	// The units may lie on several devices (a vector's elements, or a
	// job's requests on different GPUs): one batch call per device.
	var parts []takePart
	for len(ks) > 0 {
		dev := x.units[ks[0]].pieces[0].dev
		var one, rest []int
		for _, j := range ks {
			if x.units[j].pieces[0].dev == dev {
				one = append(one, j)
			} else {
				rest = append(rest, j)
			}
		}
		e.mapped.takes.Add(1)
		parts = append(parts, e.copyTake(x, one, fm, size)...)
		ks = rest
	}
	// Let go of fm before the units resolve: once the group reports, its
	// segment may close, and that unmaps the file at once.
	e.releaseMap(g.ent, fm)
	for _, pt := range parts {
		x.resolve(pt.k, pt.n, pt.err)
	}
}

// takePart is one unit's outcome in a take.
type takePart struct {
	k   int
	n   uint64 // bytes moved
	err error
}

// copyTake moves the units ks of x, all on one device, between device
// memory and mapping fm of a file of size bytes, and returns their
// outcomes for the caller to resolve once it let go of fm; units of
// unknown outcome keep fm for good and mark x undrained first.
func (e *Engine) copyTake(x *offRing, ks []int, fm *fileMap, size uint64) []takePart {
	g := x.g
	write := g.op == OpWrite
	dev := x.units[ks[0]].pieces[0].dev
	parts := make([]takePart, 0, len(ks))
	var cs []Copy
	for _, j := range ks {
		u := &x.units[j]
		p := u.pieces[0]
		n := u.n
		if u.off >= size {
			n = 0
		} else if u.off+n > size {
			n = size - u.off
		}
		pt := takePart{k: j, n: n}
		if n < u.n && write {
			pt.n, pt.err = 0, unitErr(g, u, KindRange, fmt.Errorf("the file shrank to %d bytes under the transfer", size))
		}
		parts = append(parts, pt)
		if pt.err != nil || pt.n == 0 {
			continue
		}
		host := fm.addr() + u.off
		if write {
			cs = append(cs, Copy{Dst: host, Src: p.addr, N: pt.n})
		} else {
			cs = append(cs, Copy{Dst: p.addr, Src: host, N: pt.n})
		}
	}
	if len(cs) == 0 {
		return parts
	}
	st, err := e.getStream(dev)
	if err != nil {
		for i := range parts {
			pt := &parts[i]
			if pt.err == nil {
				pt.err = unitErr(g, &x.units[pt.k], KindIO, err)
			}
			pt.n = 0
		}
		return parts
	}
	// A WRITE unit may change the file from its enqueue on (a refused
	// batch may have enqueued some of its copies): never retried since.
	if write {
		for _, pt := range parts {
			if pt.err == nil && pt.n > 0 {
				x.markSubmitted(pt.k)
			}
		}
	}
	// A refused batch is retried copy by copy; a copy refused alone fails
	// its unit (its bytes never moved; the event below confirms the rest).
	refused := map[uint64]error{}
	if err := enqueueCopies(st, cs, !write); err != nil {
		for _, c := range cs {
			if err := enqueueCopies(st, []Copy{c}, !write); err != nil {
				refused[c.Dst] = err
			}
		}
	}
	ev, err := st.Record()
	var done bool
	if err == nil {
		done, err = waitCut(ev, x, ks, e.cfg.QuiesceGrace.D())
	}
	if !done || err != nil {
		// The copies may still run: their memory, the mapping and the
		// stream stay out of use for good.
		x.mu.Lock()
		x.undrained = true
		x.mu.Unlock()
		e.keepMap(g.ent, fm)
		kind, why := KindUnquiesced, fmt.Sprintf("no completion %s after the deadline; its memory and file stay retained", e.cfg.QuiesceGrace.D())
		if err != nil {
			kind, why = KindIO, fmt.Sprintf("device copy: %v", err)
		}
		for i := range parts {
			pt := &parts[i]
			if pt.err == nil {
				pt.err = unitErr(g, &x.units[pt.k], kind, errors.New(why))
			}
			pt.n = 0
		}
		return parts
	}
	ev.Close()
	e.putStream(dev, st)
	for i := range parts {
		pt := &parts[i]
		u := &x.units[pt.k]
		if pt.err == nil && pt.n > 0 {
			dst := u.pieces[0].addr
			if write {
				dst = fm.addr() + u.off
			}
			if rerr, ok := refused[dst]; ok {
				pt.n, pt.err = 0, unitErr(g, u, KindIO, fmt.Errorf("%s copy: %w", direction(!write), rerr))
			}
		}
		if pt.err == nil {
			e.mapped.units.Add(1)
		}
	}
	return parts
}

// waitCut waits for ev, never past the earliest cut of units ks: a copy
// that never completes leaves its waiter behind (the units end
// unquiesced), as a cuFile call does.
func waitCut(ev Event, x *offRing, ks []int, grace time.Duration) (bool, error) {
	if done, err := ev.Done(); done || err != nil {
		return done, err
	}
	res := make(chan error, 1)
	go func() { res <- ev.Wait() }()
	t := time.NewTimer(time.Until(x.g.deadline.Add(grace)))
	defer t.Stop()
	select {
	case err := <-res:
		return err == nil, err
	case <-t.C:
		return false, nil
	}
}

// mapFor returns the mapping the units ks of x copy through, taking a
// user reference, and the file's size now; no mapping (nil) when every
// unit lies past the file's end (nothing to copy). It checks the file first
// (size and ctime; present pages when either moved) and (re)maps it when
// it has no mapping, a page of the mapping is no longer the file's, or
// the units reach past the mapping.
func (e *Engine) mapFor(ent *segEntry, x *offRing, ks []int) (*fileMap, uint64, error) {
	start, end := x.units[ks[0]].off, uint64(0)
	for _, j := range ks {
		start = min(start, x.units[j].off)
		end = max(end, x.units[j].off+x.units[j].n)
	}
	em := &ent.fmap
	em.mu.Lock()
	defer em.mu.Unlock()
	if em.err != nil {
		return nil, 0, em.err
	}
	var st unix.Stat_t
	if err := unix.Fstat(ent.buffered.FD, &st); err != nil {
		return nil, 0, os.NewSyscallError("fstat", err)
	}
	size := uint64(st.Size)
	if start >= size {
		return nil, size, nil // the file shrank under the take (or was emptied)
	}
	if fm := em.cur; fm != nil {
		stale := size != em.size || st.Ctim != em.ctime
		if stale {
			// Pages that cannot be checked (no pagemap: some sandboxes)
			// are taken for gone: a new mapping is always right.
			ok, err := e.pagesPresent(fm.b)
			if err != nil {
				e.log.Warn("tmpfs mapping: cannot check its pages; mapping the file again", "segment", ent.path, "err", err)
			}
			stale = !ok || size < uint64(len(fm.b))
		}
		if stale || min(end, size) > uint64(len(fm.b)) {
			e.mapped.remaps.Add(1)
			e.retireLocked(em, fm)
		} else {
			em.size, em.ctime = size, st.Ctim
			fm.users++
			return fm, size, nil
		}
	}
	fm, err := e.mapFile(ent, size)
	if err != nil {
		e.mapped.refused.Add(1)
		em.refused.Store(em.err != nil)
		return nil, 0, err
	}
	em.cur, em.size, em.ctime = fm, size, st.Ctim
	em.mapped.Store(true)
	fm.users++
	return fm, size, nil
}

// mapFile maps ent's file whole (size bytes), populated, and registers
// it with the GPU driver within max_mapped_bytes. A refused registration
// makes the entry stay on staging for good.
func (e *Engine) mapFile(ent *segEntry, size uint64) (*fileMap, error) {
	if err := e.gpuReady("mapped", ent.path); err != nil {
		return nil, err
	}
	n := pageRound(size)
	e.mapped.mu.Lock()
	if e.mapped.bytes+n > e.cfg.MappedLimit() {
		e.mapped.mu.Unlock()
		return nil, fmt.Errorf("mapping %s (%d bytes) would pass max_mapped_bytes (%d, %d mapped)", ent.path, n, e.cfg.MappedLimit(), e.mapped.bytes)
	}
	e.mapped.bytes += n
	e.mapped.mu.Unlock()
	unmap := func() {
		e.mapped.mu.Lock()
		e.mapped.bytes -= n
		e.mapped.mu.Unlock()
	}
	// A segment opened for reading maps (and registers) its file
	// read-only: its fd allows nothing more.
	prot, pin := unix.PROT_READ|unix.PROT_WRITE, e.gpu.b.Pin
	if !ent.perm.allows(OpWrite) {
		ro, ok := e.gpu.b.(ReadOnlyPinner)
		if !ok {
			unmap()
			ent.fmap.err = errors.New("this GPU backend cannot register memory mapped read-only")
			return nil, ent.fmap.err
		}
		prot, pin = unix.PROT_READ, ro.PinReadOnly
	}
	b, err := unix.Mmap(ent.buffered.FD, 0, int(size), prot, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unmap()
		ent.fmap.err = fmt.Errorf("mmap of %s: %w", ent.path, err)
		return nil, ent.fmap.err
	}
	unpin, err := pin(uintptr(hostmem.AddrOf(b)), uint64(len(b)))
	if err != nil {
		unix.Munmap(b)
		unmap()
		ent.fmap.err = fmt.Errorf("registering %s for DMA: %w", ent.path, err)
		return nil, ent.fmap.err
	}
	return &fileMap{b: b, unpin: unpin}, nil
}

// pagesPresent reports whether every page of mapping b is still mapped
// (a truncation unmaps the file's pages past its new size from every
// mapping; /proc/self/pagemap bit 63).
func (e *Engine) pagesPresent(b []byte) (bool, error) {
	s := &e.mapped
	s.pagemapOnce.Do(func() {
		path := s.pagemapPath
		if path == "" {
			path = "/proc/self/pagemap"
		}
		s.pagemap, s.pagemapErr = os.Open(path)
	})
	if s.pagemapErr != nil {
		return false, s.pagemapErr
	}
	page := uint64(os.Getpagesize())
	first := hostmem.AddrOf(b) / page
	pages := (uint64(len(b)) + page - 1) / page
	buf := make([]byte, 8*min(pages, 4096))
	for at := uint64(0); at < pages; {
		chunk := buf[:8*min(pages-at, 4096)]
		if _, err := s.pagemap.ReadAt(chunk, int64(8*(first+at))); err != nil {
			return false, fmt.Errorf("/proc/self/pagemap: %w", err)
		}
		for i := 0; i < len(chunk); i += 8 {
			if binary.LittleEndian.Uint64(chunk[i:])&(1<<63) == 0 {
				return false, nil
			}
		}
		at += uint64(len(chunk) / 8)
	}
	return true, nil
}

// keepMap keeps fm for good: a copy through it has an unknown outcome.
func (e *Engine) keepMap(ent *segEntry, fm *fileMap) {
	em := &ent.fmap
	em.mu.Lock()
	defer em.mu.Unlock()
	if !fm.kept {
		fm.kept = true
		e.mapped.retained.Add(1)
	}
}

// releaseMap drops a take's reference to fm (nil: the take had none).
func (e *Engine) releaseMap(ent *segEntry, fm *fileMap) {
	if fm == nil {
		return
	}
	em := &ent.fmap
	em.mu.Lock()
	defer em.mu.Unlock()
	fm.users--
	if fm.retired && fm.users == 0 {
		e.unmapLocked(fm)
	}
}

// retireLocked takes fm out of use; it is unmapped now or when its last
// take ends. REQUIRES: em.mu.
func (e *Engine) retireLocked(em *entryMap, fm *fileMap) {
	if em.cur == fm {
		em.cur = nil
		em.mapped.Store(false)
	}
	fm.retired = true
	if fm.users == 0 {
		e.unmapLocked(fm)
	}
}

// unmapLocked unregisters and unmaps fm unless it is kept.
func (e *Engine) unmapLocked(fm *fileMap) {
	if fm.kept || fm.b == nil {
		return
	}
	if err := fm.unpin(); err != nil {
		// The driver may still hold the pages: keep the mapping.
		fm.kept = true
		e.mapped.retained.Add(1)
		e.log.Error("tmpfs mapping retained for good: unregister failed", "err", err)
		return
	}
	n := pageRound(uint64(len(fm.b)))
	unix.Munmap(fm.b)
	fm.b = nil
	e.mapped.mu.Lock()
	e.mapped.bytes -= n
	e.mapped.mu.Unlock()
}

// forgetMapping retires the entry's mapping before its fds close.
func (e *Engine) forgetMapping(ent *segEntry) {
	em := &ent.fmap
	em.mu.Lock()
	defer em.mu.Unlock()
	if fm := em.cur; fm != nil {
		e.retireLocked(em, fm)
	}
}

// closeMapped closes /proc/self/pagemap once the lanes stopped (Close):
// no take checks a mapping after that.
func (e *Engine) closeMapped() {
	s := &e.mapped
	s.pagemapOnce.Do(func() { s.pagemapErr = errors.New("the engine is closed") })
	if s.pagemap != nil {
		s.pagemap.Close()
	}
}

func (e *Engine) mappedStats() MappedStats {
	s := &e.mapped
	st := MappedStats{Takes: s.takes.Load(), Units: s.units.Load(), Remaps: s.remaps.Load(),
		Refused: s.refused.Load(), Retained: s.retained.Load()}
	s.mu.Lock()
	st.Bytes = s.bytes
	s.mu.Unlock()
	// The atomic, not the entry's lock: a lane holds that lock while it
	// registers a file, and the engine lock must not wait for that.
	e.mu.Lock()
	for _, ent := range e.mu.segments {
		if ent.fmap.mapped.Load() {
			st.Files++
		}
	}
	e.mu.Unlock()
	return st
}
