// caller.go owns who a FUSE request comes from: the uid and gid the
// kernel puts in every request, and the supplementary groups of the
// calling thread, which the kernel does not send.
//
// Groups matter only where a file is opened for the caller (segments/open,
// memory/register), so only those files ask for them (fileCaller): other
// operations compare uids alone and do not pay the read (25 µs and 71
// allocations per open, BenchmarkCaller). Groups are read from
// /proc/<pid>/status ("Groups:"), pid being the request's (the kernel
// gives the calling thread's id, translated into the daemon's pid
// namespace). That read is skipped for root and the daemon's own user,
// whose opens use the daemon's credentials anyway (engine/caller.go). When the file cannot be read (the caller already
// exited, lives in a pid namespace the daemon cannot see: pid 0) or
// names other ids than the request (the pid was reused), the caller gets
// no supplementary groups: its primary gid only, which can only grant
// less than the kernel would, never more.

package fusefs

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/engine"
)

// unknownID is no user: a request without caller data (go-fuse always
// sets it) is refused everything an unprivileged caller is.
const unknownID = ^uint32(0)

// caller returns the identity behind the request in ctx, without
// supplementary groups.
func (f *fsys) caller(ctx context.Context) *engine.Caller {
	fc, ok := fuse.FromContext(ctx)
	if !ok {
		return &engine.Caller{UID: unknownID, GID: unknownID}
	}
	return &engine.Caller{UID: fc.Uid, GID: fc.Gid}
}

// fileCaller is caller with the supplementary groups, for operations
// that open files as the caller.
func (f *fsys) fileCaller(ctx context.Context) *engine.Caller {
	c := f.caller(ctx)
	if fc, ok := fuse.FromContext(ctx); ok && c.UID != 0 && c.UID != f.uid && fc.Pid != 0 {
		c.Groups = procGroups(fc.Pid, fc.Uid, fc.Gid)
	}
	return c
}

// procGroups reads the supplementary groups of task pid, or nil when its
// status is unreadable or its filesystem ids are not uid and gid.
func procGroups(pid, uid, gid uint32) []uint32 {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	var groups []uint32
	okUID, okGID := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, _ := bytes.Cut(sc.Bytes(), []byte(":"))
		f := bytes.Fields(val)
		switch string(key) {
		case "Uid", "Gid":
			// real, effective, saved, filesystem: the request carries
			// the filesystem id.
			want := uid
			if string(key) == "Gid" {
				want = gid
			}
			ok := len(f) == 4 && string(f[3]) == strconv.FormatUint(uint64(want), 10)
			if string(key) == "Uid" {
				okUID = ok
			} else {
				okGID = ok
			}
		case "Groups":
			for _, g := range f {
				n, err := strconv.ParseUint(string(g), 10, 32)
				if err != nil {
					return nil
				}
				groups = append(groups, uint32(n))
			}
		}
	}
	if !okUID || !okGID {
		return nil
	}
	return groups
}
