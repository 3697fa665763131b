package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
	"golang.org/x/sys/unix"
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
	s2, _ := startServer(t, &exp2, addr, testKey)
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
	// The old Conn reached the new epoch once, a lane's handshake that it
	// left at the challenge when it saw the new epoch: refused, nothing sent.
	if st := s2.Stats(); st.Refused != 1 {
		t.Fatalf("the new epoch refused %d connections, want the old Conn's one lane handshake", st.Refused)
	}
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
	setHook(s1, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p == hookWriteBody {
			go s1.Close() // the peer dies with the payload on the wire
			c.Close()
		}
	})
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

// slowRelay forwards connections to target, chunk bytes every tick in
// each direction: a slow link that keeps moving.
func slowRelay(t *testing.T, target string, chunk int, tick time.Duration) string {
	t.Helper()
	// The relay's sockets get their small receive buffer before the
	// handshake (a listener's is inherited by what it accepts), so the
	// window they advertise is small from the start. Set after accept,
	// the window already offered stays, and the relay's kernel would
	// acknowledge hundreds of KiB at once: the sender's socket would
	// look drained while the relay still held its frame, which no slow
	// link does.
	small := func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, chunk)
		}); err != nil {
			return err
		}
		return serr
	}
	ln, err := (&net.ListenConfig{Control: small}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pump := func(dst, src net.Conn) {
		buf := make([]byte, chunk)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, err := dst.Write(buf[:n]); err != nil {
					break
				}
				time.Sleep(tick)
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	dialer := &net.Dialer{Control: small}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := dialer.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go pump(up, c)
			go pump(c, up)
		}
	}()
	return ln.Addr().String()
}

// A WRITE and a READ over a link that needs several io_timeouts for the
// frame but never stops moving succeed: the timeout bounds a stall, not
// a frame (progress.go), on the client and on the server.
func TestSlowLinkIsNotAStall(t *testing.T) {
	ctx := context.Background()
	var exp memExports
	kv := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	lb := &logBuf{}
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 300 * time.Millisecond, MaxSlice: DefaultMaxSlice,
		Logger: slog.New(slog.NewTextHandler(lb, nil))}, &exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := slowRelay(t, addrOf(s), 16<<10, 10*time.Millisecond) // about 1.6 MB/s: 1 MiB in 0.65 s
	c, err := Dial(ctx, addr, Config{Name: "cli", Key: testKey, IOTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src := pattern(1<<20, 6)
	start := time.Now()
	if err := c.Write(ctx, "kv", 0, src); err != nil {
		t.Fatalf("slow WRITE: %v\n%s", err, lb)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("the WRITE took %s: the link was not slow", d)
	}
	if !bytes.Equal(kv.bytes(), src) {
		t.Fatal("the slow WRITE's bytes are not in the region")
	}
	back := make([]byte, 1<<20)
	if err := c.Read(ctx, "kv", 0, back); err != nil || !bytes.Equal(back, src) {
		t.Fatalf("slow READ: %v\n%s", err, lb)
	}
}

// Many requests meeting the restarted peer at once dial it again once:
// one new session, every request served. The redial is slow (a relay
// that forwards every 20 ms) so all of them meet the failed Conn while
// the first redial is under way.
func TestRemoteRedialsOnce(t *testing.T) {
	ctx := context.Background()
	var exp1 memExports
	exp1.add(1, "kv", 1<<20, wire.PermReadWrite)
	s1, _ := startServer(t, &exp1, "127.0.0.1:0", testKey)
	addr := addrOf(s1)
	via := slowRelay(t, addr, 64<<10, 20*time.Millisecond)
	c, err := Dial(ctx, via, Config{Name: "cli", Key: testKey, Lanes: 4, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRemote(ctx, c, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c.fail(errRestarted) // as a keep-alive that met the new epoch would
	s1.Close()
	var exp2 memExports
	kv := exp2.add(3, "kv", 1<<20, wire.PermReadWrite)
	s2, lb := startServer(t, &exp2, addr, testKey)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := r.WriteAt(ctx, pattern(4096, byte(i)), uint64(i)*4096)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(lb.String(), `msg="peer connected"`); got != 1 {
		t.Fatalf("%d control connections to the new epoch, want 1 (one redial)", got)
	}
	for i := range n {
		if !bytes.Equal(kv.bytes()[i*4096:(i+1)*4096], pattern(4096, byte(i))) {
			t.Fatalf("write %d not in the region", i)
		}
	}
	if s2.Stats().Writes != n {
		t.Fatalf("%d writes served, want %d", s2.Stats().Writes, n)
	}
}

// A reply that never comes (the server applied the bytes, then stalls)
// ends the WRITE as unknown within about io_timeout of its last byte.
func TestStallEndsWithinTimeout(t *testing.T) {
	ctx := context.Background()
	var exp memExports
	kv := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 5 * time.Second, MaxSlice: DefaultMaxSlice}, &exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p == hookWriteApplied {
			<-release
		}
	})
	defer s.Close()
	defer close(release)
	c, err := Dial(ctx, addrOf(s), Config{Name: "cli", Key: testKey, IOTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src := pattern(256<<10, 7)
	start := time.Now()
	err = c.Write(ctx, "kv", 0, src)
	took := time.Since(start)
	if e := asError(t, err); e.Effect != EffectUnknown || e.Kind != engine.KindTimeout {
		t.Fatalf("write whose ack stalls: %v, effect %s", err, e.Effect)
	}
	if took < 200*time.Millisecond || took > time.Second {
		t.Fatalf("the stalled write ended after %s, want about the 200ms io_timeout", took)
	}
	if !bytes.Equal(kv.bytes()[:len(src)], src) {
		t.Fatal("the bytes were not applied (unknown, not none, is right: they were)")
	}
}

// A lane of the old epoch's session, from a client that kept its name
// and epoch across the redial, is refused by the restarted peer: the
// new epoch's sessions are not the old one's.
func TestOldSessionLaneRefused(t *testing.T) {
	ctx := context.Background()
	var exp memExports
	exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s1, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	addr := addrOf(s1)
	c := dial(t, addr, testKey, 1)
	r, err := OpenRemote(ctx, c, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s1.Close()
	s2, _ := startServer(t, &exp, addr, testKey)
	if _, err := r.WriteAt(ctx, pattern(4096, 8), 0); err != nil {
		t.Fatal(err)
	}
	n := r.mu.c
	if n == c || n.cfg.Epoch != c.cfg.Epoch || n.cfg.Name != c.cfg.Name {
		t.Fatal("the redial did not keep the client's name and epoch")
	}
	cfg := c.cfg
	l, _, _, err := dialLane(ctx, addr, &cfg, wire.Hello{Name: cfg.Name, Epoch: cfg.Epoch, Role: wire.RoleLane, Session: c.session}, 0)
	if err == nil {
		l.close()
		t.Fatalf("a lane of the old session %d was accepted by the new epoch (its session is %d)", c.session, n.session)
	}
	if !strings.Contains(err.Error(), "which is not open") {
		t.Fatalf("a lane of the old session: %v", err)
	}
	if s2.Stats().Lanes != 1 {
		t.Fatalf("%d lanes open on the new epoch, want the redialed Conn's one", s2.Stats().Lanes)
	}
}

// Another engine at the address after the peer went away is not the
// peer: the redial refuses it (effect none, nothing sent), so a segment
// opened on one engine (by address or by cluster name) never writes into
// another one's region of the same name.
func TestRemoteRedialRefusesAnotherEngine(t *testing.T) {
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
	kv := exp2.add(1, "kv", 1<<20, wire.PermReadWrite)
	s2 := NewServer(ServerConfig{Name: "other", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice}, &exp2)
	if err := s2.Listen(addr); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	eff, err := r.WriteAt(ctx, pattern(4096, 4), 0)
	if eff != engine.EffectNone || !errors.Is(err, engine.ErrNotFound) || !strings.Contains(err.Error(), `is now "other"`) {
		t.Fatalf("write after another engine took the address: %v, effect %s", err, eff)
	}
	if s2.Stats().Writes != 0 || !bytes.Equal(kv.bytes(), make([]byte, 1<<20)) {
		t.Fatal("the other engine's region was written")
	}
}

// A Remote that follows a name (Follow) redials where the name resolves
// at that moment: once its Conn is dropped (the view said the epoch
// left), the peer back at another address with a new epoch is
// reached there and the Remote's info shows the new address and epoch;
// while the name resolves nowhere the request fails with effect none and
// nothing is dialed; without Follow the redial stays at the old address.
func TestRemoteFollowsResolvedAddress(t *testing.T) {
	ctx := context.Background()
	var exp1 memExports
	exp1.add(1, "kv", 1<<20, wire.PermReadWrite)
	s1, _ := startServer(t, &exp1, "127.0.0.1:0", testKey)
	var mu sync.Mutex
	at, resolves := addrOf(s1), 0
	open := func(follow bool) *Remote {
		r, err := OpenRemote(ctx, dial(t, addrOf(s1), testKey, 1), "kv")
		if err != nil {
			t.Fatal(err)
		}
		if follow {
			r.Follow(func(context.Context) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				resolves++
				if at == "" {
					return "", fmt.Errorf("no engine named srv: %w", engine.ErrNotFound)
				}
				return at, nil
			})
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	r, fixed := open(true), open(false)
	if _, err := r.WriteAt(ctx, pattern(4096, 1), 0); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	waitClosed(t, addrOf(s1))
	// The cluster's view reports the epoch gone (the daemon's pool
	// forgets it so): the next request redials.
	for _, x := range []*Remote{r, fixed} {
		if !x.Forget(s1.Epoch(), "left") {
			t.Fatal("Forget dropped no Conn")
		}
	}

	mu.Lock()
	at = ""
	mu.Unlock()
	eff, err := r.WriteAt(ctx, pattern(4096, 2), 0)
	if eff != engine.EffectNone || !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("write while the name resolves nowhere: %v, effect %s", err, eff)
	}

	var exp2 memExports
	kv := exp2.add(3, "kv", 1<<20, wire.PermReadWrite)
	s2, _ := startServer(t, &exp2, "127.0.0.1:0", testKey)
	mu.Lock()
	at = addrOf(s2)
	mu.Unlock()
	src := pattern(4096, 3)
	if eff, err := r.WriteAt(ctx, src, 0); err != nil || eff != engine.EffectApplied {
		t.Fatalf("write after the peer came back at %s: %v, effect %s", addrOf(s2), err, eff)
	}
	if !bytes.Equal(kv.bytes()[:4096], src) {
		t.Fatal("the write did not land in the peer at its new address")
	}
	if info := r.Info(); info.Address != addrOf(s2) || info.Epoch != s2.Epoch() {
		t.Fatalf("info after the redial: %+v, want address %s, epoch %016x", info, addrOf(s2), s2.Epoch())
	}
	mu.Lock()
	n := resolves
	mu.Unlock()
	if n != 2 {
		t.Fatalf("resolved %d times, want once per redial (2)", n)
	}
	if eff, err := fixed.WriteAt(ctx, src, 0); eff != engine.EffectNone || !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("a Remote that does not follow: %v, effect %s; want it refused at the old address", err, eff)
	}
}
