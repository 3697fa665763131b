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
// Completion and syntax are checked by a resumable scanner (jsonscan.go)
// that keeps its state between writes, so every byte is examined once
// however the document is chunked, and a malformed document fails on the
// write that carried the mistake rather than only at close.
//
// Buffered bytes are memory a client can pin by leaving documents
// unfinished on many open files, so they are drawn from one budget shared
// by every handle of the mount (mount.max_buffered_document_bytes,
// budget.go). A document that arrives whole in one write is never held
// and needs none of it. A write that would make the buffer grow past what
// the budget has left fails with KindExhausted (EAGAIN) and changes
// nothing: the same write may be retried once other writers are done.
//
// Invariants:
//   - A document is its leading whitespace plus one JSON object; the
//     limit (max) applies to that span. Whitespace after the object is
//     not part of any document and is dropped; anything else after it in
//     the same write fails that write.
//   - The buffer never holds more than max bytes of an incomplete
//     document: the write that would exceed it fails with KindTooLarge.
//   - held == cap(buf) is exactly what this document has taken from the
//     budget; Reset (after a document completes, fails, or the handle is
//     released) gives all of it back and drops the buffer.
//   - A failed Append empties the buffer, except a KindExhausted one,
//     which changes nothing; Pending never changes it, so a Flush that
//     reports an incomplete document can run any number of times.
//   - No error text copies the buffer: at most a short prefix is quoted.

package control

import (
	"bytes"

	"github.com/orbitefs/orbitefs/engine"
)

// minDocumentBuffer is the smallest buffer a held document gets, so that
// tiny writes do not reallocate on every byte.
const minDocumentBuffer = 256

// Document accumulates one JSON object. The zero value is unusable; use
// NewDocument. Not safe for concurrent use.
type Document struct {
	buf     []byte
	max     int
	budget  *Budget // nil: unlimited
	payer   payer   // whom held bytes are charged to (zero: uncapped)
	held    int     // bytes taken from budget: cap(buf)
	started bool    // the opening '{' was seen
	scan    jsonScanner
}

// NewDocument returns an empty buffer accepting documents of at most max
// bytes, holding incomplete ones within budget (nil: no shared limit).
func NewDocument(max int, budget *Budget) *Document {
	d := &Document{max: max, budget: budget}
	d.scan.reset()
	return d
}

// Append adds the chunk p. It returns the complete document when the
// buffer now holds one JSON object, and then starts over; nil, nil when
// more bytes are needed; an error (KindInvalid, KindTooLarge or
// KindExhausted) when the bytes can never become a valid document of at
// most max bytes or cannot be held now. The returned document is
// syntactically valid JSON: the caller decodes it against its schema.
func (d *Document) Append(p []byte) ([]byte, error) {
	if len(d.buf) > 0 && !d.grow(min(len(d.buf)+len(p), d.max)) {
		// Checked before scanning, so that nothing has changed.
		return nil, d.exhausted(len(d.buf) + len(p))
	}
	n, err := d.feed(p)
	if err != nil {
		d.Reset()
		return nil, err
	}
	total := len(d.buf) + n
	if !d.scan.done {
		if total > d.max {
			d.Reset()
			return nil, tooLarge("document of at least %d bytes exceeds mount.max_document_bytes (%d)", total, d.max)
		}
		if !d.grow(total) {
			// Only a first write gets here (a later one grew above), and
			// the scanner started from scratch: resetting it undoes it.
			d.Reset()
			return nil, d.exhausted(total)
		}
		d.buf = append(d.buf, p...)
		return nil, nil
	}
	if total > d.max {
		d.Reset()
		return nil, tooLarge("document of %d bytes exceeds mount.max_document_bytes (%d)", total, d.max)
	}
	if rest := bytes.TrimLeft(p[n:], " \t\r\n"); len(rest) > 0 {
		d.Reset()
		return nil, invalid("trailing data after the JSON document at byte %d: %s (one document per write)", total, quotePrefix(rest, 20))
	}
	var doc []byte
	if len(d.buf) == 0 {
		doc = append([]byte(nil), p[:n]...) // p is the kernel's buffer
	} else {
		doc = append(d.buf, p[:n]...) // within cap: grown above
		d.buf = nil                   // handed over
	}
	d.Reset()
	return doc, nil
}

// feed checks the start of a document, then scans p. It returns how many
// bytes of p belong to the document.
func (d *Document) feed(p []byte) (int, error) {
	if !d.started {
		for i, c := range p {
			if isSpace(c) {
				continue
			}
			if c != '{' {
				return 0, invalid("want a JSON object starting with '{', got %s", quotePrefix(p[i:], 20))
			}
			d.started = true
			break
		}
	}
	return d.scan.feed(p)
}

// grow makes the buffer's capacity at least need, taking the growth from
// the budget; false when the budget cannot give it.
func (d *Document) grow(need int) bool {
	if need <= cap(d.buf) {
		return true
	}
	want := max(need, min(max(2*cap(d.buf), minDocumentBuffer), d.max))
	if !d.budget.take(d.payer, want-d.held) {
		if want == need || !d.budget.take(d.payer, need-d.held) {
			return false
		}
		want = need
	}
	nb := make([]byte, len(d.buf), want)
	copy(nb, d.buf)
	d.buf, d.held = nb, want
	return true
}

// exhausted is the error of a write the budget cannot hold.
func (d *Document) exhausted(n int) error {
	if d.payer.capped {
		if held := d.budget.usedBy(d.payer); held+int64(n-d.held) > d.budget.perUser {
			return detail(engine.KindExhausted, "cannot hold %d bytes of an unfinished document: uid %d's documents left unfinished on open files already hold %d of the %d bytes mount.max_buffered_document_bytes_per_user allows one user (nothing was taken; finish or close them, or write the document in one write)",
				n, d.payer.uid, held, d.budget.perUser)
		}
	}
	return detail(engine.KindExhausted, "cannot hold %d bytes of an unfinished document: the documents left unfinished on open files already hold %d of the %d bytes mount.max_buffered_document_bytes allows (nothing was taken; retry the write later, or write the document in one write)",
		n, d.budget.Used(), d.budget.max)
}

// Started reports whether a document's opening brace is buffered.
func (d *Document) Started() bool { return d.started }

// Pending returns an error when a document was started and not finished
// (the writer closed too early); nil when the buffer holds at most
// whitespace.
func (d *Document) Pending() error {
	if len(bytes.TrimSpace(d.buf)) == 0 {
		return nil
	}
	return invalid("incomplete JSON document at close: %d bytes buffered, starting %s", len(d.buf), quotePrefix(d.buf, 40))
}

// Reset drops whatever is buffered and gives its memory back to the
// budget.
func (d *Document) Reset() {
	d.budget.give(d.payer, d.held)
	d.buf, d.held, d.started = nil, 0, false
	d.scan.reset()
}
