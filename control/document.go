// document.go owns the assembly of one JSON document from the write(2)
// chunks the kernel delivers for one open file handle.
//
// The kernel splits a large write into chunks of at most mount.max_write
// bytes, and a shell may write a document piecewise, so a handle buffers
// bytes until they form one complete JSON value and hands that value over
// on the very write that completed it: the error of acting on it is then
// returned by that write(2), which is the only error bash's builtin echo
// reports.
//
// Invariants:
//   - The buffer never holds more than max bytes; the write that would
//     exceed it fails with KindTooLarge and empties the buffer.
//   - A buffer that can no longer become a valid document (syntax error,
//     not an object, trailing data) fails at once and is emptied.
//   - Pending never changes the buffer, so a Flush that reports an
//     incomplete document can run any number of times.

package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Document accumulates one JSON object. The zero value is unusable; use
// NewDocument. Not safe for concurrent use.
type Document struct {
	buf []byte
	max int
}

// NewDocument returns an empty buffer accepting documents of at most max
// bytes (whitespace included).
func NewDocument(max int) *Document { return &Document{max: max} }

// Append adds the chunk p. It returns the complete document when the
// buffer now holds exactly one JSON object (optionally surrounded by
// whitespace), and then starts over; nil, nil when more bytes are needed;
// an error (KindInvalid or KindTooLarge detail) when the bytes can never
// become a valid document.
func (d *Document) Append(p []byte) ([]byte, error) {
	if len(d.buf)+len(p) > d.max {
		n := len(d.buf) + len(p)
		d.buf = d.buf[:0]
		return nil, tooLarge("document of at least %d bytes exceeds mount.max_document_bytes (%d)", n, d.max)
	}
	d.buf = append(d.buf, p...)
	doc, err := complete(d.buf)
	if doc == nil && err == nil {
		return nil, nil
	}
	out := append([]byte(nil), d.buf...)
	d.buf = d.buf[:0]
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Pending returns an error when a document was started and not finished
// (the writer closed too early); nil when the buffer holds at most
// whitespace.
func (d *Document) Pending() error {
	if len(bytes.TrimSpace(d.buf)) == 0 {
		return nil
	}
	return invalid("incomplete JSON document at close: %d bytes buffered, starting %.40q", len(d.buf), d.buf)
}

// Reset drops whatever is buffered.
func (d *Document) Reset() { d.buf = d.buf[:0] }

// complete reports whether b is one whole JSON object: (b, nil) when it
// is, (nil, nil) when it is a proper prefix of one, (nil, err) otherwise.
func complete(b []byte) ([]byte, error) {
	t := bytes.TrimLeft(b, " \t\r\n")
	if len(t) == 0 {
		return nil, nil
	}
	if t[0] != '{' {
		return nil, invalid("want a JSON object starting with '{', got %.20q", t)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil
		}
		return nil, jsonError(err)
	}
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return nil, invalid("trailing data after the JSON document at byte %d: %.20q (write one document per write)", dec.InputOffset(), rest)
	}
	return b, nil
}

// jsonError gives a decoding error a kind and, for syntax errors, the
// byte offset.
func jsonError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return invalid("invalid JSON at byte %d: %v", se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "document"
		}
		return invalid("%s: JSON %s cannot be a %s", field, te.Value, te.Type)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return invalid("incomplete JSON document")
	}
	return invalid("%v", err)
}
