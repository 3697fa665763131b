package bench

import (
	"slices"
	"testing"
)

func TestOffsets(t *testing.T) {
	o := Options{BlockSize: 4096, Size: 4*4096 + 100, Pattern: Seq}
	g := newOffsets(&o, 0)
	var got []uint64
	for range 6 {
		got = append(got, g.Next())
	}
	if want := []uint64{0, 4096, 8192, 12288, 0, 4096}; !slices.Equal(got, want) {
		t.Errorf("seq = %v, want %v (whole blocks only, wrapping)", got, want)
	}

	o.Pattern, o.Size, o.Seed = Rand, 1<<20, 7
	a, b := newOffsets(&o, 3), newOffsets(&o, 3)
	seen := map[uint64]bool{}
	for range 1000 {
		x := a.Next()
		if x != b.Next() {
			t.Fatal("same seed and stream gave different sequences")
		}
		if x%4096 != 0 || x+4096 > o.Size {
			t.Fatalf("rand offset %d: not an aligned block inside %d bytes", x, o.Size)
		}
		seen[x] = true
	}
	if len(seen) < 200 {
		t.Errorf("1000 random draws over 256 blocks hit only %d", len(seen))
	}
}
