package engine

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestBlockingFSTable(t *testing.T) {
	for _, c := range []struct {
		t    int64
		want bool
	}{
		{0x65735546, true}, // FUSE
		{0x6969, true},     // NFS
		{0xFF534D42, true}, // CIFS
		{0xFE534D42, true}, // SMB2
		{0x00C36400, true}, // ceph
		{0x01021997, true}, // 9p
		{unix.TMPFS_MAGIC, false},
		{unix.EXT4_SUPER_MAGIC, false},
		{unix.XFS_SUPER_MAGIC, false},
	} {
		if got := isBlockingFS(c.t); got != c.want {
			t.Errorf("isBlockingFS(%#x) = %v, want %v", c.t, got, c.want)
		}
	}
}

func TestBoundedCall(t *testing.T) {
	t.Run("returns in time", func(t *testing.T) {
		v, err := boundedCall(time.Second, "x", nil, func() (int, error) { return 7, nil }, nil)
		if v != 7 || err != nil {
			t.Fatalf("got %d, %v; want 7, nil", v, err)
		}
	})
	t.Run("error passes through", func(t *testing.T) {
		boom := errors.New("boom")
		if _, err := boundedCall(time.Second, "x", nil, func() (int, error) { return 0, boom }, nil); err != boom {
			t.Fatalf("err = %v, want boom", err)
		}
	})
	t.Run("timeout, late result handed over, busy admits one", func(t *testing.T) {
		var busy atomic.Bool
		release := make(chan struct{})
		late := make(chan int, 1)
		start := time.Now()
		_, err := boundedCall(50*time.Millisecond, "fstat f", &busy, func() (int, error) {
			<-release
			return 42, nil
		}, func(v int, err error) { late <- v })
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("the bounded call took %s", d)
		}
		// The first helper is still stuck: a second call fails at once.
		called := false
		_, err = boundedCall(time.Minute, "fstat f", &busy, func() (int, error) { called = true; return 0, nil }, nil)
		if !errors.Is(err, ErrTimeout) || called {
			t.Fatalf("second call while the first is stuck: err %v, ran %v; want ErrTimeout without running", err, called)
		}
		close(release)
		select {
		case v := <-late:
			if v != 42 {
				t.Fatalf("late result %d, want 42", v)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the late result never reached late()")
		}
		// Once the helper returned, busy admits the next call.
		if v, err := boundedCall(time.Second, "fstat f", &busy, func() (int, error) { return 1, nil }, nil); v != 1 || err != nil {
			t.Fatalf("call after the stuck one returned: %d, %v", v, err)
		}
	})
}
