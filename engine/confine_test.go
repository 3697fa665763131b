// confine_test.go: shared-memory registration uses the same confinement
// as segments: a symlink whose target stays beneath an allowed root is
// followed, one that leads out is refused.

package engine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestSharedFileSymlinks(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "orbitefs-confine-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	other := t.TempDir()
	os.WriteFile(filepath.Join(shm, "buf"), make([]byte, 8192), 0o600)
	os.WriteFile(filepath.Join(other, "buf"), make([]byte, 8192), 0o600)
	os.Symlink(filepath.Join(shm, "buf"), filepath.Join(shm, "abs-in"))
	os.Symlink("buf", filepath.Join(shm, "rel-in"))
	os.Symlink(filepath.Join(other, "buf"), filepath.Join(shm, "abs-out"))
	os.Symlink("/etc/hostname", filepath.Join(shm, "etc"))
	e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = []string{shm} }, &refTransport{})
	for _, name := range []string{"abs-in", "rel-in"} {
		r, err := e.RegisterSharedFile(filepath.Join(shm, name), 8192)
		if err != nil {
			t.Fatalf("%s: a symlink whose target stays beneath the root must register: %v", name, err)
		}
		e.Unregister(r)
	}
	for _, name := range []string{"abs-out", "etc"} {
		_, err := e.RegisterSharedFile(filepath.Join(shm, name), 4096)
		wantKind(t, err, engine.KindPermission)
	}
}
