package engine_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// filesystems are the real filesystems every transfer test runs on, keyed
// by the type statfs reports (not by what the directory is assumed to
// be): t.TempDir() is "ext4" only where it really is.
func filesystems(t *testing.T) map[string]string {
	t.Helper()
	fs := map[string]string{}
	add := func(dir string) {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("fs-0x%x", st.Type)
		switch st.Type {
		case unix.EXT4_SUPER_MAGIC:
			name = "ext4"
		case unix.TMPFS_MAGIC:
			name = "tmpfs"
		}
		fs[name] = dir
	}
	add(t.TempDir())
	shm, err := os.MkdirTemp("/dev/shm", "orbitefs-test-")
	if err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		add(shm)
	}
	if _, ok := fs["ext4"]; !ok {
		t.Logf("no ext4 here (TMPDIR is %s): O_DIRECT paths are not covered", os.TempDir())
	}
	return fs
}

func needIOUring(t *testing.T) {
	t.Helper()
	if !haveIOUring {
		t.Skip("io_uring backend not built (tag noiouring)")
	}
}

func newEngine(t *testing.T, mut func(*config.Engine), transports ...engine.Transport) *engine.Engine {
	t.Helper()
	cfg := config.DefaultEngine()
	if mut != nil {
		mut(&cfg)
	}
	if transports == nil {
		transports = realTransports(cfg)
	}
	var bs []engine.Backend
	for _, t := range transports {
		bs = append(bs, t)
	}
	return newEngineOver(t, cfg, bs...)
}

// newEngineOver builds an engine over explicit backends, closed at cleanup.
func newEngineOver(t *testing.T, cfg config.Engine, backends ...engine.Backend) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg, backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(5 * time.Second); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return e
}

// randomFile writes n random bytes to dir/name and returns path and bytes.
func randomFile(t *testing.T, dir, name string, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func openSeg(t *testing.T, e *engine.Engine, path string, perm engine.Permission) *engine.Segment {
	t.Helper()
	s, err := e.OpenFileSegment("file://"+path, perm)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func register(t *testing.T, e *engine.Engine, n uint64) *engine.Region {
	t.Helper()
	r, err := e.RegisterMemory(n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func regionBytes(t *testing.T, r *engine.Region) []byte {
	t.Helper()
	b := make([]byte, r.Len())
	if _, err := r.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func wantKind(t *testing.T, err error, k engine.Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("want %v error, got nil", k)
	}
	if got := engine.KindOf(err); got != k {
		t.Fatalf("want kind %v, got %v: %v", k, got, err)
	}
	var ee *engine.Error
	if !errors.As(err, &ee) {
		t.Fatalf("error %v is not an *engine.Error", err)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// tmpfsDir is the tmpfs test directory of filesystems, for a test that
// also needs io_uring; the test skips without either.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	needIOUring(t)
	dir, ok := filesystems(t)["tmpfs"]
	if !ok {
		t.Skip("no tmpfs at /dev/shm")
	}
	return dir
}
