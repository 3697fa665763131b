// histogram.go owns the latency histogram: log-linear buckets over
// nanoseconds, 64 per power of two, so any recorded value is reported
// within 1/64 (about 1.6%) of itself, in fixed memory, with an
// allocation-free Record.
//
// Invariants:
//   - Values below 64 ns have a bucket each; bucket i >= 64 covers
//     [m<<s, (m+1)<<s) with s = i/64-1 and m = 64+i%64.
//   - count is the sum of all buckets; min and max are exact.

package bench

import (
	"math/bits"
	"time"
)

const (
	subBits    = 6
	subBuckets = 1 << subBits
	numBuckets = (64 - subBits) * subBuckets
)

// Histogram records durations. The zero value is empty and ready to use.
// Not safe for concurrent use: give each goroutine its own and Merge.
type Histogram struct {
	buckets  [numBuckets]uint64
	count    uint64
	sum      uint64
	min, max uint64
}

func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	s := bits.Len64(v) - subBits - 1
	return (s+1)*subBuckets + int(v>>s) - subBuckets
}

// bucketRange returns bucket i's lowest value and width.
func bucketRange(i int) (lo, width uint64) {
	if i < subBuckets {
		return uint64(i), 1
	}
	s := i/subBuckets - 1
	m := uint64(subBuckets + i%subBuckets)
	return m << s, 1 << s
}

// Record adds one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.buckets[bucketOf(v)]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.count++
	h.sum += v
}

// Merge adds every value recorded in o.
func (h *Histogram) Merge(o *Histogram) {
	if o.count == 0 {
		return
	}
	for i, n := range o.buckets {
		h.buckets[i] += n
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.count += o.count
	h.sum += o.sum
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.count }

// Mean is the exact average, or 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.count == 0 {
		return 0
	}
	return time.Duration(h.sum / h.count)
}

// Max is the largest recorded value, or 0 when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the value at quantile q in [0, 1]: the midpoint of the
// bucket holding the ceil(q*count)-th smallest value, clamped to the
// exact min and max. It returns 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(q*float64(h.count) + 0.999999999)
	rank = min(max(rank, 1), h.count)
	var seen uint64
	for i, n := range h.buckets {
		seen += n
		if seen >= rank {
			lo, w := bucketRange(i)
			v := lo + w/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
