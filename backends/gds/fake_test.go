// fake_test.go is a test-only cuFile: a library table of Go functions that
// count calls and inject failures, so the driver's sharing, PID guard and
// batch bookkeeping are tested on machines without a GPU. Data paths are
// tested only against the real library (gpu_test.go).

package gds

import (
	"sync"
	"sync/atomic"
)

type fakeCuFile struct {
	opens, closes atomic.Int32
	openStatus    uint64 // returned by cuFileDriverOpen
	propsStatus   uint64
	allow, force  byte
	readCalls     atomic.Int32
	readGate      chan struct{} // when non-nil, each read waits for one token
	mu            sync.Mutex
}

func (f *fakeCuFile) library() *library {
	return &library{
		path:        "fake-libcufile",
		driverOpen:  func() uint64 { f.opens.Add(1); return f.openStatus },
		driverClose: func() uint64 { f.closes.Add(1); return 0 },
		getProperties: func(p *drvProps) uint64 {
			p.maxDirectKB = 16384
			p.maxBatchIOSize = 128
			return f.propsStatus
		},
		handleRegister: func(fh *uintptr, _ *cuFileDescr) uint64 { *fh = 1; return 0 },
		handleDereg:    func(uintptr) {},
		read: func(_ uintptr, _ uintptr, n uint64, _ int64, _ int64) int64 {
			f.readCalls.Add(1)
			if f.readGate != nil {
				<-f.readGate
			}
			return int64(n)
		},
		getParamBool: func(param int32, v *byte) uint64 {
			switch param {
			case paramAllowCompat:
				*v = f.allow
			case paramForceCompat:
				*v = f.force
			}
			return 0
		},
		hasParamBoolAPI: true,
	}
}

// fakeProcess is a processState over f whose PID the test controls.
func fakeProcess(f *fakeCuFile, pid *atomic.Int64) *processState {
	return &processState{
		load:   func() (*library, error) { return f.library(), nil },
		getpid: func() int { return int(pid.Load()) },
	}
}

// noBinder runs fn in place (the fake needs no context).
var noBinder = BindFunc(func(fn func() error) error { return fn() })
