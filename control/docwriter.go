// docwriter.go owns the state of one open handle of a JSON document file
// (submit, memory/register, segments/open): where the next write must
// land, the document being assembled, and the handle's first failure.
//
// The write(2) semantics it gives, and why:
//   - Sequential from offset 0. A write must start exactly where the
//     handle's previous write ended (the first at 0). Any other offset
//     (dd seek=5 conv=notrunc, pwrite, a lseek back) fails with EINVAL
//     and nothing is acted on. This includes rewriting bytes that were
//     already accepted, even identical ones: a retry of a write that
//     succeeded can therefore never run a document twice. Handles opened
//     with O_APPEND are exempt: the kernel picks their offset from a
//     size this file does not have, and appending is what they ask for.
//   - Files answered on the same descriptor (qos/resolve) take one
//     document after another: the first write of each document may land
//     at any offset (the descriptor's position is wherever the previous
//     answer's read left it); the chunks of one document still follow
//     each other.
//   - Sticky errors. Once a write on the handle failed (a bad document,
//     a refused submission, a bad offset), every later write and every
//     flush of the handle fail with the same errno and no later byte is
//     acted on. The kernel splits a large write(2) into chunks and turns
//     a failing later chunk into a short write that many writers do not
//     retry (Python's print exits 0); the failing flush at close is what
//     makes them notice. It also means bytes after a refused document
//     (a crafted tail that is itself a valid document) are never run.
//     The one exception is a write refused because the mount's budget of
//     buffered document bytes is spent (KindExhausted, EAGAIN): it
//     changes nothing, not even the expected offset, so the same write
//     may be retried.
//   - Release (Close) drops the buffer and gives its bytes back to the
//     budget; so does every completed or failed document.
//
// Invariants:
//   - failed, once set, never changes; the error recorded in the error
//     file is the first one (later refusals of the same handle return it
//     without recording it again).
//   - next is the sum of the lengths of the accepted writes.

package control

import (
	"fmt"
	"sync"

	"github.com/orbitefs/orbitefs/engine"
)

// DocWriter is the per-open-handle state of a JSON creator or submit
// file: it assembles documents from write chunks and acts on each the
// moment it is complete. Safe for concurrent use.
type DocWriter struct {
	mu      sync.Mutex
	doc     *Document
	commit  func([]byte) error // records its own errors
	onWrite func()             // called on every write; may be nil
	fail    func(error) error  // records and labels an error
	append  bool               // opened O_APPEND: offsets are not checked
	restart bool               // each document's first write may be at any offset
	inDoc   bool               // a document's bytes have been accepted (restart)
	next    int64              // offset the next write must have
	failed  error              // the handle's first failure; sticky
	closed  bool               // released: nothing more is buffered
}

// Append marks the handle as opened with O_APPEND: writes are taken in
// arrival order whatever their offset.
func (w *DocWriter) Append() {
	w.mu.Lock()
	w.append = true
	w.mu.Unlock()
}

// Restartable lets each document's first write land at any offset, for
// files whose answer is read on the same descriptor between documents.
func (w *DocWriter) Restartable() {
	w.mu.Lock()
	w.restart = true
	w.mu.Unlock()
}

// Close drops whatever the handle buffered (the handle was released);
// later writes buffer nothing.
func (w *DocWriter) Close() {
	w.mu.Lock()
	w.doc.Reset()
	w.closed = true
	w.mu.Unlock()
}

// stickyError is what a handle returns after its first failure: the same
// kind (so the same errno), saying why.
type stickyError struct{ first error }

func (e *stickyError) Error() string {
	return fmt.Sprintf("an earlier write on this open file failed, nothing more is accepted on it (reopen the file): %v", e.first)
}

func (e *stickyError) Unwrap() error { return e.first }

// Write feeds one write(2) chunk that the kernel placed at off. Its
// error is the one write(2) must return; it has been recorded and
// logged.
func (w *DocWriter) Write(p []byte, off int64) error {
	if w.onWrite != nil {
		w.onWrite()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return &stickyError{first: w.failed}
	}
	if w.closed {
		// The kernel sends no write after release; should one come, it
		// must not take from the budget that nothing would give back.
		return w.fail(invalid("write after the file was released"))
	}
	if w.restart && !w.inDoc {
		w.next = off
	}
	if !w.append && off != w.next {
		w.doc.Reset()
		w.failed = w.fail(invalid("write at offset %d: documents are written sequentially from offset 0 and this file's next byte is at offset %d (no seek, no rewrite)", off, w.next))
		return w.failed
	}
	doc, err := w.doc.Append(p)
	if err != nil {
		if engine.KindOf(err) == engine.KindExhausted {
			return w.fail(err) // changed nothing: not sticky
		}
		w.failed = w.fail(err)
		return w.failed
	}
	w.next += int64(len(p))
	w.inDoc = w.doc.Started()
	if doc == nil {
		return nil
	}
	if err := w.commit(doc); err != nil {
		w.doc.Reset()
		w.failed = err
		return err
	}
	return nil
}

// Flush reports the handle's failure, if any, or a document left
// incomplete (KindInvalid), without dropping it: flush can run several
// times on one handle (dup'd descriptors) and a later write may still
// complete the document.
func (w *DocWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return &stickyError{first: w.failed}
	}
	if err := w.doc.Pending(); err != nil {
		return w.fail(err)
	}
	return nil
}
