package bench

import (
	"math"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	// Every value lands in a bucket whose range holds it, and buckets are
	// contiguous and increasing.
	prevHi := uint64(0)
	for i := 0; i < numBuckets; i++ {
		lo, w := bucketRange(i)
		if lo != prevHi {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		prevHi = lo + w
	}
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 123456789, 1 << 40, math.MaxUint64} {
		lo, w := bucketRange(bucketOf(v))
		if v < lo || v-lo >= w {
			t.Errorf("value %d in bucket %d = [%d, %d+%d)", v, bucketOf(v), lo, lo, w)
		}
		if v >= 64 && float64(w)/float64(v) > 1.0/64 {
			t.Errorf("value %d: bucket width %d is more than 1/64 of it", v, w)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Max() != 0 {
		t.Fatal("empty histogram is not all zero")
	}
	// 1..10000 microseconds, once each.
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {0.999, 9990 * time.Microsecond}, {1, 10000 * time.Microsecond}, {0, time.Microsecond}} {
		got := h.Quantile(c.q)
		if diff := math.Abs(float64(got-c.want)) / float64(c.want); diff > 1.0/64 {
			t.Errorf("Quantile(%g) = %s, want %s within 1/64", c.q, got, c.want)
		}
	}
	if h.Count() != 10000 || h.Max() != 10*time.Millisecond {
		t.Errorf("count %d max %s", h.Count(), h.Max())
	}
	if m := h.Mean(); m != 5000500*time.Nanosecond {
		t.Errorf("mean %s", m)
	}
	var a, b Histogram
	a.Record(time.Millisecond)
	b.Record(3 * time.Millisecond)
	b.Record(-time.Second) // counts as zero
	a.Merge(&b)
	if a.Count() != 3 || a.Max() != 3*time.Millisecond || a.Quantile(0) != 0 {
		t.Errorf("merge: count %d max %s min %s", a.Count(), a.Max(), a.Quantile(0))
	}
}
