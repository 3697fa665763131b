// mountfail_test.go owns how a failed non-root mount is reported: the
// daemon names fusermount3's exit status, never a raw wait status.

package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNonRootMountFailure runs the daemon as nobody on a mount point
// nobody may not write, so fusermount3 refuses (exit status 1). Where
// fusermount3 is not installed, a stand-in on PATH prints a message and
// exits 1 the same way, so the reporting is tested everywhere.
func TestNonRootMountFailure(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the daemon as another user")
	}
	bin := daemonBinary(t)
	// nobody must reach the binary and the stand-in: a 0755 directory.
	dir, err := os.MkdirTemp("", "orbitefs-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	nbin := filepath.Join(dir, "orbitefs")
	if err := os.WriteFile(nbin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("PATH")
	if _, err := exec.LookPath("fusermount3"); err != nil {
		stub := filepath.Join(dir, "stub")
		os.Mkdir(stub, 0o755)
		script := "#!/bin/sh\necho 'fusermount3 (stand-in): user has no write access to mountpoint' >&2\nexit 1\n"
		if err := os.WriteFile(filepath.Join(stub, "fusermount3"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		path = stub + ":" + path
		t.Log("fusermount3 is not installed; using a stand-in that exits 1")
	}
	mnt := filepath.Join(dir, "mnt") // owned by root, 0755: nobody cannot mount on it
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		"env", "PATH="+path, nbin, "mount", mnt)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("orbitefs mount as nobody: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "fusermount3 exited with status 1") || strings.Contains(string(out), "code 256") {
		t.Errorf("the failure does not name fusermount3's exit status 1:\n%s", out)
	}
	if len(mountsAt(mnt)) > 0 {
		forceUnmount(mnt)
		t.Errorf("a mount was left at %s", mnt)
	}
}
