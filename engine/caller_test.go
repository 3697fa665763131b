// caller_test.go: opens made for another user are decided by the
// kernel with that user's rights, also when the daemon already holds the
// file open for itself (the shared entry is not lent across identities).

package engine_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

const nobody = 65534

func TestCallerRights(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting for another user needs root")
	}
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-caller-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	rootFile := filepath.Join(dir, "root")
	ownFile := filepath.Join(dir, "own")
	for _, f := range []string{rootFile, ownFile} {
		if err := os.WriteFile(f, make([]byte, 8192), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(ownFile, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = []string{dir} }, &refTransport{})
	nb := &engine.Caller{UID: nobody, GID: nobody}

	// The daemon's own open first: a later open for nobody must not
	// share its entry.
	mine, err := e.OpenFileSegment("file://"+rootFile, engine.PermRead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.CloseFileSegment(mine, 0) })
	for _, perm := range []engine.Permission{engine.PermRead, engine.PermWrite, engine.PermReadWrite} {
		_, err := e.OpenFileSegmentAs(nb, "file://"+rootFile, perm)
		wantKind(t, err, engine.KindPermission)
	}
	_, err = e.RegisterSharedFileAs(nb, rootFile, 4096)
	wantKind(t, err, engine.KindPermission)

	// nobody's own file opens for nobody, and a second open shares it.
	for range 2 {
		s, err := e.OpenFileSegmentAs(nb, "file://"+ownFile, engine.PermReadWrite)
		if err != nil {
			t.Fatalf("nobody opening its own 0600 file: %v", err)
		}
		t.Cleanup(func() { e.CloseFileSegment(s, 0) })
	}
	r, err := e.RegisterSharedFileAs(nb, ownFile, 4096)
	if err != nil {
		t.Fatalf("nobody registering its own 0600 file: %v", err)
	}
	e.Unregister(r)

	// Entries are not shared across identities: a path that root opened
	// and that now names nobody's file gives nobody its own file, never
	// root's descriptor (8192 bytes against 4096).
	link := filepath.Join(dir, "link")
	if err := os.Symlink(rootFile, link); err != nil {
		t.Fatal(err)
	}
	viaLink, err := e.OpenFileSegment("file://"+link, engine.PermRead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.CloseFileSegment(viaLink, 0) })
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(small, nobody, nobody)
	os.Remove(link)
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	s, err := e.OpenFileSegmentAs(nb, "file://"+link, engine.PermRead)
	if err != nil {
		t.Fatalf("nobody opening a link to its own file: %v", err)
	}
	t.Cleanup(func() { e.CloseFileSegment(s, 0) })
	if info, err := e.FileSegmentInfo(s); err != nil || info.Size != 4096 {
		t.Fatalf("nobody's segment through the link: %+v, %v; want its own 4096-byte file, not root's entry", info, err)
	}

	// A sharing open checks again: once the file is root's, nobody's
	// next open is refused although its entry is still open.
	if err := os.Chown(ownFile, 0, 0); err != nil {
		t.Fatal(err)
	}
	_, err = e.OpenFileSegmentAs(nb, "file://"+ownFile, engine.PermReadWrite)
	wantKind(t, err, engine.KindPermission)
}
