package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// Bytes written through the peer land in the server's region, and read
// back equal, for sizes below, at and above the striping threshold, over
// one lane (tcp) and four (hp_tcp).
func TestReadWriteLoopback(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 24<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	for _, lanes := range []int{1, 4} {
		c := dial(t, addrOf(s), testKey, lanes)
		if got := c.Regions(); len(got) != 1 || got[0].Name != "kv" || got[0].Perm != wire.PermReadWrite || got[0].Bytes != 24<<20 {
			t.Fatalf("regions %+v", got)
		}
		for i, n := range []int{1, 4096, StripeMin - 1, StripeMin, 9<<20 + 3, 24 << 20} {
			off := uint64(0)
			if n < 20<<20 {
				off = uint64(4096*i + 1)
			}
			src := pattern(n, byte(lanes*16+i))
			if err := c.Write(context.Background(), "kv", off, src); err != nil {
				t.Fatalf("%d lanes: write %d bytes: %v", lanes, n, err)
			}
			if got := r.bytes()[off : off+uint64(n)]; !bytes.Equal(got, src) {
				t.Fatalf("%d lanes: %d bytes written differ in the region", lanes, n)
			}
			dst := make([]byte, n)
			if err := c.Read(context.Background(), "kv", off, dst); err != nil {
				t.Fatalf("%d lanes: read %d bytes: %v", lanes, n, err)
			}
			if !bytes.Equal(dst, src) {
				t.Fatalf("%d lanes: %d bytes read back differ", lanes, n)
			}
		}
	}
}

// A request of StripeMin bytes or more on 4 lanes goes out as 4 slices,
// each its own request id and slice index on its own lane, and is
// reassembled in order; below StripeMin it is one frame.
func TestStriping(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 16<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	type seen struct {
		id    uint64
		slice uint32
		n     uint64
		conn  net.Conn
	}
	var mu sync.Mutex
	var frames []seen
	// The first four slices wait for each other at the server: they are
	// in flight together, so on four lanes.
	all := make(chan struct{})
	total := 0
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p != hookWriteBody {
			return
		}
		mu.Lock()
		frames = append(frames, seen{h.ID, h.Slice, h.PayloadLen, c})
		total++
		n := total
		mu.Unlock()
		if n == 4 {
			close(all)
		}
		if n <= 4 {
			select {
			case <-all:
			case <-time.After(5 * time.Second):
				t.Errorf("slice %d: the four slices were not in flight together", h.Slice)
			}
		}
	})
	c := dial(t, addrOf(s), testKey, 4)
	src := pattern(8<<20, 3)
	if err := c.Write(context.Background(), "kv", 4096, src); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(frames) != 4 {
		t.Fatalf("%d WRITE frames for 8 MiB on 4 lanes, want 4: %+v", len(frames), frames)
	}
	ids, slices, conns := map[uint64]bool{}, map[uint32]bool{}, map[net.Conn]bool{}
	for _, f := range frames {
		if f.n != 2<<20 {
			t.Errorf("slice %d carries %d bytes, want 2 MiB", f.slice, f.n)
		}
		ids[f.id], slices[f.slice], conns[f.conn] = true, true, true
	}
	if len(ids) != 4 || len(slices) != 4 || !slices[0] || !slices[3] || len(conns) != 4 {
		t.Fatalf("ids %v slices %v on %d lanes: want 4 distinct ids, slices 0..3, 4 lanes", ids, slices, len(conns))
	}
	if n := serverLanes(s); n != 4 {
		t.Fatalf("%d lanes open on the server, want 4", n)
	}
	if !bytes.Equal(r.bytes()[4096:4096+8<<20], src) {
		t.Fatal("striped write reassembled wrongly in the region")
	}
	dst := make([]byte, 8<<20)
	before := s.Stats().Reads
	if err := c.Read(context.Background(), "kv", 4096, dst); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("striped read: %v, equal %v", err, bytes.Equal(dst, src))
	}
	if n := s.Stats().Reads - before; n != 4 {
		t.Fatalf("%d READ frames for 8 MiB on 4 lanes, want 4", n)
	}
	frames = nil
	mu.Unlock()
	err := c.Write(context.Background(), "kv", 0, pattern(StripeMin-1, 1))
	mu.Lock()
	if err != nil || len(frames) != 1 {
		t.Fatalf("a write under StripeMin: %v, %d frames, want 1", err, len(frames))
	}
}

// The plan: slices of at least MinSlice, about one per lane, at most
// SliceTarget and MaxSlice, covering every byte once.
func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		lanes    int
		max, n   uint64
		want     int
		wantSize uint64
	}{
		{1, DefaultMaxSlice, StripeMin - 1, 1, StripeMin - 1},
		{4, DefaultMaxSlice, StripeMin - 1, 1, StripeMin - 1},
		{4, DefaultMaxSlice, StripeMin, 2, MinSlice},
		{4, DefaultMaxSlice, 3 << 20, 3, MinSlice},
		{4, DefaultMaxSlice, 8 << 20, 4, 2 << 20},
		{4, DefaultMaxSlice, 1 << 30, 256, SliceTarget},
		{1, DefaultMaxSlice, 1 << 30, 256, SliceTarget},
		{4, 2 << 20, 64 << 20, 32, 2 << 20},
		{8, 4 << 20, 10<<20 + 1, 8, MinSlice + MinSlice/4 + 1},
	} {
		c := &Conn{cfg: Config{Lanes: tc.lanes, MaxSlice: tc.max}}
		ps := c.plan(tc.n)
		if len(ps) != tc.want || ps[0].n != tc.wantSize {
			t.Errorf("plan(%d) on %d lanes: %d slices of %d, want %d of %d", tc.n, tc.lanes, len(ps), ps[0].n, tc.want, tc.wantSize)
		}
		sum := uint64(0)
		for _, p := range ps {
			if p.off != sum || (tc.n >= StripeMin && p.n < MinSlice && p.off+p.n != tc.n) {
				t.Errorf("plan(%d): slice %+v", tc.n, p)
			}
			sum += p.n
		}
		if sum != tc.n {
			t.Errorf("plan(%d) covers %d bytes", tc.n, sum)
		}
	}
}

// A client with another key is refused at the hello: Dial fails, the
// server logs why, and nothing is served.
func TestAuthFailure(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 4096, wire.PermReadWrite)
	s, lb := startServer(t, &exp, "127.0.0.1:0", testKey)
	_, err := Dial(context.Background(), addrOf(s), Config{Name: "stranger", Key: []byte("another key, also long enough"), IOTimeout: 5 * time.Second})
	if err == nil || !errors.Is(err, engine.ErrPermission) && !strings.Contains(err.Error(), "did not prove the shared key") {
		t.Fatalf("dial with another key: %v", err)
	}
	// A stranger that ignores the server's proof and answers with a
	// made-up one gets an auth error and a closed connection.
	c, err := net.Dial("tcp", addrOf(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	h := wire.Hello{Name: "stranger", Epoch: 1, Role: wire.RoleControl}
	writeMsg(c, wire.TypeHello, h.Marshal())
	var ch wire.Challenge
	if err := readMsg(c, wire.TypeChallenge, &ch); err != nil {
		t.Fatal(err)
	}
	writeMsg(c, wire.TypeAuth, (&wire.Auth{Proof: [wire.ProofLen]byte{1, 2, 3}}).Marshal())
	var w wire.Welcome
	err = readMsg(c, wire.TypeWelcome, &w)
	var re *remoteError
	if !errors.As(err, &re) || re.m.Code != wire.CodeAuth {
		t.Fatalf("after a wrong proof: %v, want an auth error", err)
	}
	writeMsg(c, wire.TypeRegions, nil)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the refused connection still answers")
	}
	eventually(t, func() bool { return s.Stats().Refused == 2 })
	log := lb.String()
	if !strings.Contains(log, "peer refused") || !strings.Contains(log, "the client's proof does not match the shared key") || !strings.Contains(log, "name=stranger") {
		t.Fatalf("server log does not say why the stranger was refused:\n%s", log)
	}
	if st := s.Stats(); st.Reads+st.Writes != 0 || st.Sessions != 0 {
		t.Fatalf("a stranger was served: %+v", st)
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A frame whose header checksum fails ends the connection with a corrupt
// error; a WRITE whose payload checksum fails is refused before it
// touches the region (effect none) and ends its lane.
func TestCorruptFramesRefused(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 4096, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	c := dial(t, addrOf(s), testKey, 1)
	lane := func() *lane {
		l, err := c.dialLane(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.close)
		return l
	}

	l := lane()
	f := wire.Frame{Type: wire.TypeRead, ID: 5, Meta: (&wire.Read{Region: 1, Length: 16}).Marshal()}
	b := f.Append(nil)
	b[9] ^= 0x40 // inside the request id: only the header checksum catches it
	l.c.Write(b)
	h, err := wire.ReadHeader(l.br, make([]byte, wire.HeaderLen), l.lim)
	if err != nil || h.Type != wire.TypeError {
		t.Fatalf("reply to a corrupt header: %+v %v", h, err)
	}
	meta, _ := wire.ReadMeta(l.br, &h)
	var e wire.Error
	if e.Unmarshal(meta); e.Code != wire.CodeCorrupt || !strings.Contains(e.Message, "header checksum") {
		t.Fatalf("reply %+v", e)
	}
	if _, err := l.br.ReadByte(); err == nil {
		t.Fatal("the connection stays open after a corrupt header")
	}
	if s.Stats().Reads != 0 {
		t.Fatal("a corrupt READ was served")
	}

	l = lane()
	payload := pattern(4096, 9)
	f = wire.Frame{Type: wire.TypeWrite, ID: 6, Meta: (&wire.Write{Region: 1}).Marshal(), Payload: payload, PayloadCRC: true}
	b = f.Append(nil)
	bad := bytes.Clone(payload)
	bad[100] ^= 1
	l.c.Write(append(b, bad...))
	_, _, err = l.roundTrip(context.Background(), &wire.Frame{Type: wire.TypePing, ID: 6}, wire.TypePong, nil)
	var re *remoteError
	if !errors.As(err, &re) || re.m.Code != wire.CodeCorrupt || re.m.Applied != wire.AppliedNone || !strings.Contains(re.m.Message, "payload checksum") {
		t.Fatalf("reply to a corrupt payload: %v", err)
	}
	if !bytes.Equal(r.bytes(), make([]byte, 4096)) {
		t.Fatal("a WRITE with a corrupt payload changed the region")
	}
	if s.Stats().Corrupt != 2 {
		t.Fatalf("corrupt count %d, want 2", s.Stats().Corrupt)
	}
	// The client with checksums on still works end to end.
	c2, err := Dial(context.Background(), addrOf(s), Config{Name: "crc", Key: testKey, PayloadChecksum: true, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Write(context.Background(), "kv", 0, payload); err != nil || !bytes.Equal(r.bytes(), payload) {
		t.Fatalf("checksummed write: %v", err)
	}
	got := make([]byte, 4096)
	if err := c2.Read(context.Background(), "kv", 0, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("checksummed read: %v", err)
	}
}

// Refusals happen before the region is touched: the effect is none.
func TestRefusedWriteHasNoEffect(t *testing.T) {
	var exp memExports
	ro := exp.add(1, "ro", 4096, wire.PermRead)
	exp.add(2, "wo", 4096, wire.PermWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	c := dial(t, addrOf(s), testKey, 1)
	for _, tc := range []struct {
		name   string
		op     func() error
		kind   error
		substr string
	}{
		{"write to a read-only export", func() error { return c.Write(context.Background(), "ro", 0, []byte("x")) }, engine.ErrPermission, `exported read, not write`},
		{"read of a write-only export", func() error { return c.Read(context.Background(), "wo", 0, make([]byte, 1)) }, engine.ErrPermission, `exported write, not read`},
		{"write past the end", func() error { return c.Write(context.Background(), "wo", 4095, []byte("xy")) }, engine.ErrRange, "outside region"},
		{"an unknown region", func() error { return c.Write(context.Background(), "nope", 0, []byte("x")) }, engine.ErrNotFound, `no region "nope"`},
	} {
		err := tc.op()
		e := asError(t, err)
		if !errors.Is(err, tc.kind) || e.Effect != EffectNone || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("%s: %v (effect %s), want %v with effect none mentioning %q", tc.name, err, e.Effect, tc.kind, tc.substr)
		}
	}
	if !bytes.Equal(ro.bytes(), make([]byte, 4096)) {
		t.Fatal("a refused write changed the region")
	}
	// The lane survives refusals: one lane served them all.
	if err := c.Write(context.Background(), "wo", 0, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Write(context.Background(), "wo", 0, []byte("late")); EffectOf(err) != EffectNone {
		t.Fatalf("write on a closed Conn: %v, effect %s", err, EffectOf(err))
	}
}

// A peer killed in the middle of a WRITE frame (header in, payload half
// in) leaves the effect unknown; the write is not replayed, and the next
// request goes on a new lane.
func TestKilledMidWriteIsUnknown(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	var conns []net.Conn
	var mu sync.Mutex
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p != hookWriteBody {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
		if len(conns) == 1 {
			// Half the payload arrives, then the server dies.
			buf := make([]byte, h.PayloadLen/2)
			if _, err := c.Read(buf); err != nil {
				t.Error(err)
			}
			c.Close()
		}
	})
	c := dial(t, addrOf(s), testKey, 1)
	err := c.Write(context.Background(), "kv", 0, pattern(256<<10, 1))
	if e := asError(t, err); e.Effect != EffectUnknown {
		t.Fatalf("write cut mid-frame: %v, effect %s, want unknown", err, e.Effect)
	}
	if !bytes.Equal(r.bytes(), make([]byte, 1<<20)) {
		t.Fatal("the cut write reached the region")
	}
	src := pattern(4096, 2)
	if err := c.Write(context.Background(), "kv", 8192, src); err != nil {
		t.Fatalf("the next write: %v", err)
	}
	if st := s.Stats(); st.Writes != 2 {
		t.Fatalf("%d WRITE frames served, want 2 (no replay)", st.Writes)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 2 || conns[0] == conns[1] {
		t.Fatal("the next write did not use a new lane")
	}
	if !bytes.Equal(r.bytes()[8192:8192+4096], src) {
		t.Fatal("the next write's bytes are not in the region")
	}
}

// An ack lost after the bytes were applied is also unknown to the client
// (it cannot tell), and the bytes are indeed in the region.
func TestLostAckIsUnknown(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p == hookWriteApplied {
			c.Close()
		}
	})
	c := dial(t, addrOf(s), testKey, 1)
	src := pattern(64<<10, 4)
	err := c.Write(context.Background(), "kv", 0, src)
	if e := asError(t, err); e.Effect != EffectUnknown {
		t.Fatalf("write with its ack lost: %v, effect %s, want unknown", err, e.Effect)
	}
	if !bytes.Equal(r.bytes()[:len(src)], src) {
		t.Fatal("the bytes were not applied before the ack")
	}
	if s.Stats().Writes != 1 {
		t.Fatalf("%d WRITE frames, want 1", s.Stats().Writes)
	}
}

// One slice of a striped WRITE cut mid-frame: the request is unknown,
// its slice is unknown, slices after the failure are not sent, and every
// slice was joined before Write returned.
func TestStripedSliceCut(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 16<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	release := make(chan struct{})
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		switch {
		case p == hookWriteBody && h.Slice == 1:
			c.Close()
			close(release)
		case p == hookWriteBody && h.Slice == 0:
			<-release // slice 0 applies only after slice 1 was cut
		}
	})
	c := dial(t, addrOf(s), testKey, 2)
	err := c.Write(context.Background(), "kv", 0, pattern(8<<20, 5))
	e := asError(t, err)
	if e.Effect != EffectUnknown || len(e.Slices) != 2 {
		t.Fatalf("%v: effect %s, %d slices", err, e.Effect, len(e.Slices))
	}
	if e.Slices[0].Effect != EffectApplied || e.Slices[1].Effect != EffectUnknown {
		t.Fatalf("slices %+v, want slice 0 applied, slice 1 unknown", e.Slices)
	}
}

// Idle lanes the peer closed (a crash, a timeout) are never reused: the
// next request opens a new lane and succeeds with nothing unknown.
func TestDeadIdleLaneNotReused(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 8<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	c := dial(t, addrOf(s), testKey, 4)
	if err := c.Write(context.Background(), "kv", 0, pattern(8<<20, 1)); err != nil {
		t.Fatal(err)
	}
	if n := closeServerLanes(s); n < 1 {
		t.Fatalf("closed %d lanes", n)
	}
	eventually(t, func() bool { return serverLanes(s) == 0 })
	src := pattern(8<<20, 2)
	if err := c.Write(context.Background(), "kv", 0, src); err != nil {
		t.Fatalf("write after the peer closed the idle lanes: %v", err)
	}
	if !bytes.Equal(r.bytes(), src) {
		t.Fatal("bytes differ")
	}
}

// A restarted peer (new epoch at the same address) invalidates the
// Conn: no request is sent on the new server with the old descriptors,
// the effect is none, and a new Dial works.
func TestEpochChangeInvalidates(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 4096, wire.PermReadWrite)
	s1, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	addr := addrOf(s1)
	c := dial(t, addr, testKey, 1)
	if err := c.Write(context.Background(), "kv", 0, []byte("one")); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	s2, _ := startServer(t, &exp, addr, testKey)
	if s2.Epoch() == s1.Epoch() {
		t.Fatal("a restart kept its epoch")
	}
	err := c.Write(context.Background(), "kv", 0, []byte("two"))
	e := asError(t, err)
	if !errors.Is(err, errRestarted) || e.Effect != EffectNone {
		t.Fatalf("write after the restart: %v, effect %s", err, e.Effect)
	}
	if st := s2.Stats(); st.Writes != 0 {
		t.Fatalf("the restarted peer served %d writes from the old Conn", st.Writes)
	}
	if len(c.Regions()) != 0 {
		t.Fatal("old descriptors survive the restart")
	}
	c2 := dial(t, addr, testKey, 1)
	if c2.PeerEpoch() != s2.Epoch() {
		t.Fatal("new Conn has the wrong epoch")
	}
	if err := c2.Write(context.Background(), "kv", 0, []byte("two")); err != nil {
		t.Fatal(err)
	}
}

// The keep-alive sees the peer go on an idle Conn by itself, and later
// requests fail without being sent.
func TestKeepAliveSeesPeerGone(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 4096, wire.PermReadWrite)
	s1, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	c, err := Dial(context.Background(), addrOf(s1), Config{Name: "ka", Key: testKey, KeepAlive: 20 * time.Millisecond, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s1.Close()
	eventually(t, func() bool { return c.Err() != nil })
	if err := c.Write(context.Background(), "kv", 0, []byte("x")); EffectOf(err) != EffectNone {
		t.Fatalf("write on a Conn whose control died: %v", err)
	}
}

// A client never authenticates to, nor sends a request to, a server that
// cannot prove the key.
func TestClientRefusesUnprovenServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var h wire.Hello
		if err := readMsg(c, wire.TypeHello, &h); err != nil {
			got <- err
			return
		}
		ch := wire.Challenge{Name: "impostor", Epoch: 7, Proof: [wire.ProofLen]byte{9}}
		writeMsg(c, wire.TypeChallenge, ch.Marshal())
		var a wire.Auth
		got <- readMsg(c, wire.TypeAuth, &a) // must not arrive
	}()
	_, err = Dial(context.Background(), ln.Addr().String(), Config{Name: "cli", Key: testKey, IOTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), `the server "impostor" did not prove the shared key`) {
		t.Fatalf("dial to an impostor: %v", err)
	}
	if err := <-got; err == nil {
		t.Fatal("the client sent its proof to a server that did not prove the key")
	}
}

// A cancelled context cuts a WRITE in flight by closing its lane: the
// effect is unknown and Write returns while the server still holds the
// frame.
func TestCancelCutsFrame(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	ctx, cancel := context.WithCancel(context.Background())
	hold := make(chan struct{})
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p == hookWriteBody {
			cancel()
			select {
			case <-hold:
			case <-time.After(5 * time.Second):
				t.Error("the cancel did not cut the frame: Write still waits")
			}
		}
	})
	c := dial(t, addrOf(s), testKey, 1)
	err := c.Write(ctx, "kv", 0, pattern(4096, 1))
	close(hold)
	if e := asError(t, err); e.Effect != EffectUnknown || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: %v, effect %s", err, e.Effect)
	}
}

// With allowed networks, a peer from elsewhere is closed before the
// handshake, even with the right key; one from an allowed network works.
func TestAllowedNetworks(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 4096, wire.PermReadWrite)
	for _, tc := range []struct {
		allowed string
		ok      bool
	}{{"10.0.0.0/8", false}, {"127.0.0.0/8", true}, {"::1/128", false}} {
		lb := &logBuf{}
		s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 5 * time.Second, MaxSlice: DefaultMaxSlice,
			Allowed: []netip.Prefix{netip.MustParsePrefix(tc.allowed)}, Logger: slog.New(slog.NewTextHandler(lb, nil))}, &exp)
		if err := s.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		c, err := Dial(context.Background(), addrOf(s), Config{Name: "cli", Key: testKey, IOTimeout: 5 * time.Second})
		if tc.ok {
			if err != nil {
				t.Fatalf("allowed %s: %v", tc.allowed, err)
			}
			c.Close()
		} else {
			if err == nil {
				t.Fatalf("allowed %s: a loopback peer was served", tc.allowed)
			}
			eventually(t, func() bool { return s.Stats().Refused == 1 })
			if !strings.Contains(lb.String(), "in none of the allowed networks") {
				t.Fatalf("allowed %s: log %s", tc.allowed, lb.String())
			}
		}
		s.Close()
	}
}

// A server that accepts smaller frames than the client would send says
// so at the handshake, and the client cuts its slices to fit.
func TestServerFrameLimitHonoured(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 8<<20, wire.PermReadWrite)
	s := NewServer(ServerConfig{Name: "small", Key: testKey, IOTimeout: 5 * time.Second, MaxSlice: MinSlice}, &exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	var sizes []uint64
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p == hookWriteBody {
			mu.Lock()
			sizes = append(sizes, h.PayloadLen)
			mu.Unlock()
		}
	})
	c := dial(t, addrOf(s), testKey, 1)
	src := pattern(8<<20, 6)
	if err := c.Write(context.Background(), "kv", 0, src); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 8<<20)
	if err := c.Read(context.Background(), "kv", 0, dst); err != nil || !bytes.Equal(dst, src) || !bytes.Equal(r.bytes(), src) {
		t.Fatalf("read back: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 8 || sizes[0] != MinSlice {
		t.Fatalf("frames of %v bytes, want 8 of 1 MiB", sizes)
	}
}

// A server whose exported regions do not fit in one region list (an
// Exports of its own; the daemon refuses such exports at registration)
// answers too large, saying why, rather than sending a frame the client
// refuses as corrupt.
func TestRegionsListTooLarge(t *testing.T) {
	exp := &memExports{}
	for i := range 300 {
		exp.add(uint64(i+1), fmt.Sprintf("%03d%s", i, strings.Repeat("x", 250)), 4096, wire.PermRead)
	}
	s, _ := startServer(t, exp, "127.0.0.1:0", testKey)
	_, err := Dial(context.Background(), addrOf(s), Config{Name: "cli", Key: testKey, IOTimeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "300 exported regions take") || strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("dial: %v, want too large naming 300 exported regions", err)
	}
}

// A keyed peer's raw frames cannot reach past a region or past its
// export: an offset near 2^64 whose end wraps, a READ of a write-only
// export, a WRITE of a read-only one are each refused with effect none
// and the region is untouched.
func TestRawFramesStayInsideExports(t *testing.T) {
	exp := &memExports{}
	rw := exp.add(1, "rw", 8192, wire.PermReadWrite)
	ro := exp.add(2, "ro", 8192, wire.PermRead)
	exp.add(3, "wo", 8192, wire.PermWrite)
	s, _ := startServer(t, exp, "127.0.0.1:0", testKey)
	c := dial(t, addrOf(s), testKey, 1)
	ctx := context.Background()
	const wrap = math.MaxUint64 - 100 // + 4096 wraps past 2^64 to a small end
	for _, tc := range []struct {
		name string
		f    wire.Frame
		want wire.Code
	}{
		{"read wraps", wire.Frame{Type: wire.TypeRead, Meta: (&wire.Read{Region: 1, Offset: wrap, Length: 4096}).Marshal()}, wire.CodeRange},
		{"write wraps", wire.Frame{Type: wire.TypeWrite, Meta: (&wire.Write{Region: 1, Offset: wrap}).Marshal(), Payload: pattern(4096, 9)}, wire.CodeRange},
		{"read past the end", wire.Frame{Type: wire.TypeRead, Meta: (&wire.Read{Region: 1, Offset: 8192, Length: 1}).Marshal()}, wire.CodeRange},
		{"read of write-only", wire.Frame{Type: wire.TypeRead, Meta: (&wire.Read{Region: 3, Offset: 0, Length: 1}).Marshal()}, wire.CodeDenied},
		{"write of read-only", wire.Frame{Type: wire.TypeWrite, Meta: (&wire.Write{Region: 2, Offset: 0}).Marshal(), Payload: pattern(4096, 9)}, wire.CodeDenied},
		{"unknown id", wire.Frame{Type: wire.TypeWrite, Meta: (&wire.Write{Region: 99, Offset: 0}).Marshal(), Payload: pattern(16, 9)}, wire.CodeNotFound},
	} {
		l, err := c.getLane(ctx, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		tc.f.ID = c.nextID.Add(1)
		want := wire.TypeReadData
		if tc.f.Type == wire.TypeWrite {
			want = wire.TypeWriteAck
		}
		_, _, err = l.roundTrip(ctx, &tc.f, want, nil)
		c.putLane(l, 0)
		var re *remoteError
		if !errors.As(err, &re) || re.m.Code != tc.want || re.m.Applied != wire.AppliedNone {
			t.Fatalf("%s: %v, want %s with effect none", tc.name, err, tc.want)
		}
	}
	zero := make([]byte, 8192)
	if !bytes.Equal(rw.bytes(), zero) || !bytes.Equal(ro.bytes(), zero) {
		t.Fatal("a refused frame changed a region")
	}
}
