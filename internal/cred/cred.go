// Package cred runs filesystem calls with another user's credentials, so
// the kernel decides an open(2) exactly as it would for that user.
//
// What As guarantees:
//   - fn runs on an OS thread locked to a goroutine of its own, whose
//     filesystem uid, filesystem gid and supplementary groups are the
//     user's while fn runs. They are set with raw per-thread system calls
//     (setgroups, setfsgid, setfsuid), never the libc or Go wrappers that
//     broadcast a change to every thread of the process; no other
//     goroutine runs on that thread meanwhile, and the Go runtime creates
//     no thread by cloning a locked one.
//   - After fn the thread's own credentials are restored and it returns
//     to the scheduler. If restoring fails, the thread stays locked and
//     its goroutine exits: the runtime then terminates the thread, so no
//     other code ever runs with the borrowed credentials.
//   - A switch the kernel refuses (a daemon without CAP_SETUID and
//     CAP_SETGID) is an error wrapping ErrSwitch; fn then does not run.
//
// Only filesystem checks change: the effective uid (and so signals,
// ptrace, resource limits and capabilities other than the file ones)
// stays the daemon's.
package cred

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// User is the identity a call runs with.
type User struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups
}

// ErrSwitch reports that the kernel refused to switch credentials.
var ErrSwitch = errors.New("cannot take on the caller's credentials")

// invalidID makes setfsuid/setfsgid change nothing and return the
// current value (the kernel refuses (uid_t)-1).
const invalidID = ^uintptr(0)

// As runs fn with u's filesystem credentials (see the package doc) and
// returns fn's error, or an error wrapping ErrSwitch.
func As(u User, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err, restored := run(u, fn)
		if restored {
			runtime.UnlockOSThread()
		} // else: exit locked, the runtime ends the thread
		done <- err
	}()
	return <-done
}

// run switches the locked thread to u, calls fn and switches back. It
// reports whether the thread has its own credentials again.
func run(u User, fn func() error) (err error, restored bool) {
	saved, err := groups()
	if err != nil {
		return fmt.Errorf("%w: getgroups: %v", ErrSwitch, err), true
	}
	oldGID, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, invalidID, 0, 0)
	oldUID, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, invalidID, 0, 0)
	restore := func() bool {
		unix.RawSyscall(unix.SYS_SETFSUID, oldUID, 0, 0)
		unix.RawSyscall(unix.SYS_SETFSGID, oldGID, 0, 0)
		if setGroups(saved) != nil {
			return false
		}
		gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, invalidID, 0, 0)
		uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, invalidID, 0, 0)
		return uid == oldUID && gid == oldGID
	}
	if e := setGroups(u.Groups); e != nil {
		return fmt.Errorf("%w: setgroups for uid %d: %v", ErrSwitch, u.UID, e), restore()
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(u.GID), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(u.UID), 0, 0)
	gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, invalidID, 0, 0)
	uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, invalidID, 0, 0)
	if uid != uintptr(u.UID) || gid != uintptr(u.GID) {
		return fmt.Errorf("%w: the kernel kept fsuid %d, fsgid %d instead of uid %d, gid %d (the daemon needs CAP_SETUID and CAP_SETGID to act for other users)",
			ErrSwitch, uid, gid, u.UID, u.GID), restore()
	}
	err = fn()
	return err, restore()
}

// groups returns the calling thread's supplementary groups.
func groups() ([]uint32, error) {
	n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	if e != 0 {
		return nil, e
	}
	if n == 0 {
		return nil, nil
	}
	g := make([]uint32, n)
	n, _, e = unix.RawSyscall(unix.SYS_GETGROUPS, n, uintptr(unsafe.Pointer(&g[0])), 0)
	if e != 0 {
		return nil, e
	}
	return g[:n], nil
}

// setGroups sets the calling thread's supplementary groups. gid_t is 32
// bits and SYS_SETGROUPS takes it on amd64 and arm64, the architectures
// orbitefs builds for (386 and 32-bit arm would need SYS_SETGROUPS32).
func setGroups(g []uint32) error {
	var p uintptr
	if len(g) > 0 {
		p = uintptr(unsafe.Pointer(&g[0]))
	}
	_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(g)), p, 0)
	runtime.KeepAlive(g)
	if e != 0 {
		return e
	}
	return nil
}
