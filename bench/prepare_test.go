package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestPrepare(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	n, err := Prepare(p, 10000)
	if err != nil || n != 10000 {
		t.Fatalf("Prepare new: %d, %v", n, err)
	}
	first, _ := os.ReadFile(p)
	if bytes.Count(first, []byte{0}) > 1000 {
		t.Error("prepared data looks sparse, not random")
	}
	// Smaller or equal: untouched, never truncated.
	if n, err := Prepare(p, 4096); err != nil || n != 0 {
		t.Fatalf("Prepare smaller: %d, %v", n, err)
	}
	// Larger: appended, the old bytes kept.
	if n, err := Prepare(p, 20000); err != nil || n != 10000 {
		t.Fatalf("Prepare larger: %d, %v", n, err)
	}
	got, _ := os.ReadFile(p)
	if len(got) != 20000 || !bytes.Equal(got[:10000], first) {
		t.Fatalf("grown file: %d bytes, prefix kept %v", len(got), bytes.Equal(got[:10000], first))
	}
	if _, err := Prepare(t.TempDir(), 1); err == nil {
		t.Error("Prepare on a directory succeeded")
	}
	if _, err := Prepare(filepath.Join(t.TempDir(), "no", "dir"), 1); err == nil {
		t.Error("Prepare without the parent directory succeeded")
	}
}
