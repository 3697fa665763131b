// own.go owns the check that keeps the daemon from doing I/O on its own
// mount: a path that leads into the mount point, lexically or through
// symlinks, is refused before anything opens it.
//
// Invariants:
//   - The walk never touches the mount: each candidate prefix is compared
//     with the mount point before it is stat'ed or read.
//   - The check is advisory against races (a symlink can change between
//     the check and the engine's open); it exists to stop a user from
//     deadlocking the daemon by accident, not as a security boundary
//     (the device check after the open is one; control/segment.go).

package fusefs

import (
	"os"
	"path/filepath"
	"strings"
)

// maxSymlinks bounds the links followed in one walk (the kernel's limit).
const maxSymlinks = 40

// LeadsInto returns a function reporting whether an absolute path
// resolves to dir or beneath it. Missing components and unreadable links
// end the walk with false: the engine's open then reports them.
func LeadsInto(dir string) func(path string) bool {
	dir = filepath.Clean(dir)
	return func(path string) bool { return leadsInto(dir, path) }
}

func within(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

func leadsInto(dir, path string) bool {
	if !filepath.IsAbs(path) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return false
		}
		path = abs
	}
	rest := strings.Split(path, "/")
	cur, links := "/", 0
	for len(rest) > 0 {
		comp := rest[0]
		rest = rest[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, comp)
		if within(dir, next) {
			return true
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		target, err := os.Readlink(next)
		if err != nil || links > maxSymlinks {
			return false
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return within(dir, cur)
}
