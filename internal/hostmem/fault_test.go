package hostmem

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// TestCopyFault: a copy from or to a shared mapping whose file was
// truncated returns a FaultError with an address inside the cut range,
// instead of the runtime's fatal "fault" error; the goroutine's
// panic-on-fault setting is restored either way.
func TestCopyFault(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-hostmem-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	f, err := os.Create(filepath.Join(dir, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := uint64(4 * PageSize)
	if err := f.Truncate(int64(n)); err != nil {
		t.Fatal(err)
	}
	m, err := SharedFile(int(f.Fd()), f.Name(), n)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	buf := make([]byte, PageSize)
	if got, err := Copy(buf, m.Bytes()[:PageSize]); err != nil || got != PageSize {
		t.Fatalf("copy before the cut: %d %v", got, err)
	}
	if err := f.Truncate(int64(PageSize)); err != nil {
		t.Fatal(err)
	}
	cut := m.Addr() + uint64(PageSize)
	for name, do := range map[string]func() (int, error){
		"from": func() (int, error) { return Copy(buf, m.Bytes()[PageSize:2*PageSize]) },
		"to":   func() (int, error) { return Copy(m.Bytes()[3*PageSize:], buf) },
	} {
		got, err := do()
		var fe *FaultError
		if !errors.As(err, &fe) || got != 0 {
			t.Fatalf("copy %s the cut range: %d %v, want a FaultError", name, got, err)
		}
		if a := uint64(fe.Addr); a < cut || a >= m.Addr()+n {
			t.Errorf("copy %s: fault address %#x outside the cut range [%#x, %#x)", name, a, cut, m.Addr()+n)
		}
	}
	if debug.SetPanicOnFault(false) {
		t.Error("Copy left panic-on-fault set on the goroutine")
	}
}
