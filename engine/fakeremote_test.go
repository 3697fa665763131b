package engine_test

// fakeremote_test.go: an in-process engine.Remote, a peer's region held
// in memory, with the faults the peer executor must survive: a held
// call (until released or its context ends), a region that shrinks
// (range errors past its end), and a WRITE that fails with a chosen
// effect.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

type fakeRemote struct {
	info engine.RemoteInfo

	mu   sync.Mutex
	data []byte
	size uint64 // the region's current end: calls past it fail Range
	// hold, when set, makes every call on [0, holdEnd) wait until it is
	// closed or the call's context ends; a WRITE so cut returns
	// EffectUnknown (its bytes were on the wire), as a lane closed
	// mid-frame does.
	hold    chan struct{}
	holdEnd uint64
	// failAt, when set, fails the WRITE of the unit starting at
	// failOff with failEffect (once).
	failOff    uint64
	failEffect *engine.RemoteEffect
	// failAfter: the failing WRITE first waits until this many WRITEs
	// were applied (so later units land before an earlier one fails).
	failAfter int64
	applied   atomic.Int64

	reads, writes atomic.Int64
	calls         []string // "read OFF+N", "write OFF+N", in call order
	closed        atomic.Bool
	// gone, when set, is what Err reports: the peer restarted
	// (fakeipc_test.go).
	gone atomic.Pointer[error]
	// exporter records the CUDA IPC mappings announced to the peer
	// (fakeipc_test.go); nil: the peer cannot be told, so none is opened.
	exporter *fakeExporter
}

func newFakeRemote(n int, export engine.Permission, unit uint64) *fakeRemote {
	return &fakeRemote{data: make([]byte, n), size: uint64(n),
		info: engine.RemoteInfo{Address: "127.0.0.1:1", Peer: "fake", Epoch: 7, Region: "kv", Size: uint64(n), Export: export, Lanes: 1, Unit: unit}}
}

var errFakeRange = fmt.Errorf("past the region's end: %w", engine.ErrRange)

// enter records a call and applies hold and size; it reports the error
// the call ends with before touching the region.
func (f *fakeRemote) enter(ctx context.Context, op string, off, n uint64) error {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s %d+%d", op, off, n))
	hold := f.hold
	held := hold != nil && off < f.holdEnd
	f.mu.Unlock()
	if held {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if off+n > f.size {
		return errFakeRange
	}
	return nil
}

func (f *fakeRemote) ReadAt(ctx context.Context, p []byte, off uint64) error {
	f.reads.Add(1)
	if err := f.enter(ctx, "read", off, uint64(len(p))); err != nil {
		return err
	}
	f.mu.Lock()
	copy(p, f.data[off:])
	f.mu.Unlock()
	return nil
}

func (f *fakeRemote) WriteAt(ctx context.Context, p []byte, off uint64) (engine.RemoteEffect, error) {
	f.writes.Add(1)
	f.mu.Lock()
	if f.failEffect != nil && off == f.failOff {
		for f.applied.Load() < f.failAfter && ctx.Err() == nil {
			f.mu.Unlock()
			time.Sleep(time.Millisecond)
			f.mu.Lock()
		}
		eff := *f.failEffect
		f.failEffect = nil
		f.calls = append(f.calls, fmt.Sprintf("write %d+%d", off, len(p)))
		if eff != engine.EffectNone {
			copy(f.data[off:], p[:len(p)/2]) // half landed, the ack was lost
		}
		f.mu.Unlock()
		return eff, errors.New("the connection broke")
	}
	f.mu.Unlock()
	if err := f.enter(ctx, "write", off, uint64(len(p))); err != nil {
		if ctx.Err() != nil {
			return engine.EffectUnknown, err
		}
		return engine.EffectNone, err
	}
	f.mu.Lock()
	copy(f.data[off:], p)
	f.mu.Unlock()
	f.applied.Add(1)
	return engine.EffectApplied, nil
}

func (f *fakeRemote) Info() engine.RemoteInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.info
}
func (f *fakeRemote) Close() error { f.closed.Store(true); return nil }

// bytes returns a copy of the region.
func (f *fakeRemote) bytes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.data[:f.size]...)
}

// callLog returns the calls so far.
func (f *fakeRemote) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
