// cuda_test.go is a test-only CUDA driver loader (libcuda.so.1 through
// purego): the primary context of device 0, device allocations and
// copies, and a ContextBinder. backends/cuda replaces it in the engine.

package gds

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/ebitengine/purego"
)

type testCUDA struct {
	ctx        uintptr
	setCurrent func(uintptr) int32
	memAlloc   func(*uint64, uint64) int32
	memFree    func(uint64) int32
	htod       func(uint64, *byte, uint64) int32
	dtoh       func(*byte, uint64, uint64) int32
	memsetD8   func(uint64, uint8, uint64) int32
}

var (
	cudaOnce sync.Once
	cudaT    *testCUDA
	cudaErr  error
)

// loadCUDA loads libcuda once per test binary and retains device 0's
// primary context.
func loadCUDA() (*testCUDA, error) {
	cudaOnce.Do(func() { cudaT, cudaErr = loadCUDAOnce() })
	return cudaT, cudaErr
}

func loadCUDAOnce() (*testCUDA, error) {
	h, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("load libcuda.so.1: %w", err)
	}
	c := &testCUDA{}
	var (
		cuInit    func(uint32) int32
		devGet    func(*int32, int32) int32
		ctxRetain func(*uintptr, int32) int32
	)
	for _, s := range []struct {
		name string
		fp   any
	}{
		{"cuInit", &cuInit}, {"cuDeviceGet", &devGet}, {"cuDevicePrimaryCtxRetain", &ctxRetain},
		{"cuCtxSetCurrent", &c.setCurrent}, {"cuMemAlloc_v2", &c.memAlloc}, {"cuMemFree_v2", &c.memFree},
		{"cuMemcpyHtoD_v2", &c.htod}, {"cuMemcpyDtoH_v2", &c.dtoh}, {"cuMemsetD8_v2", &c.memsetD8},
	} {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("libcuda.so.1 lacks %s: %w", s.name, err)
		}
		purego.RegisterFunc(s.fp, sym)
	}
	if r := cuInit(0); r != 0 {
		return nil, fmt.Errorf("cuInit: CUresult %d", r)
	}
	var dev int32
	if r := devGet(&dev, 0); r != 0 {
		return nil, fmt.Errorf("cuDeviceGet(0): CUresult %d", r)
	}
	if r := ctxRetain(&c.ctx, dev); r != 0 {
		return nil, fmt.Errorf("cuDevicePrimaryCtxRetain: CUresult %d", r)
	}
	return c, nil
}

// Bind implements ContextBinder: lock the thread, make the primary context
// current, run fn.
func (c *testCUDA) Bind(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := c.setCurrent(c.ctx); r != 0 {
		return fmt.Errorf("cuCtxSetCurrent: CUresult %d", r)
	}
	return fn()
}

func (c *testCUDA) check(name string, r int32) error {
	if r != 0 {
		return fmt.Errorf("%s: CUresult %d", name, r)
	}
	return nil
}

func (c *testCUDA) alloc(n int) (uintptr, error) {
	var p uint64
	err := c.Bind(func() error { return c.check("cuMemAlloc_v2", c.memAlloc(&p, uint64(n))) })
	return uintptr(p), err
}

func (c *testCUDA) free(p uintptr) error {
	return c.Bind(func() error { return c.check("cuMemFree_v2", c.memFree(uint64(p))) })
}

func (c *testCUDA) toDevice(p uintptr, b []byte) error {
	return c.Bind(func() error { return c.check("cuMemcpyHtoD_v2", c.htod(uint64(p), &b[0], uint64(len(b)))) })
}

func (c *testCUDA) fromDevice(b []byte, p uintptr) error {
	return c.Bind(func() error { return c.check("cuMemcpyDtoH_v2", c.dtoh(&b[0], uint64(p), uint64(len(b)))) })
}

func (c *testCUDA) memset(p uintptr, v byte, n int) error {
	return c.Bind(func() error { return c.check("cuMemsetD8_v2", c.memsetD8(uint64(p), v, uint64(n))) })
}
