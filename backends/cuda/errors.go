// errors.go owns the package's error values: the sentinels that callers
// match with errors.Is, the CUresult type, and *Error, which carries the
// driver function that failed and the CUresult it returned.
//
// Invariant: every CUresult the package receives goes through check, so no
// driver failure is dropped and every one names its operation.

package cuda

import (
	"errors"
	"fmt"
)

var (
	// ErrUnavailable: libcuda could not be loaded or initialised (no
	// library, a library without the needed symbols, cuInit failed). The
	// mount turns it into EOPNOTSUPP; tests skip on it.
	ErrUnavailable = errors.New("cuda unavailable")
	// ErrNoDevice: the asked device ordinal does not exist.
	ErrNoDevice = errors.New("no such cuda device")
	// ErrClosed: the object was used after Close/Free/Destroy.
	ErrClosed = errors.New("cuda object closed")
	// ErrExhausted: a pinned pool has no free chunk right now.
	ErrExhausted = errors.New("pinned pool exhausted")
	// ErrInvalid: an argument was refused before reaching the driver.
	ErrInvalid = errors.New("invalid cuda argument")
)

// Result is a CUresult. It is itself an error so that
// errors.Is(err, cuda.ErrorOutOfMemory) matches any *Error carrying it.
type Result uint32

// The CUresults the package or its callers act on.
const (
	Success              Result = 0
	ErrorInvalidValue    Result = 1
	ErrorOutOfMemory     Result = 2
	ErrorNotInitialized  Result = 3
	ErrorNoDevice        Result = 100
	ErrorInvalidDevice   Result = 101
	ErrorInvalidContext  Result = 201
	ErrorAlreadyMapped   Result = 208
	ErrorInvalidHandle   Result = 400
	ErrorNotReady        Result = 600
	ErrorPeerAccessUnsup Result = 217
	ErrorHostMemAlreadyR Result = 712
	ErrorHostMemNotReg   Result = 713
)

// fallbackNames names the common results when the driver cannot be asked
// (cuGetErrorName itself failed, or no library is loaded).
var fallbackNames = map[Result]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED",
	100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
	201: "CUDA_ERROR_INVALID_CONTEXT", 208: "CUDA_ERROR_ALREADY_MAPPED",
	217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", 400: "CUDA_ERROR_INVALID_HANDLE",
	600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", 999: "CUDA_ERROR_UNKNOWN",
}

// String is the CUDA_ERROR_* name from the fallback table, or the number.
func (r Result) String() string {
	if n, ok := fallbackNames[r]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", uint32(r))
}

func (r Result) Error() string { return fmt.Sprintf("%s (%d)", r.String(), uint32(r)) }

// Error is a failed driver call: Op names the function and its offending
// arguments, Code is what it returned, Name the driver's name for Code.
type Error struct {
	Op   string
	Code Result
	Name string
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.String()
	}
	return fmt.Sprintf("%s: %s (%d)", e.Op, name, uint32(e.Code))
}

// Is matches a Result target with the same code.
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Code
}
