package fusefs

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/orbitefs/orbitefs/internal/cred"
)

// TestProcGroups: the groups come from the task's status only when its
// filesystem ids are the request's (a reused pid gives none). The task is
// a thread given groups of its own (the kernel's pid for a request is the
// calling thread's).
func TestProcGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting groups needs root")
	}
	err := cred.As(cred.User{UID: 0, GID: 0, Groups: []uint32{4242, 4343}}, func() error {
		tid := uint32(unix.Gettid())
		if got := procGroups(tid, 0, 0); !slices.Equal(got, []uint32{4242, 4343}) {
			t.Errorf("procGroups(this thread) = %v, want [4242 4343]", got)
		}
		if got := procGroups(tid, 1, 0); got != nil {
			t.Errorf("procGroups with another uid = %v, want nil", got)
		}
		if got := procGroups(tid, 0, 1); got != nil {
			t.Errorf("procGroups with another gid = %v, want nil", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := procGroups(1<<30, 0, 0); got != nil {
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
