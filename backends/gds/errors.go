// errors.go owns the package's error kinds: sentinels a caller branches on
// and the *Error that carries what cuFile itself answered.
//
// Invariants:
//   - Every error a public function returns wraps exactly one sentinel
//     below, so errors.Is(err, ErrUnavailable) etc. classify it.
//   - A cuFile status, a negative CUfileOpError return and a -1+errno
//     return all become one *Error naming the cuFile function.

package gds

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrUnavailable: cuFile cannot be used in this process (library or
	// symbol missing, driver open or property read failed).
	ErrUnavailable = errors.New("gds unavailable")
	// ErrNotDirect: the fd was not opened with O_DIRECT.
	ErrNotDirect = errors.New("gds needs an O_DIRECT file descriptor")
	// ErrIneligible: the file cannot be registered with cuFile (no block
	// device behind it, e.g. tmpfs; unsupported file type; missing udev
	// entry; I/O disabled by configuration).
	ErrIneligible = errors.New("file not eligible for gds")
	// ErrBufferRegistration: cuFileBufRegister or Deregister failed; the
	// region stays usable by other transports.
	ErrBufferRegistration = errors.New("gds buffer registration failed")
	// ErrIO: a read, write or batch slice failed.
	ErrIO = errors.New("gds i/o failed")
	// ErrInvalid: a bad argument (zero or oversized length, negative offset,
	// depth out of range); nothing was changed.
	ErrInvalid = errors.New("gds invalid argument")
	// ErrBusy: Destroy was called with slices still in flight (only
	// terminal receipts authorize releasing what a slice names).
	ErrBusy = errors.New("gds batch has slices in flight")
	// ErrCanceled: the slice was canceled before it completed.
	ErrCanceled = errors.New("gds slice canceled")
	// ErrClosed: the driver, handle or batch is closed.
	ErrClosed = errors.New("gds object closed")
	// ErrForked: the object belongs to the parent of a fork.
	ErrForked = errors.New("gds object belongs to the parent process (forked)")
)

// OpError is a CUfileOpError code (0 or 5000 + n).
type OpError int32

const opBase = 5000

// Codes named by cufile.h (CUFILEOP_STATUS_ENTRIES).
const (
	OpSuccess              OpError = 0
	OpDriverNotInitialized OpError = opBase + 1
	OpPlatformNotSupported OpError = opBase + 7
	OpIONotSupported       OpError = opBase + 8
	OpCUDADriverError      OpError = opBase + 11
	OpInvalidFileType      OpError = opBase + 18
	OpInvalidFileOpenFlag  OpError = opBase + 19
	OpDIONotSet            OpError = opBase + 20
	OpMemoryAlreadyRegd    OpError = opBase + 23
	OpHandleNotRegistered  OpError = opBase + 27
	OpHandleAlreadyRegd    OpError = opBase + 28
	OpIODisabled           OpError = opBase + 34
	OpBatchNoCompat        OpError = opBase + 49
	opLast                 OpError = opBase + 50
)

// opNames maps each code to its cufile.h name and description.
var opNames = map[OpError][2]string{
	0:           {"CU_FILE_SUCCESS", "success"},
	opBase + 1:  {"CU_FILE_DRIVER_NOT_INITIALIZED", "nvidia-fs driver not loaded and compatibility mode off"},
	opBase + 2:  {"CU_FILE_DRIVER_INVALID_PROPS", "invalid property"},
	opBase + 3:  {"CU_FILE_DRIVER_UNSUPPORTED_LIMIT", "property range error"},
	opBase + 4:  {"CU_FILE_DRIVER_VERSION_MISMATCH", "nvidia-fs driver version mismatch"},
	opBase + 5:  {"CU_FILE_DRIVER_VERSION_READ_ERROR", "nvidia-fs driver version read error"},
	opBase + 6:  {"CU_FILE_DRIVER_CLOSING", "driver shutdown in progress"},
	opBase + 7:  {"CU_FILE_PLATFORM_NOT_SUPPORTED", "not supported on this platform"},
	opBase + 8:  {"CU_FILE_IO_NOT_SUPPORTED", "not supported on this file"},
	opBase + 9:  {"CU_FILE_DEVICE_NOT_SUPPORTED", "not supported on this GPU"},
	opBase + 10: {"CU_FILE_NVFS_DRIVER_ERROR", "nvidia-fs ioctl error"},
	opBase + 11: {"CU_FILE_CUDA_DRIVER_ERROR", "CUDA driver API error"},
	opBase + 12: {"CU_FILE_CUDA_POINTER_INVALID", "invalid device pointer"},
	opBase + 13: {"CU_FILE_CUDA_MEMORY_TYPE_INVALID", "invalid pointer memory type"},
	opBase + 14: {"CU_FILE_CUDA_POINTER_RANGE_ERROR", "pointer range exceeds the allocation"},
	opBase + 15: {"CU_FILE_CUDA_CONTEXT_MISMATCH", "CUDA context mismatch"},
	opBase + 16: {"CU_FILE_INVALID_MAPPING_SIZE", "access beyond the maximum pinned size"},
	opBase + 17: {"CU_FILE_INVALID_MAPPING_RANGE", "access beyond the mapped size"},
	opBase + 18: {"CU_FILE_INVALID_FILE_TYPE", "unsupported file type"},
	opBase + 19: {"CU_FILE_INVALID_FILE_OPEN_FLAG", "unsupported file open flags"},
	opBase + 20: {"CU_FILE_DIO_NOT_SET", "fd has no O_DIRECT"},
	opBase + 22: {"CU_FILE_INVALID_VALUE", "invalid argument"},
	opBase + 23: {"CU_FILE_MEMORY_ALREADY_REGISTERED", "device pointer already registered"},
	opBase + 24: {"CU_FILE_MEMORY_NOT_REGISTERED", "device pointer not registered"},
	opBase + 25: {"CU_FILE_PERMISSION_DENIED", "driver or file access error"},
	opBase + 26: {"CU_FILE_DRIVER_ALREADY_OPEN", "driver already open"},
	opBase + 27: {"CU_FILE_HANDLE_NOT_REGISTERED", "file not registered"},
	opBase + 28: {"CU_FILE_HANDLE_ALREADY_REGISTERED", "file already registered"},
	opBase + 29: {"CU_FILE_DEVICE_NOT_FOUND", "GPU device not found"},
	opBase + 30: {"CU_FILE_INTERNAL_ERROR", "internal error"},
	opBase + 31: {"CU_FILE_GETNEWFD_FAILED", "failed to obtain a new fd"},
	opBase + 33: {"CU_FILE_NVFS_SETUP_ERROR", "nvidia-fs initialization error"},
	opBase + 34: {"CU_FILE_IO_DISABLED", "GDS disabled by configuration for this file"},
	opBase + 35: {"CU_FILE_BATCH_SUBMIT_FAILED", "batch submit failed"},
	opBase + 36: {"CU_FILE_GPU_MEMORY_PINNING_FAILED", "GPU memory pinning failed"},
	opBase + 37: {"CU_FILE_BATCH_FULL", "batch queue full"},
	opBase + 38: {"CU_FILE_ASYNC_NOT_SUPPORTED", "stream operation not supported"},
	opBase + 39: {"CU_FILE_INTERNAL_BATCH_SETUP_ERROR", "batch setup internal error"},
	opBase + 40: {"CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR", "batch submit internal error"},
	opBase + 41: {"CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR", "batch status internal error"},
	opBase + 42: {"CU_FILE_INTERNAL_BATCH_CANCEL_ERROR", "batch cancel internal error"},
	opBase + 43: {"CU_FILE_NOMEM_ERROR", "out of memory"},
	opBase + 44: {"CU_FILE_IO_ERROR", "i/o error"},
	opBase + 45: {"CU_FILE_INTERNAL_BUF_REGISTER_ERROR", "buffer registration error"},
	opBase + 46: {"CU_FILE_HASH_OPR_ERROR", "hash operation error"},
	opBase + 47: {"CU_FILE_INVALID_CONTEXT_ERROR", "invalid CUDA context"},
	opBase + 48: {"CU_FILE_NVFS_INTERNAL_DRIVER_ERROR", "nvidia-fs internal driver error"},
	opBase + 49: {"CU_FILE_BATCH_NOCOMPAT_ERROR", "batch I/O needs compatibility mode off"},
	opBase + 50: {"CU_FILE_IO_MAX_ERROR", "max error"},
}

// Name is the cufile.h identifier, or "CUfileOpError(n)".
func (c OpError) Name() string {
	if n, ok := opNames[c]; ok {
		return n[0]
	}
	return fmt.Sprintf("CUfileOpError(%d)", int32(c))
}

func (c OpError) Error() string {
	if n, ok := opNames[c]; ok {
		return fmt.Sprintf("%s (%d): %s", n[0], int32(c), n[1])
	}
	return fmt.Sprintf("CUfileOpError(%d)", int32(c))
}

// Error is one failed cuFile call.
type Error struct {
	Func     string        // cuFile function, e.g. "cuFileHandleRegister"
	Code     OpError       // 0 when the failure is an errno alone
	CUResult int32         // CUDA driver result when Code is CU_FILE_CUDA_DRIVER_ERROR
	Errno    syscall.Errno // from a -1 return, or 0
	kind     error         // the sentinel this failure falls under
}

func (e *Error) Error() string {
	s := e.Func + ": "
	switch {
	case e.Code != 0:
		s += e.Code.Error()
		if e.Code == OpCUDADriverError {
			s += fmt.Sprintf(" (CUresult %d)", e.CUResult)
		}
	case e.Errno != 0:
		s += fmt.Sprintf("%s (errno %d)", e.Errno.Error(), int(e.Errno))
	default:
		s += "failed"
	}
	return s
}

// Unwrap lets errors.Is match the sentinel, the code and the errno.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, 3)
	if e.kind != nil {
		out = append(out, e.kind)
	}
	if e.Code != 0 {
		out = append(out, e.Code)
	}
	if e.Errno != 0 {
		out = append(out, e.Errno)
	}
	return out
}

// statusError turns a CUfileError_t (returned by value in one register:
// err in the low 32 bits, cu_err in the high 32) into an error, nil on
// success.
func statusError(fn string, raw uint64, kind error) error {
	code := OpError(int32(uint32(raw)))
	if code == OpSuccess {
		return nil
	}
	return &Error{Func: fn, Code: code, CUResult: int32(uint32(raw >> 32)), kind: classify(code, kind)}
}

// ioError turns a negative cuFileRead/Write return into an error: -1 means
// errno, a value below -1 is a negated CUfileOpError.
func ioError(fn string, ret int64, errno syscall.Errno) error {
	if ret == -1 {
		return &Error{Func: fn, Errno: errno, kind: ErrIO}
	}
	code := OpError(-ret)
	return &Error{Func: fn, Code: code, kind: classify(code, ErrIO)}
}

// classify picks the sentinel for a code; def when the code has no more
// specific meaning.
func classify(code OpError, def error) error {
	switch code {
	case OpDIONotSet, OpInvalidFileOpenFlag:
		return ErrNotDirect
	case OpIONotSupported, OpInvalidFileType, OpIODisabled, OpPlatformNotSupported:
		return ErrIneligible
	case OpDriverNotInitialized:
		return ErrUnavailable
	}
	return def
}
