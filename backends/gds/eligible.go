// eligible.go owns the checks made before cuFile sees an fd: O_DIRECT and
// a file system with a block device. They answer with named errors that do
// not depend on what the installed cuFile version returns for the same
// mistake, and they cost two syscalls.

package gds

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// checkEligible refuses an fd cuFile cannot register.
func checkEligible(fd int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("%w: fcntl(F_GETFL) on fd %d: %w", ErrInvalid, fd, err)
	}
	if fl&unix.O_DIRECT == 0 {
		return fmt.Errorf("%w: fd %d was opened without O_DIRECT", ErrNotDirect, fd)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("%w: fstatfs on fd %d: %w", ErrInvalid, fd, err)
	}
	switch int64(fs.Type) {
	case unix.TMPFS_MAGIC:
		return fmt.Errorf("%w: fd %d is on tmpfs (no block device)", ErrIneligible, fd)
	case unix.RAMFS_MAGIC:
		return fmt.Errorf("%w: fd %d is on ramfs (no block device)", ErrIneligible, fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: fstat on fd %d: %w", ErrInvalid, fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: fd %d is not a regular file (mode %#o)", ErrIneligible, fd, st.Mode&unix.S_IFMT)
	}
	return nil
}

// udevEntry is the udev database file cuFile reads for the block device
// behind fd, and whether it exists.
func udevEntry(fd int) (string, bool) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", false
	}
	p := fmt.Sprintf("/run/udev/data/b%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	_, err := os.Stat(p)
	return p, err == nil
}
