// load.go owns finding and loading libcuda.so.1 at run time and resolving
// every driver symbol the package calls. Nothing is loaded before Open.
//
// Invariants:
//   - Every symbol in symbolNames is resolved before Open returns a
//     Driver, so a call never meets a nil function pointer.
//   - The _v2 names are used wherever cuda.h maps the plain name to them
//     by macro; dlsym of the plain name would return the legacy ABI.
//   - The library is never dlclosed: contexts, pinned memory and driver
//     threads outlive any one Driver, and unloading under them crashes.

package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ebitengine/purego"
)

// LibraryName is the soname the driver is loaded by.
const LibraryName = "libcuda.so.1"

// EnvLibrary overrides where libcuda is loaded from (a full path).
const EnvLibrary = "ORBITEFS_LIBCUDA"

// fallbackDirs are searched after the loader path fails.
var fallbackDirs = []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/compat"}

// funcs holds the resolved driver entry points.
type funcs struct {
	init, driverGetVersion, getErrorName                                   uintptr
	deviceGetCount, deviceGet, deviceGetName                               uintptr
	primaryCtxRetain, primaryCtxRelease, ctxSetCurrent, ctxSynchronize     uintptr
	memAlloc, memFree, memGetInfo, memsetD8                                uintptr
	memHostAlloc, memFreeHost, memHostRegister, memHostUnregister          uintptr
	memcpyHtoD, memcpyDtoH, memcpyDtoD, memcpyHtoDAsync, memcpyDtoHAsync   uintptr
	memcpyDtoDAsync                                                        uintptr
	streamCreate, streamDestroy, streamSynchronize, streamWaitEvent        uintptr
	eventCreate, eventRecord, eventQuery, eventSynchronize, eventDestroy   uintptr
	ipcGetMemHandle, ipcOpenMemHandle, ipcCloseMemHandle, pointerGetAttrib uintptr

	// Optional (batch.go): zero where the driver lacks them.
	getProcAddress uintptr // cuGetProcAddress_v2 (CUDA 12.0)
	memcpyBatch    uintptr // cuMemcpyBatchAsync at the ABI memcpyBatchABI names
	memcpyBatchABI int     // the CUDA version whose signature memcpyBatch has
}

// symbolNames pairs each entry point with its exported name.
func (f *funcs) symbolNames() []struct {
	name string
	dst  *uintptr
} {
	return []struct {
		name string
		dst  *uintptr
	}{
		{"cuInit", &f.init}, {"cuDriverGetVersion", &f.driverGetVersion},
		{"cuGetErrorName", &f.getErrorName},
		{"cuDeviceGetCount", &f.deviceGetCount}, {"cuDeviceGet", &f.deviceGet},
		{"cuDeviceGetName", &f.deviceGetName},
		{"cuDevicePrimaryCtxRetain", &f.primaryCtxRetain},
		{"cuDevicePrimaryCtxRelease_v2", &f.primaryCtxRelease},
		{"cuCtxSetCurrent", &f.ctxSetCurrent}, {"cuCtxSynchronize", &f.ctxSynchronize},
		{"cuMemAlloc_v2", &f.memAlloc}, {"cuMemFree_v2", &f.memFree},
		{"cuMemGetInfo_v2", &f.memGetInfo}, {"cuMemsetD8_v2", &f.memsetD8},
		{"cuMemHostAlloc", &f.memHostAlloc}, {"cuMemFreeHost", &f.memFreeHost},
		{"cuMemHostRegister_v2", &f.memHostRegister},
		{"cuMemHostUnregister", &f.memHostUnregister},
		{"cuMemcpyHtoD_v2", &f.memcpyHtoD}, {"cuMemcpyDtoH_v2", &f.memcpyDtoH},
		{"cuMemcpyDtoD_v2", &f.memcpyDtoD},
		{"cuMemcpyHtoDAsync_v2", &f.memcpyHtoDAsync},
		{"cuMemcpyDtoHAsync_v2", &f.memcpyDtoHAsync},
		{"cuMemcpyDtoDAsync_v2", &f.memcpyDtoDAsync},
		{"cuStreamCreate", &f.streamCreate}, {"cuStreamDestroy_v2", &f.streamDestroy},
		{"cuStreamSynchronize", &f.streamSynchronize},
		{"cuStreamWaitEvent", &f.streamWaitEvent},
		{"cuEventCreate", &f.eventCreate}, {"cuEventRecord", &f.eventRecord},
		{"cuEventQuery", &f.eventQuery}, {"cuEventSynchronize", &f.eventSynchronize},
		{"cuEventDestroy_v2", &f.eventDestroy},
		{"cuIpcGetMemHandle", &f.ipcGetMemHandle},
		{"cuIpcOpenMemHandle_v2", &f.ipcOpenMemHandle},
		{"cuIpcCloseMemHandle", &f.ipcCloseMemHandle},
		{"cuPointerGetAttribute", &f.pointerGetAttrib},
	}
}

// candidates lists where Open tries the library, in order.
func candidates(override string) []string {
	if override != "" {
		return []string{override}
	}
	c := []string{LibraryName} // the dynamic loader's own search path
	for _, d := range fallbackDirs {
		c = append(c, filepath.Join(d, LibraryName))
	}
	return c
}

// load dlopens the first candidate that loads and resolves every symbol.
// The error wraps ErrUnavailable and names the library and each place
// tried with the reason it failed there.
func load(override string) (uintptr, *funcs, string, error) {
	var tried []string
	for _, path := range candidates(override) {
		if strings.ContainsRune(path, '/') {
			if _, err := os.Stat(path); err != nil {
				tried = append(tried, fmt.Sprintf("%s: %v", path, errors.Unwrap(err)))
				continue
			}
		}
		h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		f := &funcs{}
		var missing []string
		for _, s := range f.symbolNames() {
			p, err := purego.Dlsym(h, s.name)
			if err != nil || p == 0 {
				missing = append(missing, s.name)
				continue
			}
			*s.dst = p
		}
		if len(missing) > 0 {
			// This library is not a usable driver; let the loader drop it.
			_ = purego.Dlclose(h)
			tried = append(tried, fmt.Sprintf("%s: missing symbols %s", path, strings.Join(missing, ",")))
			continue
		}
		if p, err := purego.Dlsym(h, "cuGetProcAddress_v2"); err == nil {
			f.getProcAddress = p
		}
		return h, f, path, nil
	}
	src := "searched"
	if override != "" {
		src = "from " + EnvLibrary
	}
	return 0, nil, "", fmt.Errorf("%w: cannot load %s (%s: %s)", ErrUnavailable, LibraryName, src, strings.Join(tried, "; "))
}
