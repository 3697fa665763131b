// shortio.go owns what happens when the kernel moves fewer bytes than an
// op asked for: the rest is retried once, synchronously, and the task ends
// with the exact byte count and the real reason.
//
// A short count alone says nothing about why. A short write usually means
// the filesystem is full (the retry gets ENOSPC), a short read usually
// means the file shrank (the retry reads 0 bytes: end of file), and either
// may come from a truncated shared-memory region (the retry gets EFAULT).
// Retrying the remainder is what write(2) callers do, and it turns the
// count into an errno the user can act on.
//
// Invariants:
//   - The retry runs on the worker (or the fast-path caller) while the
//     task is still running, so its loans, scratch and fds are held.
//   - It uses the segment's buffered fd: the remainder of an O_DIRECT op
//     is usually not aligned.
//   - Memory is reached only through registered mappings and the group's
//     scratch; an address outside them (never expected) fails the retry.

package engine

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/orbitefs/orbitefs/internal/hostmem"
	"golang.org/x/sys/unix"
)

// errShortWrite is the retry's outcome when the kernel keeps accepting
// zero bytes without an errno.
var errShortWrite = errors.New("the kernel wrote 0 bytes without an error")

// retryRest moves the bytes of request idx after the first done, with
// preadv/pwritev on the buffered fd. It returns how many of them it moved
// and why it stopped short: nil when everything moved, io.EOF for a read
// at end of file, or the syscall's errno.
func (g *group) retryRest(idx int, done uint64) (uint64, error) {
	op := &g.ops[idx]
	bufs, err := g.iovBytes(op.Iov, done)
	if err != nil {
		return 0, err
	}
	fd, off := g.ent.buffered.FD, int64(op.Offset+done)
	moved := uint64(0)
	for len(bufs) > 0 {
		var n int
		if op.Write {
			n, err = unix.Pwritev(fd, bufs, off)
		} else {
			n, err = unix.Preadv(fd, bufs, off)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return moved, err
		}
		if n == 0 {
			if op.Write {
				return moved, errShortWrite
			}
			return moved, io.EOF
		}
		moved += uint64(n)
		off += int64(n)
		bufs = advance(bufs, n)
	}
	return moved, nil
}

// iovBytes views iov, less its first skip bytes, as slices of the mapped
// memory it points at.
func (g *group) iovBytes(iov []IOVec, skip uint64) ([][]byte, error) {
	var out [][]byte
	for _, v := range iov {
		if skip >= v.Len {
			skip -= v.Len
			continue
		}
		base, n := v.Base+skip, v.Len-skip
		skip = 0
		b := g.mapped(base, n)
		if b == nil {
			return nil, fmt.Errorf("address %#x+%d is in no mapping of the submission", base, n)
		}
		out = append(out, b)
	}
	return out, nil
}

// mapped returns the bytes [addr, addr+n) of a region or scratch mapping
// the group holds, or nil.
func (g *group) mapped(addr, n uint64) []byte {
	in := func(m *hostmem.Mapping) []byte {
		if addr >= m.Addr() && addr+n <= m.Addr()+m.Len() {
			return m.Bytes()[addr-m.Addr() : addr-m.Addr()+n]
		}
		return nil
	}
	for _, rr := range g.ranges {
		if b := in(rr.region.m); b != nil {
			return b
		}
	}
	for _, m := range g.scratch {
		if b := in(m); b != nil {
			return b
		}
	}
	return nil
}

// advance drops the first n bytes of bufs.
func advance(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	return bufs
}

// shortOutcomeLocked is the outcome of request idx, whose op moved only
// got of its bytes: the rest is retried, then the task completes or fails
// with the exact count. The retry is a synchronous syscall under b.mu; it
// is rare (a full disk, a shrunk file) and returns at once in those
// cases, so it does not hold status readers for long. REQUIRES: b.mu.
func (b *Batch) shortOutcomeLocked(g *group, idx int, got uint64) outcome {
	moved, err := g.retryRest(idx, got)
	o := outcome{transferred: got + moved, drained: true}
	if want := b.mu.tasks[g.first+idx].length; err != nil || o.transferred != want {
		if g.op == OpWrite {
			o.effect = EffectUnknown
		}
		if errors.Is(err, io.EOF) && g.ent != nil {
			g.ent.noteEOF(g.ops[idx].Offset + o.transferred) // later reads past it are refused at submit
		}
		o.err = g.shortError(idx, o.transferred, want, err)
	}
	return o
}

// shortError classifies why a transfer of want bytes stopped at got: the
// retry's errno picks the kind (errnoKind); end of file on a read is the
// file shrinking since submit (KindRange).
func (g *group) shortError(idx int, got, want uint64, cause error) *Error {
	what, call := "short read", "preadv"
	if g.op == OpWrite {
		what, call = "short write", "pwritev"
	}
	at := g.ops[idx].Offset
	if errors.Is(cause, io.EOF) {
		return errorf(KindRange, g.op.String(), g.seg.name(), "requests[%d]: %s: %d of %d bytes at offset %d (file is shorter than at submit)", idx, what, got, want, at)
	}
	kind := KindIO
	var errno unix.Errno
	if errors.As(cause, &errno) {
		kind = errnoKind(errno)
		cause = os.NewSyscallError(call, errno)
	}
	return errorf(kind, g.op.String(), g.seg.name(), "requests[%d]: %s: %d of %d bytes at offset %d, the rest failed: %w", idx, what, got, want, at, cause)
}

// errnoKind picks the kind of an I/O errno: a full filesystem or quota is
// KindNoSpace (ENOSPC at the mount), a file over its size limit
// KindTooLarge, anything else KindIO.
func errnoKind(errno unix.Errno) Kind {
	switch errno {
	case unix.ENOSPC, unix.EDQUOT:
		return KindNoSpace
	case unix.EFBIG:
		return KindTooLarge
	}
	return KindIO
}
