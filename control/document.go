// document.go owns the assembly of one JSON document from the write(2)
// chunks the kernel delivers for one open file handle.
//
// A document may arrive in several writes: bash's builtin echo writes in
// 4 KiB pieces, cat in its buffer size, and the kernel splits anything
// larger than mount.max_write. A handle therefore buffers bytes until they
// hold one complete JSON object and hands it over on the very write that
// completed it, so the error of acting on it is returned by that write(2),
// the only error bash's builtin echo reports.
//
// Completion is found by an incremental scan (string- and escape-aware
// brace depth), linear in the document size however it is chunked. While
// a document is incomplete and still small, its prefix is also checked by
// the JSON decoder, so a malformed document fails on the write that
// carried the mistake rather than only at close.
//
// Invariants:
//   - A document is its leading whitespace plus one JSON object; the
//     limit (max) applies to that span. Whitespace after the object is
//     not part of any document and is dropped; anything else after it in
//     the same write fails that write.
//   - The buffer never holds more than max bytes of an incomplete
//     document: the write that would exceed it fails with KindTooLarge.
//   - A failed Append empties the buffer; Pending never changes it, so a
//     Flush that reports an incomplete document can run any number of
//     times.

package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// prefixCheckBytes bounds the incomplete documents whose prefix is
// re-validated on each write (the check rescans the whole prefix).
const prefixCheckBytes = 64 << 10

// Document accumulates one JSON object. The zero value is unusable; use
// NewDocument. Not safe for concurrent use.
type Document struct {
	buf []byte
	max int

	// Scan state over buf[:scanned].
	scanned int
	started bool // the opening '{' was seen
	depth   int
	inStr   bool
	esc     bool
}

// NewDocument returns an empty buffer accepting documents of at most max
// bytes.
func NewDocument(max int) *Document { return &Document{max: max} }

// Append adds the chunk p. It returns the complete document when the
// buffer now holds one JSON object, and then starts over; nil, nil when
// more bytes are needed; an error (KindInvalid or KindTooLarge) when the
// bytes can never become a valid document of at most max bytes. The
// returned document is only known to be balanced: the caller parses it.
func (d *Document) Append(p []byte) ([]byte, error) {
	d.buf = append(d.buf, p...)
	end, err := d.scan()
	if err != nil {
		d.Reset()
		return nil, err
	}
	if end == 0 {
		if len(d.buf) > d.max {
			n := len(d.buf)
			d.Reset()
			return nil, tooLarge("document of at least %d bytes exceeds mount.max_document_bytes (%d)", n, d.max)
		}
		if d.started && len(d.buf) <= prefixCheckBytes {
			if err := checkPrefix(d.buf); err != nil {
				d.Reset()
				return nil, err
			}
		}
		return nil, nil
	}
	if end > d.max {
		d.Reset()
		return nil, tooLarge("document of %d bytes exceeds mount.max_document_bytes (%d)", end, d.max)
	}
	if rest := bytes.TrimSpace(d.buf[end:]); len(rest) > 0 {
		d.Reset()
		return nil, invalid("trailing data after the JSON document at byte %d: %.20q (one document per write)", end, rest)
	}
	doc := append([]byte(nil), d.buf[:end]...)
	d.Reset()
	return doc, nil
}

// scan advances over new bytes and returns the end offset of the
// top-level object once it closed, or 0.
func (d *Document) scan() (int, error) {
	for i := d.scanned; i < len(d.buf); i++ {
		c := d.buf[i]
		switch {
		case !d.started:
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			case '{':
				d.started, d.depth = true, 1
			default:
				return 0, invalid("want a JSON object starting with '{', got %.20q", d.buf[i:])
			}
		case d.inStr:
			switch {
			case d.esc:
				d.esc = false
			case c == '\\':
				d.esc = true
			case c == '"':
				d.inStr = false
			}
		case c == '"':
			d.inStr = true
		case c == '{' || c == '[':
			d.depth++
		case c == '}' || c == ']':
			d.depth--
			if d.depth == 0 {
				d.scanned = i + 1
				return i + 1, nil
			}
		}
	}
	d.scanned = len(d.buf)
	return 0, nil
}

// checkPrefix fails when b cannot be the beginning of a JSON value.
func checkPrefix(b []byte) error {
	var raw json.RawMessage
	err := json.NewDecoder(bytes.NewReader(b)).Decode(&raw)
	if err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return jsonError(err)
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
func (d *Document) Reset() {
	d.buf = d.buf[:0]
	d.scanned, d.started, d.depth, d.inStr, d.esc = 0, false, 0, false, false
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
