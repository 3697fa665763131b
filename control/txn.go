// txn.go owns the one-file transaction, /ctl/batches/txn: a client opens
// it read-write, writes one submission document (the JSON `submit`
// takes), reads the batch's terminal status back on the same descriptor,
// and closes it. In the spirit of Plan 9's clone files, the open file is
// the handle: the batch lives from the write that submits it until the
// next transaction on the descriptor or its close, whichever comes first.
// It costs about six FUSE requests when the file is opened for one
// transaction (OPEN, WRITE, READ, FLUSH, RELEASE, the root's GETATTR) and
// two (WRITE, READ) for each further one on an open descriptor, against
// about 35 for the shell form (clone, submit, seal, wait, rmdir).
//
// The rules, and why:
//   - The write that completes a document acts: it parses and resolves
//     the submission, allocates a batch sized for its requests, submits
//     it and seals it. The batch gets no idle timer (it is never idle: it
//     holds a submission from birth). A document that fails anywhere on
//     the way changes nothing: a batch allocated for it is freed before
//     the write returns, and the error goes to /error (the batch, if any,
//     is gone, so its error file could not be read).
//   - The first write of each document may land at any offset: the
//     descriptor's position after a read is wherever the previous answer
//     ended. The chunks of one document must follow each other (as on
//     submit; O_APPEND handles are exempt). Whitespace-only writes
//     between documents are accepted and ignored (bash's echo sends a
//     document that fills its 4 KiB buffer and its newline separately).
//     A retried write can still never run a document twice, because a
//     second transaction starts only once the first one's status has
//     been read (below).
//   - A document written while the handle's transaction has not been read
//     to its terminal status is EBUSY and changes nothing; once read, the
//     next document starts a new transaction and, once that is accepted,
//     frees the previous batch. A next document that fails leaves the
//     previous transaction readable (the sticky rule below promises it).
//   - Errors are sticky per descriptor as on every document file (except
//     EAGAIN from the mount's budget of buffered document bytes, which
//     changes nothing): after a failed write, every later write, the
//     close, and a read when no transaction was accepted fail with the
//     same errno. A transaction submitted before the failure stays
//     readable (the next read serves its status again from its first
//     byte), and close still frees it.
//   - Read blocks until the batch is terminal, then serves its status
//     JSON (the batch's status file) from the offset of the first read
//     that returns it, so `cat <&3` after `echo ... >&3` and a pread at 0
//     both see it whole. A signal ends a blocked read with EINTR and
//     changes nothing. A read before any accepted write is EINVAL.
//   - Close frees the batch. A batch still running is cancelled
//     (cancel_all: pending tasks end cancelled; a running file request
//     cannot be recalled) and freed once its work has quiesced, by a
//     goroutine that owns it until then; it stays listed under
//     /ctl/batches until freed, so in-flight I/O is never lost track of.
//
// Invariants:
//   - A Txn holds at most one batch, apart from the moment between
//     submitting a new transaction and freeing the previous one. Every
//     batch a Txn allocated is freed (the last one at Close), unless the
//     daemon shuts down first (the engine's Close then cancels and
//     drains it).
//   - Txn.mu is held across the engine calls of one write (writes and
//     close serialise per descriptor), never while a read's Wait blocks.
//     It is taken before Service.mu and Batch.mu, never after (lock
//     order: Txn.mu, Service.mu, Batch.mu).

package control

import (
	"bytes"
	"context"
	"sync"

	"github.com/orbitefs/orbitefs/engine"
)

// scope records a transaction's errors while it has no batch, in its
// caller's view of /error.
func (t *Txn) scope() scope { return scope{caller: t.caller, op: "txn", name: "batches/txn"} }

// Txn is one open descriptor of /ctl/batches/txn. Safe for concurrent
// use; the caller must Close it exactly once (Release).
type Txn struct {
	s      *Service
	caller *engine.Caller // who opened it: owns its batches

	mu     sync.Mutex
	doc    *Document
	inDoc  bool  // a document is being assembled
	next   int64 // offset the next chunk of the document must have
	append bool  // opened O_APPEND: chunk offsets are not checked
	failed error // the first failed write; sticky
	bt     *Batch
	result []byte // bt's terminal status, once read
	base   int64  // offset of the first read that served result; -1: none
	closed bool
}

// NewTxn returns the state of one open of the transaction file by c.
func (s *Service) NewTxn(c *engine.Caller) *Txn {
	return &Txn{s: s, caller: c, doc: s.newDocument(c), base: -1}
}

// RefuseTxnOpen is the failure of an open of the transaction file that
// is not read-write (readOnly: O_RDONLY, else O_WRONLY): the status is
// read on the descriptor the submission was written to, so such an open
// could never complete a transaction. Recorded in /error; EACCES.
func (s *Service) RefuseTxnOpen(c *engine.Caller, readOnly bool) error {
	how := "write-only (echo > txn)"
	if readOnly {
		how = "read-only (cat txn)"
	}
	return s.fail(scope{caller: c, op: "open", name: "batches/txn"}, detail(engine.KindPermission,
		"opened %s: a transaction is written and read on one descriptor; open it read-write (exec 3<>txn)", how))
}

// Append marks the handle as opened with O_APPEND: the kernel places
// its writes at a size this file does not have, so the chunks of a
// document are taken in arrival order whatever their offset.
func (t *Txn) Append() {
	t.mu.Lock()
	t.append = true
	t.mu.Unlock()
}

// Write feeds one write(2) chunk placed at off. The chunk that completes
// a document runs the transaction; its error is the one write(2) must
// return, already recorded and logged.
func (t *Txn) Write(p []byte, off int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed != nil {
		return &stickyError{first: t.failed}
	}
	if t.closed {
		return t.failLocked(invalid("transaction file is closed"))
	}
	if !t.inDoc {
		if len(bytes.TrimSpace(p)) == 0 {
			// Whitespace between documents, such as the newline of an
			// echo whose document filled the previous 4 KiB write.
			return nil
		}
		if t.bt != nil && t.result == nil {
			return t.failLocked(detail(engine.KindBusy, "transaction batch %d has not been read to its end: read its status before writing the next submission (or close the file)", t.bt.ID))
		}
		t.next = off
	} else if !t.append && off != t.next {
		t.doc.Reset()
		return t.failLocked(invalid("write at offset %d: a document's writes are sequential and its next byte is at offset %d", off, t.next))
	}
	doc, err := t.doc.Append(p)
	if err != nil {
		if engine.KindOf(err) == engine.KindExhausted {
			// The buffer budget is spent: nothing changed, the same
			// write may be retried (docwriter.go).
			return t.s.fail(t.scope(), err)
		}
		return t.failLocked(err)
	}
	t.inDoc = true
	t.next += int64(len(p))
	if doc == nil {
		return nil
	}
	t.inDoc = false
	return t.runLocked(doc)
}

// runLocked runs doc as a new transaction; once it is accepted, it
// frees the previous (read) batch and takes its place. A document that
// fails leaves the previous transaction as it was, still readable.
// REQUIRES: t.mu.
func (t *Txn) runLocked(doc []byte) error {
	s := t.s
	if s.closing.Load() {
		return t.failLocked(errClosing())
	}
	p, err := s.prepare(t.caller, doc)
	if err != nil {
		return t.failLocked(err)
	}
	capacity := min(max(len(p.reqs), 1), s.e.Config().MaxBatchRequests)
	bt, err := s.allocate(t.caller, capacity, false)
	if err != nil && t.bt != nil && engine.KindOf(err) == engine.KindExhausted {
		// At engine.max_allocated_batches the previous batch may be the
		// one in the way: free it and try once more.
		t.releaseLocked()
		bt, err = s.allocate(t.caller, capacity, false)
	}
	if err != nil {
		return t.failLocked(err)
	}
	if err := s.submitPrepared(bt, p); err != nil {
		s.dropTxn(bt)
		return t.failLocked(err)
	}
	if err := bt.b.Seal(); err != nil {
		// Only a concurrent free through the batch's directory gets here.
		s.releaseTxn(bt)
		return t.failLocked(err)
	}
	t.releaseLocked()
	t.bt = bt
	return nil
}

// releaseLocked frees the handle's (read) transaction, if any.
// REQUIRES: t.mu.
func (t *Txn) releaseLocked() {
	if t.bt != nil {
		t.s.releaseTxn(t.bt)
		t.bt, t.result, t.base = nil, nil, -1
	}
}

// failLocked records err in /error and makes it the handle's sticky
// failure. REQUIRES: t.mu.
func (t *Txn) failLocked(err error) error {
	t.doc.Reset()
	t.inDoc = false
	// The transaction kept from before is served again from the next
	// read's offset, wherever the failed write left the descriptor.
	t.base = -1
	t.failed = t.s.fail(t.scope(), err)
	return t.failed
}

// Read serves the transaction's terminal status at off, blocking until
// the batch is terminal. ctx's end (an interrupt) returns an error
// wrapping context.Canceled and changes nothing.
func (t *Txn) Read(ctx context.Context, dest []byte, off int64) ([]byte, error) {
	t.mu.Lock()
	bt, res := t.bt, t.result
	if bt == nil {
		defer t.mu.Unlock()
		if t.failed != nil {
			return nil, &stickyError{first: t.failed}
		}
		return nil, t.s.fail(t.scope(), invalid("read before write: write a submission document to this open file first"))
	}
	t.mu.Unlock()
	if res == nil {
		if _, err := t.s.Wait(ctx, bt); err != nil {
			return nil, err
		}
		b, err := t.s.Status(bt)
		if err != nil {
			return nil, err
		}
		res = b
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bt != bt {
		// A later transaction replaced it meanwhile (a concurrent write
		// on a dup'd descriptor): serve nothing rather than its status.
		return nil, nil
	}
	if t.result == nil {
		t.result = res
	}
	if t.base < 0 {
		t.base = off
	}
	return window(t.result, dest, off-t.base), nil
}

// Flush reports the handle's failure, if any, or a document left
// incomplete, without acting (it may run many times).
func (t *Txn) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed != nil {
		return &stickyError{first: t.failed}
	}
	if err := t.doc.Pending(); err != nil {
		return t.s.fail(t.scope(), err)
	}
	return nil
}

// Close frees the handle's batch: at once when it is terminal, else
// after cancelling what has not started and waiting, in the background,
// for the rest to quiesce. Later calls do nothing.
func (t *Txn) Close() {
	t.mu.Lock()
	bt := t.bt
	t.bt, t.closed = nil, true
	t.doc.Reset() // gives an unfinished document's bytes back to the budget
	t.mu.Unlock()
	if bt != nil {
		t.s.releaseTxn(bt)
	}
}

// window returns the part of b a read of len(dest) bytes at off sees.
func window(b, dest []byte, off int64) []byte {
	if off < 0 || off >= int64(len(b)) {
		return nil
	}
	end := min(off+int64(len(dest)), int64(len(b)))
	return b[off:end]
}

// dropTxn frees a batch that never accepted a submission (it has no
// work, so the free cannot be busy).
func (s *Service) dropTxn(bt *Batch) {
	if err := s.free(bt); err != nil {
		s.log.Error("transaction batch could not be freed", "op", "txn", "batch", bt.ID, "err", err)
	}
}

// releaseTxn frees a transaction's sealed batch: now if no work is
// queued or running, else after cancel_all and a background wait until
// it is terminal. A batch already freed through its directory is left
// alone.
func (s *Service) releaseTxn(bt *Batch) {
	if s.Batch(bt.ID) != bt {
		return
	}
	if !bt.b.Status().Terminal() {
		bt.b.CancelAll() // a freed batch answers NotFound: nothing to cancel
	}
	if err := bt.b.Free(); err == nil || engine.KindOf(err) != engine.KindBusy {
		s.settleFreed(bt, err)
		return
	}
	s.log.Debug("transaction closed while running; freeing once it quiesces", "op", "txn", "batch", bt.ID)
	go func() {
		if _, err := bt.b.WaitContext(s.stopCtx); err != nil {
			// Shutdown: the engine's Close cancels and drains it.
			return
		}
		s.settleFreed(bt, bt.b.Free())
	}()
}
