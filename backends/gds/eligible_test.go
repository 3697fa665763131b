// eligible_test.go tests the local refusals on real files: ext4 (the
// test's temp folder must be on a block device) and tmpfs (/dev/shm).

package gds

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// blockDir is a folder on a file system with a block device, or a skip.
func blockDir(t testing.TB) string {
	for _, d := range []string{os.Getenv("ORBITEFS_GDS_DIR"), "/var/tmp", "/tmp"} {
		if d == "" {
			continue
		}
		var fs unix.Statfs_t
		if unix.Statfs(d, &fs) == nil && fs.Type != unix.TMPFS_MAGIC {
			dir, err := os.MkdirTemp(d, "gds-test-")
			if err != nil {
				continue
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	need(t, "a folder on a block device (set ORBITEFS_GDS_DIR)")
	return ""
}

func openFile(t testing.TB, path string, flags int) int {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func TestCheckEligible(t *testing.T) {
	dir := blockDir(t)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkEligible(openFile(t, p, unix.O_RDWR|unix.O_DIRECT)); err != nil {
		t.Fatalf("O_DIRECT fd on %s refused: %v", dir, err)
	}
	err := checkEligible(openFile(t, p, unix.O_RDWR))
	if !errors.Is(err, ErrNotDirect) || !strings.Contains(err.Error(), "O_DIRECT") {
		t.Fatalf("buffered fd = %v, want ErrNotDirect", err)
	}
	shm, err := os.MkdirTemp("/dev/shm", "gds-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(shm)
	sp := filepath.Join(shm, "f")
	if err := os.WriteFile(sp, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(sp, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("tmpfs refuses O_DIRECT on this kernel: %v", err)
	}
	defer unix.Close(fd)
	if err := checkEligible(fd); !errors.Is(err, ErrIneligible) || !strings.Contains(err.Error(), "tmpfs") {
		t.Fatalf("tmpfs fd = %v, want ErrIneligible naming tmpfs", err)
	}
}

func TestSplit(t *testing.T) {
	ios := Split(Read, nil, 0x1000, 4096, 1<<30, 40<<20, 0, 7)
	if len(ios) != 3 {
		t.Fatalf("40 MiB split into %d slices, want 3", len(ios))
	}
	var total int64
	for i, io := range ios {
		if io.Size > MaxSlice || io.Cookie != 7+uint64(i) || io.FileOff != 1<<30+total || io.DevOff != 4096+total {
			t.Fatalf("slice %d = %+v", i, io)
		}
		total += int64(io.Size)
	}
	if total != 40<<20 || ios[2].Size != 8<<20 {
		t.Fatalf("slices cover %d bytes, last %d", total, ios[2].Size)
	}
	if got := Split(Read, nil, 1, 0, 0, 0, 0, 0); got != nil {
		t.Fatalf("empty request split into %v", got)
	}
	if got := Split(Write, nil, 1, 0, 0, 10<<20, 4<<20, 0); len(got) != 3 || got[0].Op != Write {
		t.Fatalf("10 MiB by 4 MiB = %d slices", len(got))
	}
}
