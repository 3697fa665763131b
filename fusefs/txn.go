// txn.go owns /ctl/batches/txn, the one-file transaction
// (control/txn.go has the rules): open read-write, write a submission,
// read the terminal status on the same descriptor, close frees.
//
//	exec 3<>/mnt/ctl/batches/txn
//	echo '{"op":"read","target":"cache","requests":[...]}' >&3
//	cat <&3          # blocks until terminal; the batch's status JSON
//	exec 3<&-        # frees the batch
//
// Invariants:
//   - Only O_RDWR opens are accepted (EACCES otherwise, and /error says
//     why): a transaction is written and read on one descriptor.
//   - Each open gets its own control.Txn; Release closes it, which frees
//     (or, for a running batch, cancels and later frees) its batch.

package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/control"
)

// txnFile is /ctl/batches/txn.
type txnFile struct{ writableNode }

var _ fs.NodeOpener = (*txnFile)(nil)

func (n *txnFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if m := accessMode(flags); m != syscall.O_RDWR {
		return nil, 0, errno(n.f.svc.RefuseTxnOpen(n.f.caller(ctx), m == syscall.O_RDONLY))
	}
	t := n.f.svc.NewTxn(n.f.caller(ctx))
	if flags&syscall.O_APPEND != 0 {
		t.Append()
	}
	return &txnHandle{t: t}, writeOpenFlags, 0
}

// txnHandle is one open of the transaction file.
type txnHandle struct{ t *control.Txn }

var (
	_ fs.FileWriter   = (*txnHandle)(nil)
	_ fs.FileReader   = (*txnHandle)(nil)
	_ fs.FileFlusher  = (*txnHandle)(nil)
	_ fs.FileReleaser = (*txnHandle)(nil)
)

func (h *txnHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.t.Write(data, off); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

func (h *txnHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, err := h.t.Read(ctx, dest, off)
	if err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(b), 0
}

func (h *txnHandle) Flush(ctx context.Context) syscall.Errno { return errno(h.t.Flush()) }

func (h *txnHandle) Release(ctx context.Context) syscall.Errno {
	h.t.Close()
	return 0
}
