// errno.go owns the one table that turns an engine error kind into the
// errno a file operation on the mount returns.
//
// Invariants:
//   - Every engine.Kind appears in kindTable exactly once (errno_test.go
//     checks it against engine.Kinds()).
//   - fusefs never calls go-fuse's ToErrno on an engine or control error;
//     it calls Errno, so a %w-wrapped error can never fall through to ENOSYS.
//   - The errno tables in README.md, docs/mount.md and /README are
//     rendered from this file (ErrnoTableMarkdown); reference_test.go
//     fails when a checked-in copy differs.

package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/orbitefs/orbitefs/engine"
)

// ErrnoRow is one row of the errno table.
type ErrnoRow struct {
	Kind    engine.Kind // KindUnknown also marks the non-kind rows
	Errno   syscall.Errno
	Name    string // the errno's C name, e.g. "EINVAL"
	Meaning string
}

// kindTable maps each engine kind to its errno. Two rows are choices of
// this mount rather than obvious errnos: KindClosed (ESHUTDOWN, so a script can
// tell "the daemon is going away" from a failed transfer) and KindUnknown
// (EIO; the whole error chain is logged).
var kindTable = []ErrnoRow{
	{engine.KindInvalid, syscall.EINVAL, "EINVAL", "invalid argument: bad JSON, unknown field, trailing data, bad name, zero length, overflow, unknown ctl command, wait before seal, txn read before write"},
	{engine.KindRange, syscall.ERANGE, "ERANGE", "range beyond the current file size or the memory region"},
	{engine.KindNotFound, syscall.ENOENT, "ENOENT", "no such segment, memory, batch or task"},
	{engine.KindExists, syscall.EEXIST, "EEXIST", "name already taken"},
	{engine.KindPermission, syscall.EACCES, "EACCES", "permission denied: segment permission, file outside mount.allowed_roots, a file the caller may not open, another user's memory, segment or batch, ctl/engine for anyone but the daemon's user and root, a QoS priority above its contract's max_priority, txn opened other than read-write"},
	{engine.KindExhausted, syscall.EAGAIN, "EAGAIN", "resource exhausted: engine limits, batch capacity, in-flight caps, mount.max_buffered_document_bytes (retry the write)"},
	{engine.KindBusy, syscall.EBUSY, "EBUSY", "busy: batch has queued or running work, segment draining, memory loaned to a transfer or mapped by a peer through CUDA IPC, running task cannot be cancelled, txn document before the previous status was read"},
	{engine.KindUnavailable, syscall.EOPNOTSUPP, "EOPNOTSUPP", "unavailable: transport or memory location not built (gds, pinned, cuda:N) or not supported by the kernel"},
	{engine.KindTimeout, syscall.ETIMEDOUT, "ETIMEDOUT", "deadline passed, deadline infeasible, segment close did not drain within mount.close_timeout, a segment's filesystem did not answer within engine.store_call_timeout"},
	{engine.KindTooLarge, syscall.EFBIG, "EFBIG", "too large: document over mount.max_document_bytes, vector over max_vector_elements, submission over max_batch_requests descriptors, request over max_transfer_bytes"},
	{engine.KindIO, syscall.EIO, "EIO", "i/o error: backend fault"},
	{engine.KindUnquiesced, syscall.EIO, "EIO", "unquiesced: a completion never arrived within engine.quiesce_grace after the deadline; the transfer's memory, file and ring stay retained (locally_drained false)"},
	{engine.KindClosed, syscall.ESHUTDOWN, "ESHUTDOWN", "the daemon is shutting down: the engine no longer accepts work"},
	{engine.KindNoSpace, syscall.ENOSPC, "ENOSPC", "no space left: a write found the filesystem or quota full (the task keeps the exact count of bytes written)"},
	{engine.KindUnknown, syscall.EIO, "EIO", "unclassified error (the daemon logs the whole error chain)"},
}

// interruptRow is the one errno not tied to an engine kind: a blocked
// read of `wait` or `txn` whose caller got a signal returns EINTR and changes
// nothing.
var interruptRow = ErrnoRow{engine.KindUnknown, syscall.EINTR, "EINTR", "interrupted: a signal reached a blocked read of wait or txn; nothing changed"}

// ErrnoTable returns the table in display order: one row per kind, then
// the interrupt row.
func ErrnoTable() []ErrnoRow {
	return append(append([]ErrnoRow(nil), kindTable...), interruptRow)
}

// KindErrno returns the errno for kind k.
func KindErrno(k engine.Kind) syscall.Errno {
	for _, r := range kindTable {
		if r.Kind == k {
			return r.Errno
		}
	}
	return syscall.EIO
}

// Errno maps err to the errno a FUSE operation returns: 0 for nil, the
// kind's errno for an engine-kinded error, EINTR for a cancelled request
// context, ETIMEDOUT for an expired one, EIO for anything else.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if k := engine.KindOf(err); k != engine.KindUnknown {
		return KindErrno(k)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	}
	return syscall.EIO
}

// ErrnoTableMarkdown renders the table as a Markdown table, the form
// README.md, docs/mount.md and /README carry.
func ErrnoTableMarkdown() string {
	var b strings.Builder
	b.WriteString("| errno | engine kind | when |\n| --- | --- | --- |\n")
	for _, r := range kindTable {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Name, r.Kind, r.Meaning)
	}
	fmt.Fprintf(&b, "| %s | (none) | %s |\n", interruptRow.Name, interruptRow.Meaning)
	return b.String()
}
