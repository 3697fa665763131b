// storewait.go owns the engine's defence against stores that stop
// answering: which filesystems cannot do non-blocking I/O, and the
// bounded calls that keep a caller from waiting on them.
//
// A FUSE server that is stopped, or a network filesystem whose server is
// gone, parks every request to it in the kernel, and nothing the caller
// does (not even a signal, for most of them) gets it back. io_uring
// cannot ask these filesystems for non-blocking I/O either: a read
// issued inline from io_uring_enter waits for the server right there
// (io_read -> fuse_direct_IO -> request_wait_answer). So for a segment
// on such a filesystem (segEntry.blocking):
//   - every ring op is punted to the kernel's io-wq threads at once
//     (FileOp.Offload, IOSQE_ASYNC): the thread that submits never
//     blocks, and the worker's unquiesced cutoff runs on time;
//   - its groups never run on the submitting caller (no fast path, no
//     caller copy), so a client's write(2) never issues its I/O;
//   - open, fstat and close of its file run on a helper goroutine: the
//     caller waits at most store_call_timeout, then gets ETIMEDOUT, and
//     only the helper (and the OS thread it sits on) stays behind until
//     the kernel returns. One helper per entry at a time bounds the leak.
//
// Opening a segment runs on a helper on every filesystem: the kind of
// filesystem is only known once the open returned.

package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// blockingFS lists the statfs f_type values of filesystems whose reads
// and writes may wait on a remote or user-space server and which do not
// support IOCB_NOWAIT: FUSE (and virtiofs, which reports FUSE's magic),
// NFS, SMB/CIFS, Ceph, 9p, AFS, Coda, GlusterFS (FUSE), OCFS2 and
// GFS2 (cluster locks). A filesystem missing here is treated as local:
// its ops may run inline and on the caller.
var blockingFS = map[int64]string{
	0x65735546: "fuse",
	0x6969:     "nfs",
	0xFF534D42: "cifs",
	0xFE534D42: "smb2",
	0x517B:     "smb",
	0x00C36400: "ceph",
	0x01021997: "9p",
	0x5346414F: "afs",
	0x6B414653: "kafs",
	0x73757245: "coda",
	0x7461636f: "ocfs2",
	0x01161970: "gfs2",
}

// isBlockingFS reports whether a filesystem of statfs type t may block
// an I/O submission on its server.
func isBlockingFS(t int64) bool {
	_, ok := blockingFS[t]
	return ok
}

// storeTimeout is what a bounded call returns when the kernel did not.
func storeTimeout(what string, d time.Duration) error {
	return detail(KindTimeout, "%s did not return within store_call_timeout (%s): the filesystem does not answer; the call is left to finish in the background", what, d)
}

// boundedCall runs fn on a helper goroutine and waits at most d for it.
// On timeout it returns a KindTimeout error, and late, when not nil,
// gets fn's result on the helper once fn returns (to close what it
// opened). busy, when not nil, admits one helper at a time: while an
// earlier call is still stuck, a new one fails at once instead of
// parking another thread.
func boundedCall[T any](d time.Duration, what string, busy *atomic.Bool, fn func() (T, error), late func(T, error)) (T, error) {
	var zero T
	if busy != nil && !busy.CompareAndSwap(false, true) {
		return zero, detail(KindTimeout, "%s: an earlier call on this file has not returned for more than store_call_timeout (%s): the filesystem does not answer", what, d)
	}
	var (
		mu     sync.Mutex // whoever comes second under mu owns the result
		done   bool
		gaveUp bool
		v      T
		err    error
	)
	finished := make(chan struct{})
	go func() {
		rv, rerr := fn()
		if busy != nil {
			busy.Store(false)
		}
		mu.Lock()
		if gaveUp {
			mu.Unlock()
			if late != nil {
				late(rv, rerr)
			}
			return
		}
		v, err, done = rv, rerr, true
		mu.Unlock()
		close(finished)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-finished:
	case <-t.C:
		mu.Lock()
		if !done {
			gaveUp = true
			mu.Unlock()
			return zero, storeTimeout(what, d)
		}
		mu.Unlock()
	}
	return v, err
}
