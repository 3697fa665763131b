package engine_test

// fakeipc_test.go gives the fake GPU (fakegpu_test.go) CUDA IPC: a
// handle names a live fake allocation by address, an import maps that
// same memory (as two processes on one GPU see one allocation), and
// streams queue device-to-device copies in order with the fake's faults
// (hang, slowCopy, failEvent through the events); dma skips the bytes.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// ipcMagic marks the fake's handles; the rest of the 64 bytes is zero.
const ipcMagic = 0x4f524249_54454950

// IPCHandle exports a fake allocation.
func (d *fakeMem) IPCHandle() ([]byte, error) {
	h := make([]byte, 64)
	binary.LittleEndian.PutUint64(h, ipcMagic)
	binary.LittleEndian.PutUint64(h[8:], d.m.Addr())
	return h, nil
}

func (f *fakeGPU) importIPC(dev int, h []byte) (engine.DeviceMemory, error) {
	f.importTries.Add(1)
	if f.failImport.Load() {
		return nil, errors.New("fake: cuIpcOpenMemHandle: CUDA_ERROR_INVALID_HANDLE")
	}
	if len(h) != 64 || binary.LittleEndian.Uint64(h) != ipcMagic {
		return nil, fmt.Errorf("fake: cuIpcOpenMemHandle: %d bytes, not a fake handle", len(h))
	}
	ptr := binary.LittleEndian.Uint64(h[8:])
	f.mu.Lock()
	m, ok := f.allocs[ptr]
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("fake: cuIpcOpenMemHandle: no allocation at %#x", ptr)
	}
	f.ipcOpen.Add(1)
	return &fakeIPCMem{f: f, dev: dev, ptr: m.Addr(), n: m.Len()}, nil
}

// fakeIPCMem is an imported mapping: the exporter's bytes, not its own.
type fakeIPCMem struct {
	f      *fakeGPU
	dev    int
	ptr, n uint64
	closed bool
}

func (d *fakeIPCMem) Device() int { return d.dev }
func (d *fakeIPCMem) Ptr() uint64 { return d.ptr }
func (d *fakeIPCMem) Len() uint64 { return 0 }
func (d *fakeIPCMem) CopyOut(p []byte, off uint64) error {
	copy(p, hostBytes(uintptr(d.ptr+off), uint64(len(p))))
	return nil
}
func (d *fakeIPCMem) CopyIn(off uint64, p []byte) error {
	copy(hostBytes(uintptr(d.ptr+off), uint64(len(p))), p)
	return nil
}
func (d *fakeIPCMem) Free() error {
	if d.closed {
		return errors.New("fake: cuIpcCloseMemHandle twice")
	}
	d.closed = true
	d.f.ipcOpen.Add(-1)
	d.f.ipcClosed.Add(1)
	return nil
}

// DtoD queues a device-to-device copy; failDtoD refuses it at the queue.
func (s *fakeStream) DtoD(dst, src, n uint64) error {
	s.f.calls.Add(1)
	if s.f.failDtoD.Load() {
		return errors.New("fake: cuMemcpyDtoDAsync: CUDA_ERROR_INVALID_VALUE")
	}
	s.f.dtods.Add(1)
	if s.f.onDtoD != nil {
		s.f.onDtoD(dst, src, n)
	}
	s.work <- func() {
		if s.f.hang != nil {
			<-s.f.hang
		}
		if d := s.f.slowCopy.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		// A real copy into freed device memory faults the GPU context,
		// not this process: the fake skips it (an uncertain copy released
		// after its test freed the memory).
		s.f.mu.Lock()
		if !s.f.dma.Load() && s.f.liveLocked(dst, n) && s.f.liveLocked(src, n) {
			copy(hostBytes(uintptr(dst), n), hostBytes(uintptr(src), n))
		}
		s.f.mu.Unlock()
		s.f.copies.Add(1)
		if s.f.onDtoDDone != nil {
			s.f.onDtoDDone(dst, src, n)
		}
	}
	return nil
}

// liveLocked reports whether [addr, addr+n) lies in a live allocation.
// REQUIRES: f.mu.
func (f *fakeGPU) liveLocked(addr, n uint64) bool {
	for base, m := range f.allocs {
		if addr >= base && addr+n <= base+m.Len() {
			return true
		}
	}
	return false
}

// exportIPC makes f's region a fake device allocation of n bytes on e,
// announced with its IPC handle: TCP calls and IPC copies then reach the
// same bytes, as with a real peer.
func (f *fakeRemote) exportIPC(t *testing.T, e *engine.Engine, n int) *engine.Region {
	t.Helper()
	exp := deviceRegion(t, e, 0, uint64(n))
	h, err := exp.IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	f.data = hostBytes(uintptr(exp.BaseAddress()), uint64(n))
	f.info.IPC = &engine.RemoteIPC{Device: 0, Handle: h}
	f.exporter = &fakeExporter{region: exp}
	return exp
}

// fakeExporter is the peer's side of the mapping announcements: it holds
// the exported region for each acknowledged mapping, as the peer server
// does (engine.Region.HoldIPC).
type fakeExporter struct {
	region *engine.Region
	// ack, when set, is what an announcement waits for before the
	// exporter acknowledges it (the reply in flight); asked is closed
	// when one arrives.
	ack, asked    chan struct{}
	maps, unmaps  atomic.Int64
	dropped       atomic.Bool // the connection ended: unmaps are not sent
	announceEpoch atomic.Uint64
}

const fakeHolder = "importer (session 1)"

// AnnounceIPC holds the exported region for one mapping once the fake
// exporter acknowledges it.
func (f *fakeRemote) AnnounceIPC(ctx context.Context, epoch uint64) (func(), error) {
	x := f.exporter
	if x == nil {
		return nil, errors.New("fake: no exporter to tell")
	}
	if epoch != f.info.Epoch {
		return nil, fmt.Errorf("fake: epoch %d, the peer is in %d", epoch, f.info.Epoch)
	}
	x.announceEpoch.Store(epoch)
	if x.asked != nil {
		close(x.asked)
	}
	if x.ack != nil {
		select {
		case <-x.ack:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := x.region.HoldIPC(fakeHolder); err != nil {
		return nil, err
	}
	x.maps.Add(1)
	return func() {
		if x.dropped.Load() {
			return
		}
		x.unmaps.Add(1)
		x.region.ReleaseIPC(fakeHolder, 1)
	}, nil
}

// Err is the fake peer's health: nil until gone is set.
func (f *fakeRemote) Err() error {
	if p := f.gone.Load(); p != nil {
		return *p
	}
	return nil
}
