// region.go owns registered host memory: engine-allocated page-aligned
// regions and MAP_SHARED file mappings, the address index used to resolve
// raw addresses, and exclusive range loans held during I/O.
//
// Invariants:
//   - A region's mapping stays mapped while any loan or copy pin is
//     outstanding; Unregister fails with ErrBusy instead of unmapping
//     under I/O, and Engine.Close waits for pins before unmapping.
//   - Device memory a peer holds a CUDA IPC mapping of (ipcpin.go) is
//     not unregistered: Unregister fails with ErrBusy naming the peers.
//   - ReadAt/WriteAt hold no lock across their copy, only a pin of the
//     range (loans.go): a 4 KiB copy never waits behind a large one into
//     the same region.
//   - Loans of different groups never overlap; ranges of one group may
//     overlap and share that group's loan.
//   - The engine's region index (Engine.mu) is sorted by base address and
//     regions never overlap (the kernel hands out distinct mappings).
//   - Engine.mu.registered counts every region from before its mmap until
//     its unmap, page-rounded, and never exceeds the engine's
//     max_registered_bytes: a registration past it fails before any page is
//     mapped or populated.
//   - Go code touches a shared file's bytes only through hostmem.Copy, so
//     a fault on a truncated shared file is an error, never a crash;
//     private host memory (never truncated) may also be reached in place
//     while pinned (InPlace).

package engine

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/internal/hostmem"
	"golang.org/x/sys/unix"
)

// Region is one registered memory range. Safe for concurrent use.
type Region struct {
	e    *Engine
	key  uint64
	loc  Location
	m    *hostmem.Mapping // host bytes; nil for device memory
	dev  DeviceMemory     // device memory (cuda:N); nil for host memory
	shm  string
	anon bool
	// unpin undoes the page-locking of a pinned region; it runs before
	// the mapping goes.
	unpin func() error

	loans loanTable // loans.go

	// copying, nil outside tests, runs in ReadAt/WriteAt with the range
	// pinned and before any byte moves (offset and length): a test holds
	// one copy there.
	copying func(off int64, n int)

	mu struct {
		sync.Mutex
		closed bool
		// uncertain: a device copy of ReadAt/WriteAt whose outcome is
		// unknown may still touch the memory, so it is never freed.
		uncertain bool
		// ipc counts the peers' CUDA IPC mappings of the region, by
		// holder (ipcpin.go); Unregister is refused while any is held.
		ipc map[string]int
	}
}

type loan struct {
	lo, hi uint64 // [lo, hi)
	owner  *group
}

// BaseAddress is the address of the region's first byte (a device
// address for device memory).
func (r *Region) BaseAddress() uint64 {
	if r.dev != nil {
		return r.dev.Ptr()
	}
	return r.m.Addr()
}

// Len is the region's size in bytes.
func (r *Region) Len() uint64 {
	if r.dev != nil {
		return r.dev.Len()
	}
	return r.m.Len()
}

// Location is where the bytes live.
func (r *Region) Location() Location { return r.loc }

// free releases the region's memory: unpin, then unmap or free the
// device allocation.
func (r *Region) free() error {
	if r.dev != nil {
		return r.dev.Free()
	}
	var err error
	if r.unpin != nil {
		err = r.unpin()
	}
	if cerr := r.m.Close(); err == nil {
		err = cerr
	}
	return err
}

// SharedPath is the file mapped MAP_SHARED, or "" for private memory.
func (r *Region) SharedPath() string { return r.shm }

func (r *Region) name() string { return fmt.Sprintf("memory/%#x", r.BaseAddress()) }

// RegisterMemory allocates and registers bytes of zeroed, page-aligned
// host memory. The caller owns the region until Unregister.
func (e *Engine) RegisterMemory(bytes uint64) (*Region, error) {
	if err := e.checkOpen("register"); err != nil {
		return nil, err
	}
	if bytes == 0 {
		return nil, errorf(KindInvalid, "register", "memory", "bytes is 0")
	}
	if err := e.reserveRegistered(bytes); err != nil {
		return nil, err
	}
	m, err := hostmem.Anonymous(bytes)
	if err != nil {
		e.releaseRegistered(bytes)
		return nil, wrap(KindExhausted, "register", "memory", err)
	}
	return e.addRegion(&Region{e: e, loc: LocationCPU, m: m, anon: true})
}

// RegisterSharedFile maps the first bytes of an existing file (typically
// under /dev/shm) MAP_SHARED and registers it, so another process mapping
// the same file shares the bytes. The file is never created or resized.
func (e *Engine) RegisterSharedFile(path string, bytes uint64) (*Region, error) {
	return e.RegisterSharedFileAs(nil, path, bytes)
}

// RegisterSharedFileAs is RegisterSharedFile on behalf of c: the kernel
// must let c open the file for reading and writing (caller.go).
func (e *Engine) RegisterSharedFileAs(c *Caller, path string, bytes uint64) (*Region, error) {
	if err := e.checkOpen("register"); err != nil {
		return nil, err
	}
	if bytes == 0 {
		return nil, errorf(KindInvalid, "register", "memory", "bytes is 0")
	}
	if err := e.reserveRegistered(bytes); err != nil {
		return nil, err
	}
	r, err := e.registerSharedFile(c, path, bytes)
	if err != nil {
		e.releaseRegistered(bytes)
	}
	return r, err
}

func (e *Engine) registerSharedFile(c *Caller, path string, bytes uint64) (*Region, error) {
	// The open is confined like a segment's: no symlink or ".." leads
	// out of the allowed roots, and c must be allowed to open the file.
	// The open and the statfs may block on a store that does not answer:
	// bounded (storewait.go). A file on such a filesystem is refused: a
	// page fault on its mapping would stall whichever thread touched it.
	type opened struct {
		fd     int
		fsType int64
	}
	o, err := boundedCall(e.cfg.StoreCallTimeout.D(), "open "+path, nil, func() (opened, error) {
		fd, err := e.openConfined(c, path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK)
		if err != nil {
			return opened{}, err
		}
		var sfs unix.Statfs_t
		if err := unix.Fstatfs(fd, &sfs); err != nil {
			unix.Close(fd)
			return opened{}, wrap(KindIO, "", "", os.NewSyscallError("fstatfs", err))
		}
		return opened{fd: fd, fsType: int64(sfs.Type)}, nil
	}, func(o opened, err error) {
		if err == nil {
			unix.Close(o.fd)
		}
	})
	if err != nil {
		return nil, openError("register", "memory", err)
	}
	fd := o.fd
	if isBlockingFS(o.fsType) {
		go unix.Close(fd) // a FUSE close waits for the server's FLUSH
		return nil, errorf(KindInvalid, "register", "memory", "shm %s lives on a %s filesystem, which may stop answering: its pages would stall whoever touches them; use a local filesystem such as /dev/shm", path, fsName(o.fsType))
	}
	m, err := hostmem.SharedFile(fd, path, bytes)
	unix.Close(fd)
	if err != nil {
		return nil, wrap(KindInvalid, "register", "memory", err)
	}
	return e.addRegion(&Region{e: e, loc: LocationCPU, m: m, shm: path})
}

func (e *Engine) addRegion(r *Region) (*Region, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		r.free()
		if r.dev == nil {
			e.mu.registered -= hostmem.RoundUp(r.Len())
		}
		return nil, errorf(KindClosed, "register", "memory", "engine is closed")
	}
	e.mu.nextKey++
	r.key = e.mu.nextKey
	i := sort.Search(len(e.mu.regions), func(i int) bool { return e.mu.regions[i].BaseAddress() > r.BaseAddress() })
	rs := make([]*Region, 0, len(e.mu.regions)+1)
	rs = append(append(append(rs, e.mu.regions[:i]...), r), e.mu.regions[i:]...)
	e.mu.regions = rs
	e.regions.Store(&rs)
	e.log.Info("memory registered", "region", r.name(), "location", r.loc, "bytes", r.Len(), "shm", r.shm)
	return r, nil
}

// Unregister removes the region and unmaps it. It fails with ErrBusy
// while a transfer holds a loan on it or a ReadAt/WriteAt is copying;
// the region then stays usable.
func (e *Engine) Unregister(r *Region) error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return errorf(KindNotFound, "unregister", r.name(), "already unregistered")
	}
	if r.mu.uncertain {
		r.mu.Unlock()
		return errorf(KindBusy, "unregister", r.name(), "a device copy of unknown outcome may still write it: it stays allocated for good")
	}
	if len(r.mu.ipc) > 0 {
		err := r.ipcBusyLocked()
		r.mu.Unlock()
		return err
	}
	switch n, l, pins := r.loans.closeIfIdle(false); {
	case n > 0:
		r.mu.Unlock()
		return errorf(KindBusy, "unregister", r.name(), "%d live transfer(s) hold it, first in batches/%d", n, l.owner.b.id)
	case pins > 0:
		r.mu.Unlock()
		return errorf(KindBusy, "unregister", r.name(), "%d ReadAt/WriteAt copies (a peer's request or the data file) are running on it", pins)
	}
	r.mu.closed = true
	r.mu.Unlock()

	e.mu.Lock()
	for i, x := range e.mu.regions {
		if x == r {
			rs := append(append([]*Region(nil), e.mu.regions[:i]...), e.mu.regions[i+1:]...)
			e.mu.regions = rs
			e.regions.Store(&rs)
			break
		}
	}
	e.mu.Unlock()
	if e.file != nil && r.anon {
		e.file.ForgetBuffer(r.key)
	}
	if err := e.gdsForgetRegion(r); err != nil {
		// Unregistered, but cuFile may still reference the allocation:
		// it is never freed.
		return wrap(KindIO, "unregister", r.name(), fmt.Errorf("%w; the device memory stays allocated for good", err))
	}
	e.log.Info("memory unregistered", "region", r.name(), "bytes", r.Len())
	err := r.free()
	if r.dev == nil {
		e.releaseRegistered(r.Len())
	}
	return err
}

// reserveRegistered counts bytes (page-rounded) against
// max_registered_bytes before they are mapped; KindExhausted past it.
func (e *Engine) reserveRegistered(bytes uint64) error {
	n := hostmem.RoundUp(bytes)
	e.mu.Lock()
	defer e.mu.Unlock()
	if have := e.mu.registered; n < bytes || have+n < have || have+n > e.regLimit {
		return errorf(KindExhausted, "register", "memory",
			"%d bytes more would make %s registered, over engine.max_registered_bytes (%s; %s already registered)",
			bytes, sizeText(have+n), sizeText(e.regLimit), sizeText(have))
	}
	e.mu.registered += n
	return nil
}

// releaseRegistered returns what reserveRegistered counted for bytes.
func (e *Engine) releaseRegistered(bytes uint64) {
	e.mu.Lock()
	e.mu.registered -= hostmem.RoundUp(bytes)
	e.mu.Unlock()
}

// sizeText renders bytes in the config grammar ("12GiB"), so a message
// quotes figures the way the config key is written.
func sizeText(n uint64) string { return config.Size(n).String() }

// ReadAt copies region bytes into p (io.ReaderAt semantics). It fails
// with ErrBusy while a transfer holds an overlapping loan. Copies of
// overlapping ranges are not ordered with each other: a ReadAt beside a
// WriteAt of the same bytes may see some of each.
func (r *Region) ReadAt(p []byte, off int64) (int, error) {
	return r.copyAt(p, off, false)
}

// WriteAt copies p into the region. It fails with ErrBusy while a transfer
// holds an overlapping loan, and with ErrRange past the region's end.
func (r *Region) WriteAt(p []byte, off int64) (int, error) {
	return r.copyAt(p, off, true)
}

func (r *Region) copyAt(p []byte, off int64, write bool) (int, error) {
	op := "read"
	if write {
		op = "write"
	}
	if off < 0 || uint64(off) > r.Len() {
		return 0, errorf(KindRange, op, r.name(), "offset %d beyond region size %d", off, r.Len())
	}
	end := uint64(off) + uint64(len(p))
	if end > r.Len() {
		if write {
			return 0, errorf(KindRange, op, r.name(), "offset %d+%d beyond region size %d", off, len(p), r.Len())
		}
		end = r.Len()
	}
	// The range is pinned, not locked, for the copy: copies of one region
	// run side by side, no group's loan of these bytes is granted while
	// it runs, and the mapping stays until it is unpinned (Unregister
	// answers ErrBusy meanwhile).
	lo, hi := r.BaseAddress()+uint64(off), r.BaseAddress()+end
	closed, l, ok := r.loans.pin(lo, hi)
	switch {
	case closed:
		return 0, errorf(KindNotFound, op, r.name(), "unregistered")
	case !ok:
		return 0, errorf(KindBusy, op, r.name(), "bytes [%d, %d) are loaned to batches/%d", l.lo-r.BaseAddress(), l.hi-r.BaseAddress(), l.owner.b.id)
	}
	defer r.loans.unpin(lo, hi)
	if r.copying != nil {
		r.copying(off, int(end-uint64(off)))
	}
	if r.dev != nil {
		return r.deviceCopy(op, p[:end-uint64(off)], uint64(off), write)
	}
	b := r.m.Bytes()[off:end]
	copyTo := func(lo, hi uint64) (int, error) {
		if write {
			return hostmem.Copy(b[lo:hi], p[lo:hi])
		}
		return hostmem.Copy(p[lo:hi], b[lo:hi])
	}
	n, err := copyTo(0, uint64(len(b)))
	if err == nil {
		return n, nil
	}
	// A fault: find the first page that faults, one page at a time, so
	// the count is exact and the message names where the mapping ends.
	// Only this slow path pays for it.
	done := uint64(0)
	for done < uint64(len(b)) {
		next := min(hostmem.RoundUp(uint64(off)+done+1)-uint64(off), uint64(len(b)))
		if _, err = copyTo(done, next); err != nil {
			break
		}
		done = next
	}
	if err == nil { // the fault did not repeat (the file grew back)
		return int(done), nil
	}
	return int(done), errorf(KindIO, op, r.name(), "bytes [%d, %d) at offset %d: %w", off, end, uint64(off)+done, err)
}

// InPlace runs f on the region's bytes [off, off+n) with the range pinned
// as for ReadAt/WriteAt (ErrBusy over a transfer's loan, ErrNotFound once
// unregistered, ErrRange past the end; f then does not run), so a socket
// can read into or write from them with no copy through a buffer. Only
// private host memory (cpu or pinned) is reached in place: it is
// populated at registration and never truncated, so no access to it
// faults while pinned. For a shared file (a truncation would fault) or
// device memory, ok is false, f does not run, and the caller copies with
// ReadAt/WriteAt. f must not keep b past its return; its error is
// returned as is.
func (r *Region) InPlace(off int64, n int, f func(b []byte) error) (ok bool, err error) {
	if !r.anon || r.m == nil {
		return false, nil
	}
	if off < 0 || n < 0 || uint64(off) > r.Len() || uint64(n) > r.Len()-uint64(off) {
		return true, errorf(KindRange, "access", r.name(), "[%d, %d+%d) beyond region size %d", off, off, n, r.Len())
	}
	lo, hi := r.BaseAddress()+uint64(off), r.BaseAddress()+uint64(off)+uint64(n)
	closed, l, pinned := r.loans.pin(lo, hi)
	switch {
	case closed:
		return true, errorf(KindNotFound, "access", r.name(), "unregistered")
	case !pinned:
		return true, errorf(KindBusy, "access", r.name(), "bytes [%d, %d) are loaned to batches/%d", l.lo-r.BaseAddress(), l.hi-r.BaseAddress(), l.owner.b.id)
	}
	defer r.loans.unpin(lo, hi)
	if r.copying != nil {
		r.copying(off, n)
	}
	return true, f(r.m.Bytes()[off : uint64(off)+uint64(n) : uint64(off)+uint64(n)])
}

// resolve finds the region holding [addr, addr+n). REQUIRES: nothing held.
func (e *Engine) resolve(addr, n uint64) (*Region, error) {
	var rs []*Region
	if p := e.regions.Load(); p != nil {
		rs = *p // a snapshot: every change stores a new slice
	}
	i := sort.Search(len(rs), func(i int) bool { return rs[i].BaseAddress() > addr }) - 1
	if i < 0 || addr >= rs[i].BaseAddress()+rs[i].Len() {
		return nil, detail(KindNotFound, "address %#x is not in any registered region", addr)
	}
	r := rs[i]
	if addr+n < addr || addr+n > r.BaseAddress()+r.Len() {
		return nil, detail(KindRange, "address %#x+%d runs past the end of %s (%d bytes)", addr, n, r.name(), r.Len())
	}
	return r, nil
}

// resolveFor is resolve for a submission limited to the regions in
// allowed (nil: any). REQUIRES: nothing held.
func (e *Engine) resolveFor(allowed []*Region, addr, n uint64) (*Region, error) {
	r, err := e.resolve(addr, n)
	if err != nil || allowed == nil || slices.Contains(allowed, r) {
		return r, err
	}
	return nil, detail(KindPermission, "address %#x is in %s, not in a region the submitter named (its own was unregistered meanwhile)", addr, r.name())
}

// Regions returns the registered regions in address order.
func (e *Engine) Regions() []*Region {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return append([]*Region(nil), e.mu.regions...)
}

// acquireLoans takes exclusive loans for every range of g, all or none.
// A range overlapping another group's loan fails with ErrBusy.
func acquireLoans(g *group) error {
	// One region's locks at a time (never two regions' at once), and
	// anything taken is returned on failure, so no order among regions is
	// needed.
	for k := 0; k < len(g.ranges); {
		rs := loanRun(g.ranges[k:])
		r := rs[0].region
		closed, l, at, ok := r.loans.takeAll(rs, g)
		rr := rs[at]
		switch {
		case closed:
			releaseLoans(g, k)
			return errorf(KindNotFound, "submit", r.name(), "unregistered before dispatch")
		case !ok && l.owner == nil:
			releaseLoans(g, k)
			return errorf(KindBusy, "submit", r.name(), "requests[%d]: host range [%#x, %#x) overlaps [%#x, %#x), which a ReadAt/WriteAt (a peer's request or the data file) is copying", rr.req, rr.lo, rr.hi, l.lo, l.hi)
		case !ok:
			releaseLoans(g, k)
			return errorf(KindBusy, "submit", r.name(), "requests[%d]: host range [%#x, %#x) overlaps a loan held by batches/%d", rr.req, rr.lo, rr.hi, l.owner.b.id)
		}
		k += len(rs)
	}
	return nil
}

// regionRun returns the leading ranges of rs on the region of rs[0].
func regionRun(rs []hostRange) []hostRange {
	n := 1
	for n < len(rs) && rs[n].region == rs[0].region {
		n++
	}
	return rs[:n]
}

// loanRun returns the leading ranges of rs to grant in one pass of their
// region's loan table (loanTable.takeAll): the region's run when its
// bounding range takes no more locks than its ranges one at a time would
// (it is small, or one of them is large and so takes every lock anyway),
// else rs[0] alone: small ranges scattered over a region would otherwise
// hold every shard where each needs one.
func loanRun(rs []hostRange) []hostRange {
	rs = regionRun(rs)
	lo, hi, big := rs[0].lo, rs[0].hi, false
	for _, r := range rs {
		lo, hi = min(lo, r.lo), max(hi, r.hi)
		_, _, b := span(r.lo, r.hi)
		big = big || b
	}
	if _, _, boxBig := span(lo, hi); boxBig && !big {
		return rs[:1]
	}
	return rs
}

// releaseLoans drops the loans of g's first n ranges (all of them when n
// is negative).
func releaseLoans(g *group, n int) {
	if n < 0 || n > len(g.ranges) {
		n = len(g.ranges)
	}
	for k := 0; k < n; {
		rs := regionRun(g.ranges[k:n])
		rs[0].region.loans.dropAll(rs, g)
		k += len(rs)
	}
}
