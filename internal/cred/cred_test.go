package cred

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

const nobody = 65534

// TestAs checks the three promises a caller relies on: the borrowed
// identity is the kernel's for fn's opens, no other thread has it
// meanwhile, and the thread that ran fn has its own back afterwards.
func TestAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching to another user needs root (CAP_SETUID, CAP_SETGID)")
	}
	dir := traversable(t)
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	openSecret := func() error {
		fd, err := unix.Open(secret, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	saved, err := groups()
	if err != nil {
		t.Fatal(err)
	}
	var fsuid, others error
	err = As(User{UID: nobody, GID: nobody}, func() error {
		fsuid = openSecret()
		// Another goroutine cannot run on this locked thread: it sees
		// the process's own credentials, or the switch leaked.
		ch := make(chan error)
		go func() { ch <- openSecret() }()
		others = <-ch
		return errors.New("fn's error")
	})
	if err == nil || err.Error() != "fn's error" {
		t.Fatalf("As returned %v, want fn's error", err)
	}
	if !errors.Is(fsuid, unix.EACCES) {
		t.Errorf("open of a root 0600 file as nobody: %v, want EACCES", fsuid)
	}
	if others != nil {
		t.Errorf("open from another goroutine while As ran: %v, want success (the switch is per thread)", others)
	}
	// The thread that ran fn has the process's credentials again: run
	// on this goroutine's own locked thread, then open from it.
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err, restored := run(User{UID: nobody, GID: nobody, Groups: []uint32{nobody}}, openSecret)
		if !errors.Is(err, unix.EACCES) || !restored {
			t.Fatalf("run as nobody: %v, restored %v; want EACCES, restored", err, restored)
		}
		if err := openSecret(); err != nil {
			t.Fatalf("open on the same thread after run: %v: credentials were not restored", err)
		}
		if g, err := groups(); err != nil || len(g) != len(saved) {
			t.Fatalf("groups after run: %v %v, want %v", g, err, saved)
		}
	}()
	// Supplementary groups count as the kernel counts them.
	group := filepath.Join(dir, "group")
	if err := os.WriteFile(group, nil, 0o060); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(group, 0, 4242); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(group, 0o060); err != nil { // past the umask
		t.Fatal(err)
	}
	for _, tc := range []struct {
		groups []uint32
		want   error
	}{{nil, unix.EACCES}, {[]uint32{4242}, nil}} {
		err := As(User{UID: nobody, GID: nobody, Groups: tc.groups}, func() error {
			fd, err := unix.Open(group, unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		})
		if !errors.Is(err, tc.want) && err != tc.want {
			t.Errorf("groups %v: open of a 0060 file of group 4242: %v, want %v", tc.groups, err, tc.want)
		}
	}
}

// traversable returns a new directory every user may search (t.TempDir's
// are 0700: nobody would fail at the directory, not at the file).
func traversable(t *testing.T) string {
	dir, err := os.MkdirTemp("", "cred")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
