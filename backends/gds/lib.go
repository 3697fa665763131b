// lib.go owns loading libcufile.so.0 and resolving its symbols. It is the
// only file that touches purego.
//
// Invariants:
//   - The search order is: $ORBITEFS_LIBCUFILE (alone, when set), the
//     loader path (plain soname), then the CUDA toolkit's lib64 folders.
//   - Every required symbol resolves or the load fails naming it; optional
//     symbols (the parameter API, the batch API) may be zero.
//   - CUfileError_t (8 bytes, two int32) is returned in one register, so
//     every status-returning function is declared as returning uint64.

package gds

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// EnvLibrary overrides the library path (searched alone when set).
const EnvLibrary = "ORBITEFS_LIBCUFILE"

// soname is the library the package loads.
const soname = "libcufile.so.0"

// searchDirs are tried after the loader path.
var searchDirs = []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"}

// Structures of cufile.h, laid out for linux/amd64 and arm64 (LP64).
type (
	cuFileDescr struct {
		typ   int32 // CU_FILE_HANDLE_TYPE_OPAQUE_FD
		_     int32
		fd    int32 // union { int fd; void *handle; }
		_     int32
		fsOps uintptr
	}
	ioParams struct {
		mode       int32 // CUFILE_BATCH
		_          int32
		devPtr     uintptr
		fileOffset int64
		devOffset  int64
		size       uint64
		fh         uintptr
		opcode     int32
		_          int32
		cookie     uintptr
	}
	ioEvent struct {
		cookie uintptr
		status int32
		_      int32
		ret    uint64 // bytes done, or a negative error
	}
	drvProps struct {
		nvfsMajor, nvfsMinor      uint32
		pollThreshKB, maxDirectKB uint64
		dstatusFlags, dcontrolFlg uint32
		fflags                    uint32
		maxDeviceCacheKB          uint32
		perBufferCacheKB          uint32
		maxPinnedMemKB            uint32
		maxBatchIOSize            uint32
		maxBatchIOTimeoutMs       uint32
	}
	timespec struct{ sec, nsec int64 }
)

const (
	handleTypeOpaqueFD = 1
	batchMode          = 1
	opRead             = 0
	opWrite            = 1

	statusWaiting  = 0x01
	statusPending  = 0x02
	statusInvalid  = 0x04
	statusCanceled = 0x08
	statusComplete = 0x10
	statusTimeout  = 0x20
	statusFailed   = 0x40

	paramAllowCompat      = 1 // CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE
	paramForceCompat      = 2 // CUFILE_PARAM_FORCE_COMPAT_MODE
	controlAllowCompatBit = 1 // CU_FILE_ALLOW_COMPAT_MODE in dcontrolflags
	featureBatchIOBit     = 1 // CU_FILE_BATCH_IO_SUPPORTED in fflags
)

// Size checks against cufile.h: the build fails unless each size is
// exactly the C one.
var (
	_ [24 - unsafe.Sizeof(cuFileDescr{})]byte
	_ [64 - unsafe.Sizeof(ioParams{})]byte
	_ [24 - unsafe.Sizeof(ioEvent{})]byte
	_ [56 - unsafe.Sizeof(drvProps{})]byte
	_ [unsafe.Sizeof(cuFileDescr{}) - 24]byte
	_ [unsafe.Sizeof(ioParams{}) - 64]byte
	_ [unsafe.Sizeof(ioEvent{}) - 24]byte
	_ [unsafe.Sizeof(drvProps{}) - 56]byte
)

// library is the resolved function table of one loaded libcufile.
type library struct {
	path string

	driverOpen      func() uint64
	driverClose     func() uint64
	getProperties   func(*drvProps) uint64
	handleRegister  func(*uintptr, *cuFileDescr) uint64
	handleDereg     func(uintptr)
	bufRegister     func(uintptr, uint64, int32) uint64
	bufDeregister   func(uintptr) uint64
	read            func(uintptr, uintptr, uint64, int64, int64) int64
	write           func(uintptr, uintptr, uint64, int64, int64) int64
	getParamBool    func(int32, *byte) uint64 // optional
	batchSetUp      func(*uintptr, uint32) uint64
	batchSubmit     func(uintptr, uint32, *ioParams, uint32) uint64
	batchGetStatus  func(uintptr, uint32, *uint32, *ioEvent, *timespec) uint64
	batchCancel     func(uintptr) uint64
	batchDestroy    func(uintptr)
	errnoLocation   func() *int32 // libc __errno_location, optional
	hasBatch        bool
	hasParamBoolAPI bool
}

// lastErrno reads the calling thread's C errno. It is meaningful only
// right after a cuFile call on the same locked thread (purego does not
// capture errno on Linux); 0 when libc's accessor was not found.
func (l *library) lastErrno() int32 {
	if l.errnoLocation == nil {
		return 0
	}
	return *l.errnoLocation()
}

// loadLibrary finds and loads libcufile and resolves its symbols. Errors
// wrap ErrUnavailable and name every path tried or the missing symbol.
func loadLibrary() (*library, error) {
	candidates := []string{soname}
	if p := os.Getenv(EnvLibrary); p != "" {
		candidates = []string{p}
	} else {
		for _, d := range searchDirs {
			candidates = append(candidates, filepath.Join(d, soname))
		}
	}
	var tried []string
	var h uintptr
	var path string
	for _, c := range candidates {
		var err error
		h, err = purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			path = c
			break
		}
		tried = append(tried, fmt.Sprintf("%s: %v", c, err))
	}
	if h == 0 {
		return nil, fmt.Errorf("%w: cannot load %s (tried %s)", ErrUnavailable, soname, strings.Join(tried, "; "))
	}
	lib := &library{path: path}
	required := []struct {
		name string
		fp   any
	}{
		{"cuFileDriverOpen", &lib.driverOpen},
		{"cuFileDriverClose_v2", &lib.driverClose},
		{"cuFileDriverGetProperties", &lib.getProperties},
		{"cuFileHandleRegister", &lib.handleRegister},
		{"cuFileHandleDeregister", &lib.handleDereg},
		{"cuFileBufRegister", &lib.bufRegister},
		{"cuFileBufDeregister", &lib.bufDeregister},
		{"cuFileRead", &lib.read},
		{"cuFileWrite", &lib.write},
	}
	for _, s := range required {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil || sym == 0 {
			return nil, fmt.Errorf("%w: %s lacks symbol %s: %v", ErrUnavailable, path, s.name, err)
		}
		purego.RegisterFunc(s.fp, sym)
	}
	if sym, err := purego.Dlsym(h, "cuFileGetParameterBool"); err == nil && sym != 0 {
		purego.RegisterFunc(&lib.getParamBool, sym)
		lib.hasParamBoolAPI = true
	}
	batch := []struct {
		name string
		fp   any
	}{
		{"cuFileBatchIOSetUp", &lib.batchSetUp},
		{"cuFileBatchIOSubmit", &lib.batchSubmit},
		{"cuFileBatchIOGetStatus", &lib.batchGetStatus},
		{"cuFileBatchIOCancel", &lib.batchCancel},
		{"cuFileBatchIODestroy", &lib.batchDestroy},
	}
	if libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL); err == nil {
		if sym, err := purego.Dlsym(libc, "__errno_location"); err == nil && sym != 0 {
			purego.RegisterFunc(&lib.errnoLocation, sym)
		}
	}
	lib.hasBatch = true
	for _, s := range batch {
		sym, err := purego.Dlsym(h, s.name)
		if err != nil || sym == 0 {
			lib.hasBatch = false
			break
		}
		purego.RegisterFunc(s.fp, sym)
	}
	return lib, nil
}
