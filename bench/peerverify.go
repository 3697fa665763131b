// peerverify.go owns the byte check of `orbitefs bench peer --verify`:
// the pattern a request's bytes carry, derived from (region offset,
// round), and the per-worker record of what each of its slots holds.
//
// Invariants:
//   - A worker owns its slots alone (slot i belongs to worker i mod
//     Concurrency), so what it last wrote there is what the region holds
//     unless something else changed it: the bench's own requests never
//     overlap.
//   - A slot's round rises with every WRITE to it; a WRITE that failed
//     leaves the slot unknown (its effect may be applied or not), and an
//     unknown slot is written again before it is read. So a stale slot (a
//     WRITE acknowledged but not applied) reads back as a mismatch.
//   - Mismatches are counted over the whole run, warm-up included; a run
//     with any mismatch fails.

package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/peer"
)

// VerifyResult counts the byte check of a --verify run, from its start
// to its end (warm-up included).
type VerifyResult struct {
	Seconds            float64 `json:"seconds"`
	MovedBytes         uint64  `json:"moved_bytes"`   // every payload byte sent or received: requests, read-backs, priming
	CheckedBytes       uint64  `json:"checked_bytes"` // bytes read and compared with the pattern
	GBPerSec           float64 `json:"gb_per_sec"`    // MovedBytes per second
	MismatchedBytes    uint64  `json:"mismatched_bytes"`
	MismatchedRequests uint64  `json:"mismatched_requests"`
	FailedRequests     uint64  `json:"failed_requests"`       // errors, warm-up included
	FirstMismatch      int64   `json:"first_mismatch_offset"` // region offset of the first bad byte seen; -1: none
}

func (v *VerifyResult) String() string {
	return fmt.Sprintf("verified %.3f GB moved (%.3f GB checked) in %.1f s at %.3f GB/s: %d mismatched bytes in %d requests, %d failed requests",
		float64(v.MovedBytes)/1e9, float64(v.CheckedBytes)/1e9, v.Seconds, v.GBPerSec, v.MismatchedBytes, v.MismatchedRequests, v.FailedRequests)
}

// mix is splitmix64's finaliser: every input bit reaches every output bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// fillPattern writes the pattern of key (a round's) at region offset off into b:
// byte p of the region holds byte p%8 of mix(p/8 ^ key), so a byte in
// the wrong place, from another round or another offset differs.
func fillPattern(b []byte, off, key uint64) {
	seed := key
	i := 0
	for ; i < len(b) && (off+uint64(i))%8 != 0; i++ {
		p := off + uint64(i)
		b[i] = byte(mix(p/8^seed) >> (8 * (p % 8)))
	}
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], mix((off+uint64(i))/8^seed))
	}
	for ; i < len(b); i++ {
		p := off + uint64(i)
		b[i] = byte(mix(p/8^seed) >> (8 * (p % 8)))
	}
}

// verifier is the run's shared tally.
type verifier struct {
	nonce                             uint64 // this run's: a region left by another run never matches
	moved, checked, badBytes, badReqs atomic.Uint64
	failed                            atomic.Uint64
	mu                                sync.Mutex
	first                             int64
}

func newVerifier() *verifier {
	return &verifier{nonce: mix(uint64(time.Now().UnixNano())), first: -1}
}

// key is the pattern's seed for a worker's round.
func (v *verifier) key(round uint64) uint64 { return mix(v.nonce ^ round) }

// check compares got, read at region offset off, with
// key's pattern, using exp as scratch, and counts the bytes that differ.
func (v *verifier) check(got, exp []byte, off, key uint64) {
	fillPattern(exp, off, key)
	v.checked.Add(uint64(len(got)))
	if bytes.Equal(got, exp) {
		return
	}
	var n uint64
	first := -1
	for i := range got {
		if got[i] != exp[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	v.badBytes.Add(n)
	v.badReqs.Add(1)
	v.mu.Lock()
	if v.first < 0 {
		v.first = int64(off) + int64(first)
	}
	v.mu.Unlock()
}

func (v *verifier) result(secs float64) *VerifyResult {
	r := &VerifyResult{Seconds: secs, MovedBytes: v.moved.Load(), CheckedBytes: v.checked.Load(),
		MismatchedBytes: v.badBytes.Load(), MismatchedRequests: v.badReqs.Load(), FailedRequests: v.failed.Load(), FirstMismatch: v.first}
	if secs > 0 {
		r.GBPerSec = float64(r.MovedBytes) / secs / 1e9
	}
	return r
}

// verifyWorker is one worker of a --verify run, over the slots it owns.
type verifyWorker struct {
	o        *PeerOptions
	c        *peer.Conn
	v        *verifier
	offs     []uint64 // the slots' region offsets
	round    []uint64 // what each slot holds: 0 unknown
	next     int
	counter  uint64 // the worker's last round
	buf, exp []byte
}

func newVerifyWorker(o *PeerOptions, c *peer.Conn, v *verifier, w int) *verifyWorker {
	vw := &verifyWorker{o: o, c: c, v: v, buf: make([]byte, o.Size), exp: make([]byte, o.Size)}
	for s := uint64(w); s < o.RegionBytes/o.Size; s += uint64(o.Concurrency) {
		vw.offs = append(vw.offs, s*o.Size)
	}
	vw.round = make([]uint64, len(vw.offs))
	return vw
}

// step moves the next slot: for write, a WRITE of a new round read back
// and checked; for read, a READ checked against the slot's round (an
// unknown slot is written first, untimed). d is the time of the
// measured request.
func (vw *verifyWorker) step(ctx context.Context) (d time.Duration, err error) {
	j := vw.next
	vw.next = (j + 1) % len(vw.offs)
	off, size := vw.offs[j], uint64(len(vw.buf))
	if vw.o.Op == "write" || vw.round[j] == 0 {
		vw.counter++
		fillPattern(vw.buf, off, vw.v.key(vw.counter))
		t := time.Now()
		err := vw.c.Write(ctx, vw.o.Region, off, vw.buf)
		d = time.Since(t)
		if err != nil {
			vw.round[j] = 0
			return d, err
		}
		vw.v.moved.Add(size)
		vw.round[j] = vw.counter
	}
	t := time.Now()
	if err := vw.c.Read(ctx, vw.o.Region, off, vw.buf); err != nil {
		return d, fmt.Errorf("read-back: %w", err)
	}
	if vw.o.Op == "read" {
		d = time.Since(t)
	}
	vw.v.moved.Add(size)
	vw.v.check(vw.buf, vw.exp, off, vw.v.key(vw.round[j]))
	return d, nil
}
