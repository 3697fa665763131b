package fusefs

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestProcGroups: the groups come from the task's status only when its
// filesystem ids are the request's (a reused pid gives none).
func TestProcGroups(t *testing.T) {
	pid, uid, gid := uint32(os.Getpid()), uint32(os.Geteuid()), uint32(os.Getegid())
	want, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	got := procGroups(pid, uid, gid)
	if len(got) != len(want) || !slices.EqualFunc(got, want, func(a uint32, b int) bool { return int(a) == b }) {
		t.Errorf("procGroups(self) = %v, want %v", got, want)
	}
	if got := procGroups(pid, uid+1, gid); got != nil {
		t.Errorf("procGroups with another uid = %v, want nil", got)
	}
	if got := procGroups(pid, uid, gid+1); got != nil {
		t.Errorf("procGroups with another gid = %v, want nil", got)
	}
	if got := procGroups(1<<30, uid, gid); got != nil {
		t.Errorf("procGroups of a missing pid = %v, want nil", got)
	}
}

// BenchmarkCaller: what identifying the caller adds to an open: nothing
// to read for the daemon's own user or without groups, one /proc status
// read for another user's groups.
func BenchmarkCaller(b *testing.B) {
	for _, tc := range []struct {
		name string
		uid  uint32
	}{{"daemon", uint32(os.Geteuid())}, {"other", uint32(os.Geteuid()) + 1}} {
		f := &fsys{uid: uint32(os.Geteuid())}
		ctx := fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: tc.uid}, Pid: uint32(os.Getpid())})
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f.fileCaller(ctx)
			}
		})
	}
}
