package engine_test

// fakegpu_test.go is a test-only GPU and GDS backend: "device memory" is
// host memory mapped outside the Go heap that the engine may reach only
// through the backend (as with a real GPU), copies run on a goroutine per
// stream so events really complete later, and faults are injected on
// command. It lets CI exercise the staged and GDS executors with real
// io_uring I/O on real files; the GPU gate runs the same paths on CUDA.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/internal/hostmem"
	"golang.org/x/sys/unix"
)

type fakeGPU struct {
	devices   int
	failEvent atomic.Bool // events report an error (an uncertain copy)
	failPin   atomic.Bool
	// pinHeld, when set before use, makes Pin signal pinning and wait
	// for pinHeld to close: a registration in progress.
	pinHeld, pinning chan struct{}
	failStream       atomic.Bool // NewStream fails

	mu     sync.Mutex
	allocs map[uint64]*hostmem.Mapping
	pinned int
	copies atomic.Int64
	// review: fail the DtoH enqueue whose ordinal equals failDtoHNth;
	// slowCopy delays every copy; busyCopies counts copies not yet run;
	// hang blocks copies until closed.
	failDtoHNth atomic.Int64
	dtohs       atomic.Int64
	badDtoH     atomic.Uint64 // the source of the refused one
	slowCopy    atomic.Int64
	busyCopies  atomic.Int64
	hang        chan struct{}
	// HtoD copies to device addresses at or above holdFrom (0: none)
	// run only once held is closed.
	holdFrom atomic.Uint64
	held     chan struct{}
	// failHtoDAt fails the enqueue of every HtoD copy to that device
	// address (0: none).
	failHtoDAt atomic.Uint64
	// latency (ns) is how long after its Record an event completes, the
	// way a real copy engine finishes later whether or not the host
	// sleeps: the copies run at once, the event reports done only then.
	latency atomic.Int64
	// dma: copies move no byte (benchmarks only), as a real GPU's copy
	// engine costs the host no CPU; the bytes are then wrong.
	dma atomic.Bool
	// youngQueries counts queries of an event that is not done while an
	// event recorded before it on the same stream is not done either.
	youngQueries atomic.Int64
	// calls counts stream and event calls: what a real driver serializes.
	calls atomic.Int64
	// records and releases count event records and closes.
	records, releases atomic.Int64
	// CUDA IPC (fakeipc_test.go): open mappings, closes, DtoD copies
	// queued; failImport refuses imports, failDtoD refuses DtoD copies;
	// onDtoD and onDtoDDone (set before use) see each DtoD as it is
	// queued and once its bytes moved.
	ipcOpen, ipcClosed, dtods atomic.Int64
	importTries               atomic.Int64
	failImport, failDtoD      atomic.Bool
	onDtoD, onDtoDDone        func(dst, src, n uint64)
	// batch: streams made from now on enqueue many copies in one call
	// (engine.CopyBatcher), as on a driver with cuMemcpyBatchAsync; off,
	// they have only HtoD and DtoH. batches counts those calls, batched
	// the copies they carried. failBatchNth fails the batch call whose
	// ordinal equals it after enqueueing its first half (the driver may
	// enqueue some of a failed batch).
	batch        atomic.Bool
	batches      atomic.Int64
	batched      atomic.Int64
	failBatchNth atomic.Int64
	// htods and dtohCalls count the per-copy calls.
	htods, dtohCalls atomic.Int64
}

func newFakeGPU(devices int) *fakeGPU {
	f := &fakeGPU{devices: devices, allocs: map[uint64]*hostmem.Mapping{}}
	f.batch.Store(true)
	return f
}

func (f *fakeGPU) Probe() error          { return nil }
func (f *fakeGPU) Close() error          { return nil }
func (f *fakeGPU) Devices() (int, error) { return f.devices, nil }
func (f *fakeGPU) pinnedCount() int      { f.mu.Lock(); defer f.mu.Unlock(); return f.pinned }

// allocated reports whether the allocation at ptr is still live.
func (f *fakeGPU) allocated(ptr uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.allocs[ptr]
	return ok
}

// hostBytes views memory outside the Go heap (mappings) as a slice.
func hostBytes(addr uintptr, n uint64) []byte {
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&addr)), n)
}

func (f *fakeGPU) Alloc(dev int, n uint64) (engine.DeviceMemory, error) {
	m, err := hostmem.Anonymous(n)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.allocs[m.Addr()] = m
	f.mu.Unlock()
	return &fakeMem{f: f, dev: dev, m: m}, nil
}

func (f *fakeGPU) ImportIPC(dev int, handle []byte) (engine.DeviceMemory, error) {
	return f.importIPC(dev, handle) // fakeipc_test.go
}

func (f *fakeGPU) Pin(addr uintptr, n uint64) (func() error, error) {
	if f.pinHeld != nil {
		f.pinning <- struct{}{}
		<-f.pinHeld
	}
	if f.failPin.Load() {
		return nil, errors.New("fake: CUDA_ERROR_OUT_OF_MEMORY")
	}
	f.mu.Lock()
	f.pinned++
	f.mu.Unlock()
	return func() error { f.mu.Lock(); f.pinned--; f.mu.Unlock(); return nil }, nil
}

// PinReadOnly is Pin for memory mapped read-only.
func (f *fakeGPU) PinReadOnly(addr uintptr, n uint64) (func() error, error) { return f.Pin(addr, n) }

func (f *fakeGPU) NewStream(dev int) (engine.Stream, error) {
	if f.failStream.Load() {
		return nil, errors.New("fake: cuStreamCreate: CUDA_ERROR_OUT_OF_MEMORY")
	}
	s := &fakeStream{f: f, work: make(chan func(), 64)}
	go func() {
		for fn := range s.work {
			fn()
		}
	}()
	if f.batch.Load() {
		return &fakeBatchStream{s}, nil
	}
	return s, nil
}

type fakeMem struct {
	f   *fakeGPU
	dev int
	m   *hostmem.Mapping
}

func (d *fakeMem) Device() int { return d.dev }
func (d *fakeMem) Ptr() uint64 { return d.m.Addr() }
func (d *fakeMem) Len() uint64 { return d.m.Len() }
func (d *fakeMem) CopyOut(p []byte, off uint64) error {
	copy(p, d.m.Bytes()[off:])
	return nil
}
func (d *fakeMem) CopyIn(off uint64, p []byte) error {
	copy(d.m.Bytes()[off:], p)
	return nil
}
func (d *fakeMem) Free() error {
	d.f.mu.Lock()
	delete(d.f.allocs, d.m.Addr())
	d.f.mu.Unlock()
	return d.m.Close()
}

// fakeStream runs copies in order on its own goroutine.
type fakeStream struct {
	f    *fakeGPU
	work chan func()
	mu   sync.Mutex
	evs  []*fakeEvent // recorded, in order; the done ones pruned
}

func (s *fakeStream) HtoD(dst uint64, src uintptr, n uint64) error {
	s.f.calls.Add(1)
	s.f.htods.Add(1)
	if s.f.refusesHtoD(dst, n) {
		return errors.New("fake: cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE")
	}
	s.work <- s.htod(dst, src, n)
	return nil
}

// refusesHtoD reports whether a host-to-device copy to [dst, dst+n)
// covers failHtoDAt.
func (f *fakeGPU) refusesHtoD(dst, n uint64) bool {
	a := f.failHtoDAt.Load()
	return a != 0 && dst <= a && a < dst+n
}

// htod is the stream work of one host-to-device copy.
func (s *fakeStream) htod(dst uint64, src uintptr, n uint64) func() {
	hold := s.f.holdFrom.Load()
	return func() {
		if s.f.hang != nil {
			<-s.f.hang
		}
		if d := s.f.slowCopy.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		if hold > 0 && dst >= hold {
			<-s.f.held
		}
		if !s.f.dma.Load() {
			copy(hostBytes(uintptr(dst), n), hostBytes(src, n))
		}
		s.f.copies.Add(1)
	}
}
func (s *fakeStream) DtoH(dst uintptr, src uint64, n uint64) error {
	s.f.calls.Add(1)
	s.f.dtohCalls.Add(1)
	if s.f.refusesDtoH(src, n) {
		return errors.New("fake: cuMemcpyDtoHAsync: CUDA_ERROR_INVALID_VALUE")
	}
	s.work <- s.dtoh(dst, src, n)
	return nil
}

// refusesDtoH counts a device-to-host copy from [src, src+n) and
// reports whether it is refused: the failDtoHNth-th one, and any later
// one from that copy's source (the driver refuses the same copy again).
func (f *fakeGPU) refusesDtoH(src, n uint64) bool {
	if f.dtohs.Add(1) == f.failDtoHNth.Load() {
		f.badDtoH.Store(src)
		return true
	}
	b := f.badDtoH.Load()
	return b != 0 && src <= b && b < src+n
}

// dtoh is the stream work of one device-to-host copy.
func (s *fakeStream) dtoh(dst uintptr, src uint64, n uint64) func() {
	s.f.busyCopies.Add(1)
	return func() {
		if d := s.f.slowCopy.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		if !s.f.dma.Load() {
			copy(hostBytes(dst, n), hostBytes(uintptr(src), n))
		}
		s.f.copies.Add(1)
		s.f.busyCopies.Add(-1)
	}
}

// fakeBatchStream is a fakeStream with cuMemcpyBatchAsync: one call
// enqueues many copies. Device memory is the fake's allocations, so a
// destination among them makes a host-to-device copy. A copy its
// per-copy calls would refuse (failHtoDAt, failDtoHNth) fails the batch
// with the copies before it enqueued, and the failBatchNth-th batch
// fails after enqueueing its first half: a driver may enqueue some of a
// batch it fails.
type fakeBatchStream struct{ *fakeStream }

func (s *fakeBatchStream) CopyBatch(cs []engine.Copy) error {
	f := s.f
	f.calls.Add(1)
	refused := -1
	if f.batches.Add(1) == f.failBatchNth.Load() {
		refused = len(cs) / 2
	}
	for j, c := range cs {
		if refused >= 0 {
			break
		}
		if s.toDevice(c) {
			if f.refusesHtoD(c.Dst, c.N) {
				refused = j
			}
		} else if f.refusesDtoH(c.Src, c.N) {
			refused = j
		}
	}
	ok := cs
	if refused >= 0 {
		ok = cs[:refused]
	}
	for _, c := range ok {
		s.work <- s.copyWork(c)
	}
	f.batched.Add(int64(len(ok)))
	if refused >= 0 {
		return fmt.Errorf("fake: cuMemcpyBatchAsync(%d copies, copy %d): CUDA_ERROR_INVALID_VALUE", len(cs), refused)
	}
	return nil
}

// toDevice reports whether c writes the fake's device memory.
func (s *fakeBatchStream) toDevice(c engine.Copy) bool {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	for base, m := range s.f.allocs {
		if c.Dst >= base && c.Dst < base+m.Len() {
			return true
		}
	}
	return false
}

func (s *fakeBatchStream) copyWork(c engine.Copy) func() {
	if s.toDevice(c) {
		return s.htod(c.Dst, uintptr(c.Src), c.N)
	}
	return s.dtoh(uintptr(c.Dst), c.Src, c.N)
}
func (s *fakeStream) Record() (engine.Event, error) {
	s.f.calls.Add(1)
	s.f.records.Add(1)
	ev := &fakeEvent{f: s.f, s: s, done: make(chan struct{}), at: time.Now().Add(time.Duration(s.f.latency.Load()))}
	s.mu.Lock()
	live := s.evs[:0]
	for _, e := range s.evs {
		if !e.ready() {
			live = append(live, e)
		}
	}
	s.evs = append(live, ev)
	s.mu.Unlock()
	s.work <- func() { close(ev.done) }
	return ev, nil
}
func (s *fakeStream) Sync() error {
	ev, _ := s.Record()
	return ev.Wait()
}
func (s *fakeStream) Close() error { close(s.work); return nil }

type fakeEvent struct {
	f    *fakeGPU
	s    *fakeStream
	done chan struct{}
	at   time.Time // not done before (fakeGPU.latency)
}

func (e *fakeEvent) Done() (bool, error) {
	e.f.calls.Add(1)
	if e.f.failEvent.Load() {
		return false, errors.New("fake: CUDA_ERROR_LAUNCH_FAILED")
	}
	if e.ready() {
		return true, nil
	}
	e.s.mu.Lock()
	for _, o := range e.s.evs {
		if o == e {
			break
		}
		if !o.ready() {
			e.f.youngQueries.Add(1)
			break
		}
	}
	e.s.mu.Unlock()
	return false, nil
}

// ready reports whether the copies before e ran and its latency passed.
func (e *fakeEvent) ready() bool {
	select {
	case <-e.done:
		return !time.Now().Before(e.at)
	default:
		return false
	}
}
func (e *fakeEvent) Wait() error {
	if e.f.failEvent.Load() {
		return errors.New("fake: CUDA_ERROR_LAUNCH_FAILED")
	}
	<-e.done
	time.Sleep(time.Until(e.at))
	return nil
}
func (e *fakeEvent) Close() error { e.f.calls.Add(1); e.f.releases.Add(1); return nil }

// fakeGDS moves bytes with pread/pwrite on the registered O_DIRECT fd.
type fakeGDS struct {
	// mode is the driver's policy once probed ("": native). noNvfs: no
	// nvidia-fs module, so no DMA at all (known before the probe); with
	// the module, DMA unless the probed mode is compat-forced.
	mode         string
	noNvfs       bool
	failRegister atomic.Bool
	// failReads / failWrites fail that many next cuFile calls, which
	// then move no byte.
	failReads atomic.Int64
	// failReadNth fails the read whose ordinal (counting from 1 over
	// this fake's life) equals it.
	failReadNth atomic.Int64
	failWrites  atomic.Int64
	// hang, when set, blocks every cuFile read until it is closed.
	hang   chan struct{}
	writes atomic.Int64
	reads  atomic.Int64
	opened atomic.Int64
	closed atomic.Int64
	// uncertainRegister makes RegisterBuffer fail with ErrUncertain;
	// failDeregister and failClose fail DeregisterBuffer and handle
	// destroys (counted in deregs and closed either way).
	uncertainRegister atomic.Bool
	failDeregister    atomic.Bool
	failClose         atomic.Bool
	deregs            atomic.Int64
	registers         atomic.Int64
	// callDelay makes every cuFile read/write take at least that long;
	// calls and maxCalls count the calls in flight and their peak.
	callDelay       atomic.Int64
	calls, maxCalls atomic.Int64
	lastFD          atomic.Int64 // the fd of the last OpenFile
	probes          atomic.Int64
	callMu          sync.Mutex
	callSizes       []uint64 // every cuFile read/write's length, in call order
}

func (g *fakeGDS) sizes() []uint64 {
	g.callMu.Lock()
	defer g.callMu.Unlock()
	return append([]uint64(nil), g.callSizes...)
}

func (g *fakeGDS) record(n uint64) {
	g.callMu.Lock()
	g.callSizes = append(g.callSizes, n)
	g.callMu.Unlock()
}

// inCall counts a call in flight for its duration; call the result at
// its end.
func (g *fakeGDS) inCall() func() {
	n := g.calls.Add(1)
	for m := g.maxCalls.Load(); n > m && !g.maxCalls.CompareAndSwap(m, n); m = g.maxCalls.Load() {
	}
	if d := g.callDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	return func() { g.calls.Add(-1) }
}

func (g *fakeGDS) Probe() error { g.probes.Add(1); return nil }
func (g *fakeGDS) Close() error { return nil }
func (g *fakeGDS) Mode() string {
	if g.mode == "" {
		return "native"
	}
	return g.mode
}
func (g *fakeGDS) DMA() bool {
	if g.noNvfs {
		return false
	}
	return g.probes.Load() == 0 || g.Mode() != "compat-forced"
}
func (g *fakeGDS) OpenFile(fd int) (engine.GDSFile, error) {
	g.opened.Add(1)
	g.lastFD.Store(int64(fd))
	return &fakeGDSFile{g: g, fd: fd}, nil
}
func (g *fakeGDS) RegisterBuffer(dev int, ptr, n uint64) error {
	g.registers.Add(1)
	if g.uncertainRegister.Load() {
		return fmt.Errorf("fake: cuFileBufRegister timed out: %w", engine.ErrUncertain)
	}
	if g.failRegister.Load() {
		return fmt.Errorf("fake: cuFileBufRegister: CU_FILE_INTERNAL_ERROR")
	}
	return nil
}
func (g *fakeGDS) DeregisterBuffer(dev int, ptr uint64) error {
	g.deregs.Add(1)
	if g.failDeregister.Load() {
		return errors.New("fake: cuFileBufDeregister: CU_FILE_INTERNAL_ERROR")
	}
	return nil
}

type fakeGDSFile struct {
	g  *fakeGDS
	fd int
}

func (f *fakeGDSFile) Read(dev int, ptr, n, off uint64) (int, error) {
	nth := f.g.reads.Add(1)
	f.g.record(n)
	defer f.g.inCall()()
	if f.g.hang != nil {
		<-f.g.hang
	}
	if f.g.failReads.Add(-1) >= 0 || nth == f.g.failReadNth.Load() {
		return -1, errors.New("fake: cuFileRead: CU_FILE_IO_ERROR")
	}
	return unix.Pread(f.fd, hostBytes(uintptr(ptr), n), int64(off))
}
func (f *fakeGDSFile) Write(dev int, ptr, n, off uint64) (int, error) {
	f.g.writes.Add(1)
	f.g.record(n)
	defer f.g.inCall()()
	if f.g.failWrites.Add(-1) >= 0 {
		return -1, errors.New("fake: cuFileWrite: CU_FILE_IO_ERROR")
	}
	return unix.Pwrite(f.fd, hostBytes(uintptr(ptr), n), int64(off))
}
func (f *fakeGDSFile) Close() error {
	f.g.closed.Add(1)
	if f.g.failClose.Load() {
		return errors.New("fake: cuFileHandleDeregister: CU_FILE_INTERNAL_ERROR")
	}
	return nil
}
