// fault.go owns the one way Go code copies to or from a mapping: Copy,
// which turns a memory fault into an error.
//
// A MAP_SHARED file mapping faults (SIGBUS) when another process
// truncates the file under it; the Go runtime treats a fault in its own
// code (runtime.memmove) as fatal and kills the process. With
// debug.SetPanicOnFault the fault becomes a panic on this goroutine
// instead, which Copy recovers.
//
// Invariants:
//   - Every Go-side copy touching mapped memory goes through Copy; no
//     other code in the daemon reads or writes a Mapping's bytes.
//   - Copy restores the goroutine's previous panic-on-fault setting, and
//     re-panics anything that is not a memory fault.

package hostmem

import (
	"fmt"
	"runtime/debug"
)

// FaultError reports a memory fault during Copy.
type FaultError struct {
	// Addr is the faulting address (0 when the runtime did not say).
	Addr uintptr
}

func (e *FaultError) Error() string {
	return fmt.Sprintf("memory fault at %#x (a shared file truncated under its mapping?)", e.Addr)
}

// Copy is copy(dst, src) that returns a *FaultError, together with the
// bytes copied before the fault (rounded down to what is certain: 0),
// instead of crashing when either side faults.
func Copy(dst, src []byte) (n int, err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			// A fault panic is a runtime.Error with an Addr method; any
			// other panic is a bug and must not be swallowed.
			f, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			n, err = 0, &FaultError{Addr: f.Addr()}
		}
	}()
	return copy(dst, src), nil
}
