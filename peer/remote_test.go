package peer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// A Remote whose peer restarted (new epoch, the region registered again
// under another descriptor id) dials again on its next request: the
// request succeeds against the new epoch, the old Conn is closed with
// its goroutines, and nothing was sent under the old descriptors.
func TestRemoteRedialsRestartedPeer(t *testing.T) {
	ctx := context.Background()
	var exp1 memExports
	exp1.add(1, "kv", 1<<20, wire.PermReadWrite)
	s1, _ := startServer(t, &exp1, "127.0.0.1:0", testKey)
	addr := addrOf(s1)
	base := runtime.NumGoroutine()
	c, err := Dial(ctx, addr, Config{Name: "cli", Key: testKey, Lanes: 2, IOTimeout: 5 * time.Second, KeepAlive: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRemote(ctx, c, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.WriteAt(ctx, pattern(4096, 1), 0); err != nil {
		t.Fatal(err)
	}
	s1.Close()

	// The restarted peer: id 1 is now another region, kv is id 7.
	var exp2 memExports
	decoy := exp2.add(1, "decoy", 1<<20, wire.PermReadWrite)
	kv := exp2.add(7, "kv", 1<<20, wire.PermReadWrite)
	s2, lb := startServer(t, &exp2, addr, testKey)
	src := pattern(3<<20/2, 2) // striped over both lanes
	if eff, err := r.WriteAt(ctx, src[:1<<20], 0); err != nil || eff != engine.EffectApplied {
		t.Fatalf("write after the restart: %v, effect %s", err, eff)
	}
	if !bytes.Equal(kv.bytes(), src[:1<<20]) || !bytes.Equal(decoy.bytes(), make([]byte, 1<<20)) {
		t.Fatal("the write did not land in the new epoch's kv only")
	}
	back := make([]byte, 1<<20)
	if err := r.ReadAt(ctx, back, 0); err != nil || !bytes.Equal(back, src[:1<<20]) {
		t.Fatalf("read after the restart: %v", err)
	}
	if info := r.Info(); info.Epoch != s2.Epoch() || info.Size != 1<<20 {
		t.Fatalf("info after the redial: %+v, want epoch %016x", info, s2.Epoch())
	}
	if st := s2.Stats(); st.Sessions != 1 || st.Writes != 1 {
		t.Fatalf("the new epoch saw %d sessions and %d writes, want 1 and 1", st.Sessions, st.Writes)
	}
	if !errors.Is(c.Err(), errRestarted) {
		t.Fatalf("the old Conn: %v, want it failed as restarted", c.Err())
	}
	// The old Conn's keep-alive is gone: one Conn's worth of goroutines.
	r2 := r.mu.c
	r2.Close()
	eventually(t, func() bool { return runtime.NumGoroutine() <= base+2 })
	_ = lb
}

// A region registered again with another size is another region: the
// redial refuses it (effect none, nothing sent), and so does every later
// request until the segment is opened again.
func TestRemoteRedialRefusesResizedRegion(t *testing.T) {
	ctx := context.Background()
	var exp1 memExports
	exp1.add(1, "kv", 1<<20, wire.PermReadWrite)
	s1, _ := startServer(t, &exp1, "127.0.0.1:0", testKey)
	addr := addrOf(s1)
	r, err := OpenRemote(ctx, dial(t, addr, testKey, 1), "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s1.Close()
	var exp2 memExports
	kv := exp2.add(1, "kv", 2<<20, wire.PermReadWrite)
	s2, _ := startServer(t, &exp2, addr, testKey)
	for range 2 {
		eff, err := r.WriteAt(ctx, pattern(4096, 3), 0)
		if eff != engine.EffectNone || !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("write to the resized region: %v, effect %s", err, eff)
		}
	}
	if s2.Stats().Writes != 0 || !bytes.Equal(kv.bytes(), make([]byte, 2<<20)) {
		t.Fatal("the resized region was written")
	}
}

// A WRITE that reached the old epoch (its peer died mid-frame) is
// unknown and is not sent again to the new epoch; the next request is.
func TestRemoteNeverReplaysToNewEpoch(t *testing.T) {
	ctx := context.Background()
	var exp1 memExports
	exp1.add(1, "kv", 1<<20, wire.PermReadWrite)
	s1, _ := startServer(t, &exp1, "127.0.0.1:0", testKey)
	addr := addrOf(s1)
	s1.hook = func(p hookPoint, h *wire.Header, c net.Conn) {
		if p == hookWriteBody {
			go s1.Close() // the peer dies with the payload on the wire
			c.Close()
		}
	}
	r, err := OpenRemote(ctx, dial(t, addr, testKey, 1), "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if eff, err := r.WriteAt(ctx, pattern(512<<10, 4), 0); eff != engine.EffectUnknown {
		t.Fatalf("write cut by the peer's death: %v, effect %s", err, eff)
	}
	var exp2 memExports
	kv := exp2.add(1, "kv", 1<<20, wire.PermReadWrite)
	waitClosed(t, addr)
	s2, _ := startServer(t, &exp2, addr, testKey)
	if s2.Stats().Writes != 0 || !bytes.Equal(kv.bytes(), make([]byte, 1<<20)) {
		t.Fatal("the unknown write was replayed to the new epoch")
	}
	src := pattern(4096, 5)
	if _, err := r.WriteAt(ctx, src, 8192); err != nil {
		t.Fatal(err)
	}
	if s2.Stats().Writes != 1 || !bytes.Equal(kv.bytes()[8192:8192+4096], src) || !bytes.Equal(kv.bytes()[:8192], make([]byte, 8192)) {
		t.Fatal("the new epoch holds something other than the one later write")
	}
}

// waitClosed waits until nothing listens at addr.
func waitClosed(t *testing.T, addr string) {
	t.Helper()
	eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}
