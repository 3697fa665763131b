// hostcopy.go owns the host copy executor: large requests between host
// memory and a file that lives in memory (tmpfs, ramfs, hugetlbfs), and
// the mid-size requests of a group of several (a KV-cache batch), cut
// into units and copied with pread/pwrite by an engine-wide set of lanes
// (goroutines), one core each.
//
// Why: on such a file a buffered ring op is a memory copy that one
// thread does (inline, or one io-wq worker): one 256 MiB READ was one SQE
// copied at 4.2 GB/s on the GPU machine, while the same bytes in 4 MiB
// requests moved at 35 GB/s over 16 cores. Cut into units, one request
// uses every lane; units of every batch share the lanes through the fair
// queue (fairqueue.go), so many clients and one large load all progress.
// Small requests keep the caller copy (callercopy.go) or the ring, and
// O_DIRECT and disk files keep their deep rings: a disk is not sped up
// by more copying threads.
//
// Invariants (besides offring.go's):
//   - A unit is copied by one synchronous system call loop: it always
//     returns, so a lane never leaves anything in flight and every unit
//     drains (no unquiesced outcome on this path).
//   - A unit starts only before its deadline and while its task has not
//     failed (offRing.startable); a WRITE unit is marked submitted
//     before its first pwrite.
//   - Lanes start on the first job and stop at Engine.Close
//     (lanepool.go).

package engine

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/orbitefs/orbitefs/config"
	"golang.org/x/sys/unix"
)

// hostCopyUnit is the bytes one lane copies at once: large enough that a
// unit's setup is noise (4 MiB requests reached 35 GB/s from tmpfs on 16
// cores), small enough that a 256 MiB request spreads over every lane.
const hostCopyUnit = config.HostCopyUnit

// hostCopyExec is the engine-wide host copy executor: one lane per core,
// up to 16.
type hostCopyExec struct{ *lanePool }

func newHostCopyExec() hostCopyExec {
	return hostCopyExec{newLanePool(min(runtime.GOMAXPROCS(0), 16), copyUnit)}
}

// hostCopyEligible reports whether request r (host memory only) of
// group g goes to the host copy lanes: a single range on an in-memory
// file with the transport left to the engine, and either
//   - one unit or more. A request of exactly one unit that is alone in
//     its group is left to the caller copy (callercopy.go): the
//     submitter's own pread, as the parallel pread loop does it, where a
//     hand-off to a lane cost a wake-up and the lanes' one core each: 32
//     such requests in flight on two cores moved 9.4 GB/s through the
//     lanes against 17.2 copied by their submitters (the pread loop
//     17.3); if FIFO order or a fence keeps it from starting at once, it
//     goes to the ring like any group the caller cannot copy; or
//   - a request of a group the lanes take whole (lanesBatch).
//
// Group size does not matter otherwise: the worker hands an off-ring
// group to its executors a window at a time (offring.go), so a bulk
// group's tasks not yet started stay pending and cancellable, as on the
// ring. With the runtime queue enabled the ring keeps it, so its
// dispatch window accounting is unchanged (an off-ring group takes its
// window whole).
func (e *Engine) hostCopyEligible(g *group, r *Request, m reqMemory) bool {
	if g.lanesBatch {
		return !m.device // lanesBatch checked the rest of every request
	}
	if r.Transport != TransportUnspec || !g.ent.inMemory || m.device || len(r.Elements) > 0 || e.cfg.RuntimeQueue.Enabled {
		return false
	}
	return r.Length >= hostCopyUnit && (r.Length > hostCopyUnit || g.n > 1 || !e.cfg.CallerCopy || e.adm.gates())
}

// lanesBatch reports whether the host copy lanes take a group of reqs on
// ent whole: several scalar requests on an in-memory file, each of
// host_copy_min_bytes or more with the transport left to the engine (a
// KV-cache batch of 128 KiB groups), and more bytes in all than a caller
// copy takes (callercopy.go keeps those). Every request qualifies or the
// group keeps its old routes, so a small request, a vector or an
// explicit io_uring request never rides along onto the lanes as a unit
// of its own.
//
// Why: on the ring, each batch's requests were copied inline by its own
// worker's io_uring_enter, one batch per thread, and the batches ran in
// whatever order the Go scheduler picked their workers: 64 clients of
// 16 x 128 KiB on dev saw a batch p99 35x their p50 (175 against 5 ms),
// and one client used one core. On the lanes a batch's requests spread
// over every core and the fair queue serves the batches round-robin:
// p99 1.9x p50, one client 2.1x faster (docs/performance.md, "KV batches
// on tmpfs"). Below 128 KiB a unit's hand-off costs more than the copy
// it spreads.
func (e *Engine) lanesBatch(ent *segEntry, reqs []Request) bool {
	least := uint64(e.cfg.HostCopyMinBytes)
	if least == 0 || len(reqs) < 2 || !ent.inMemory || e.cfg.RuntimeQueue.Enabled {
		return false
	}
	var total uint64
	for i := range reqs {
		r := &reqs[i]
		if r.Transport != TransportUnspec || len(r.Elements) > 0 || r.Length < least {
			return false
		}
		total += r.Length
	}
	return !e.cfg.CallerCopy || total > uint64(e.cfg.CallerFastPathBytes)
}

func (hostCopyExec) cut() (uint64, bool) { return hostCopyUnit, true }

func (hostCopyExec) path() string { return "host_copy" }

// transport: a host copy moves bytes as a caller copy does.
func (hostCopyExec) transport() TransportKind { return TransportCopy }

// copyUnit moves unit k of job x with pread/pwrite on the buffered fd.
func copyUnit(x *offRing, k int) {
	g := x.g
	u := &x.units[k]
	if err := x.startable(k); err != nil {
		x.resolve(k, 0, err)
		return
	}
	// Units never span pieces (cut: byPiece), and a host copy job holds
	// no device piece. Padding is read into scratch (a short read there
	// is still short) and written as zeros.
	buf := u.pieces[0].host
	if u.pieces[0].kind == piecePad {
		buf = make([]byte, u.n)
	}
	fd := g.ent.buffered.FD
	if g.op == OpWrite {
		x.markSubmitted(k)
	}
	var got uint64
	for got < u.n {
		var n int
		var err error
		if g.op == OpWrite {
			n, err = unix.Pwrite(fd, buf[got:u.n], int64(u.off+got))
		} else {
			n, err = unix.Pread(fd, buf[got:u.n], int64(u.off+got))
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			var errno unix.Errno
			kind := KindIO
			if errors.As(err, &errno) {
				kind = errnoKind(errno)
			}
			x.resolve(k, got, &Error{Op: g.op.String(), Name: g.seg.name(), Kind: kind,
				Err: fmt.Errorf("requests[%d]: %d of %d bytes at offset %d, the rest failed: %w", u.task, got, u.n, u.off, os.NewSyscallError(g.op.String(), err))})
			return
		}
		if n == 0 {
			if g.op == OpWrite {
				x.resolve(k, got, unitErr(g, u, KindIO, errShortWrite))
				return
			}
			// End of file: a short count, KindRange; later reads past
			// it are refused at submit, as after a short ring read
			// (shortio.go).
			g.ent.noteEOF(u.off + got)
			break
		}
		got += uint64(n)
	}
	g.b.e.st.hostCopyUnits.Add(1)
	x.resolve(k, got, nil)
}
