// errors.go owns the engine's error kinds: one Kind per row of the errno
// table (README, "Errors"), and the single Error type every engine call returns.
//
// Invariants:
//   - Every error leaving the engine's public API is an *Error (or wraps one),
//     so errors.Is(err, ErrRange) and control.Errno agree on every path.
//   - Kind is chosen by the engine; backends return plain causes
//     (*os.SyscallError, unix.Errno) that Error wraps in Err.

package engine

import (
	"errors"
	"fmt"
)

// Kind classifies an engine error. Each kind maps to exactly one errno at
// the mount (control/errno.go).
type Kind uint8

const (
	KindUnknown     Kind = iota // not classified: maps to EIO
	KindInvalid                 // bad argument, zero length, overflow, wait before seal
	KindRange                   // beyond the current file size or region
	KindNotFound                // no such segment, memory, batch or task
	KindExists                  // name already taken
	KindPermission              // segment permission, allowed roots
	KindExhausted               // limits, caps, staging, queue full
	KindBusy                    // batch busy, segment draining, region in use
	KindUnavailable             // transport not built, no kernel support, no GPU
	KindTimeout                 // deadline passed, close timeout
	KindTooLarge                // document too large, vector over the element limit
	KindIO                      // backend fault
	KindClosed                  // the engine or object is closed
	KindUnquiesced              // a completion never arrived: owners stay retained
	KindNoSpace                 // the filesystem (or quota) is full
)

var kindNames = [...]string{
	KindUnknown:     "error",
	KindInvalid:     "invalid argument",
	KindRange:       "out of range",
	KindNotFound:    "not found",
	KindExists:      "already exists",
	KindPermission:  "permission denied",
	KindExhausted:   "resource exhausted",
	KindBusy:        "busy",
	KindUnavailable: "unavailable",
	KindTimeout:     "timed out",
	KindTooLarge:    "too large",
	KindIO:          "i/o error",
	KindClosed:      "closed",
	KindUnquiesced:  "unquiesced",
	KindNoSpace:     "no space left",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Kinds lists every kind, in table order (for generated docs).
func Kinds() []Kind {
	out := make([]Kind, 0, len(kindNames))
	for k := range kindNames {
		out = append(out, Kind(k))
	}
	return out
}

// kindError is a sentinel: errors.Is(err, ErrBusy) matches any *Error of
// that kind.
type kindError Kind

func (k kindError) Error() string { return Kind(k).String() }

// Sentinels for errors.Is.
var (
	ErrInvalid     error = kindError(KindInvalid)
	ErrRange       error = kindError(KindRange)
	ErrNotFound    error = kindError(KindNotFound)
	ErrExists      error = kindError(KindExists)
	ErrPermission  error = kindError(KindPermission)
	ErrExhausted   error = kindError(KindExhausted)
	ErrBusy        error = kindError(KindBusy)
	ErrUnavailable error = kindError(KindUnavailable)
	ErrTimeout     error = kindError(KindTimeout)
	ErrTooLarge    error = kindError(KindTooLarge)
	ErrIO          error = kindError(KindIO)
	ErrClosed      error = kindError(KindClosed)
	ErrUnquiesced  error = kindError(KindUnquiesced)
	ErrNoSpace     error = kindError(KindNoSpace)
)

// Error is the engine's error: what was attempted, on what, which kind of
// failure, and the detail or cause.
type Error struct {
	Op   string // "open", "submit", "register", "close", "read", ...
	Name string // "segments/file:///tmp/x", "batches/7", "memory/0x7f..."
	Kind Kind
	Err  error // detail or cause
}

func (e *Error) Error() string {
	s := e.Op
	if e.Name != "" {
		s += " " + e.Name
	}
	s += ": " + e.Kind.String()
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the kind sentinels.
func (e *Error) Is(target error) bool {
	k, ok := target.(kindError)
	return ok && Kind(k) == e.Kind
}

// KindOf returns the kind of the first *Error in err's chain, or
// KindUnknown.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var d *detailError
	if errors.As(err, &d) {
		return d.kind
	}
	var k kindError
	if errors.As(err, &k) {
		return Kind(k)
	}
	return KindUnknown
}

// detailError is a cause that carries a kind but prints only its detail,
// so "requests[2]: offset ... beyond file size" does not repeat the kind.
type detailError struct {
	kind Kind
	err  error
}

func (d *detailError) Error() string { return d.err.Error() }
func (d *detailError) Unwrap() error { return d.err }
func (d *detailError) Is(target error) bool {
	k, ok := target.(kindError)
	return ok && Kind(k) == d.kind
}

// detail builds a kinded cause with a formatted message.
func detail(kind Kind, format string, args ...any) error {
	return &detailError{kind: kind, err: fmt.Errorf(format, args...)}
}

// errorf builds an *Error with a formatted detail. A %w verb in format
// keeps the cause reachable through errors.Is/As.
func errorf(kind Kind, op, name, format string, args ...any) *Error {
	return &Error{Op: op, Name: name, Kind: kind, Err: fmt.Errorf(format, args...)}
}

// wrap gives a cause a kind and context; an *Error cause keeps its own
// kind unless kind is set.
func wrap(kind Kind, op, name string, err error) *Error {
	return &Error{Op: op, Name: name, Kind: kind, Err: err}
}
