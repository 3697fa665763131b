// netns.go owns running a piece of setup inside another network
// namespace: a socket belongs to the namespace of the thread that made
// it, for its whole life, so `bench peer` can listen on one end of a
// veth pair while it dials from the other, within one process.
//
// Invariant: the thread that entered the namespace goes back to its own
// before it is unlocked; if it cannot, it stays locked and dies with its
// goroutine, so no other goroutine ever runs in the wrong namespace.

package bench

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on a thread inside the network namespace at path (for
// example /var/run/netns/NAME, made by `ip netns add NAME`).
func InNetns(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- fmt.Errorf("network namespace: %w", err)
			return // still locked: the thread ends with the goroutine
		}
		defer self.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering the network namespace %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("leaving the network namespace %s: %w", path, err)
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}
