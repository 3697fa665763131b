// errors.go owns how control builds its own errors: a detail message with
// an engine kind, so that control's errors and the engine's share one
// errno table and one message shape ("OP NAME: KIND: DETAIL").
//
// Invariants:
//   - engine.KindOf(detail(k, ...)) == k.
//   - A detail prints only its message; the kind is printed once, by the
//     *engine.Error that asError wraps around it.

package control

import (
	"errors"
	"fmt"

	"github.com/orbitefs/orbitefs/engine"
)

var kindSentinels = map[engine.Kind]error{
	engine.KindInvalid:     engine.ErrInvalid,
	engine.KindRange:       engine.ErrRange,
	engine.KindNotFound:    engine.ErrNotFound,
	engine.KindExists:      engine.ErrExists,
	engine.KindPermission:  engine.ErrPermission,
	engine.KindExhausted:   engine.ErrExhausted,
	engine.KindBusy:        engine.ErrBusy,
	engine.KindUnavailable: engine.ErrUnavailable,
	engine.KindTimeout:     engine.ErrTimeout,
	engine.KindTooLarge:    engine.ErrTooLarge,
	engine.KindIO:          engine.ErrIO,
	engine.KindClosed:      engine.ErrClosed,
	engine.KindUnquiesced:  engine.ErrUnquiesced,
}

// detailError is a message with a kind.
type detailError struct {
	kind engine.Kind
	err  error
}

func (d *detailError) Error() string { return d.err.Error() }

// Unwrap exposes the cause and the kind's sentinel, so errors.Is(err,
// engine.ErrBusy) and engine.KindOf both see the kind.
func (d *detailError) Unwrap() []error {
	if s, ok := kindSentinels[d.kind]; ok {
		return []error{d.err, s}
	}
	return []error{d.err}
}

func detail(kind engine.Kind, format string, args ...any) error {
	return &detailError{kind: kind, err: fmt.Errorf(format, args...)}
}

func invalid(format string, args ...any) error {
	return detail(engine.KindInvalid, format, args...)
}

func tooLarge(format string, args ...any) error {
	return detail(engine.KindTooLarge, format, args...)
}

func notFound(format string, args ...any) error {
	return detail(engine.KindNotFound, format, args...)
}

// asError gives err the operation and object it happened to, unless it
// already is an engine error naming them.
func asError(op, name string, err error) error {
	var ee *engine.Error
	if errors.As(err, &ee) && ee.Op != "" {
		return err
	}
	return &engine.Error{Op: op, Name: name, Kind: engine.KindOf(err), Err: err}
}
