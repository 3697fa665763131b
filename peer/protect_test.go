package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// frameRelay forwards TCP connections to a server frame by frame, so a
// test can read, change, drop or replay whole frames as someone on the
// path would. tamper sees each frame (up: client to server) with its
// connection's number and the frame's index on that connection, and
// returns the bytes to forward instead.
type frameRelay struct {
	ln     net.Listener
	target string
	tamper func(conn int, up bool, i int, f []byte) []byte

	mu    sync.Mutex
	n     int
	wire  bytes.Buffer // every byte forwarded up
	conns []net.Conn
}

func startRelay(t *testing.T, target string, tamper func(conn int, up bool, i int, f []byte) []byte) *frameRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &frameRelay{ln: ln, target: target, tamper: tamper}
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
	})
	return r
}

func (r *frameRelay) addr() string { return r.ln.Addr().String() }

func (r *frameRelay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		n := r.n
		r.n++
		r.conns = append(r.conns, c, s)
		r.mu.Unlock()
		go r.pipe(n, true, c, s)
		go r.pipe(n, false, s, c)
	}
}

// pipe forwards frames from src to dst until either ends.
func (r *frameRelay) pipe(n int, up bool, src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	for i := 0; ; i++ {
		hb := make([]byte, wire.HeaderLen)
		if _, err := io.ReadFull(src, hb); err != nil {
			return
		}
		var h wire.Header
		if err := h.Unmarshal(hb, wire.Limits{MaxPayload: 1 << 30}); err != nil {
			return
		}
		f := make([]byte, wire.HeaderLen+h.BodyLen())
		copy(f, hb)
		if _, err := io.ReadFull(src, f[wire.HeaderLen:]); err != nil {
			return
		}
		if r.tamper != nil {
			f = r.tamper(n, up, i, f)
		}
		if up {
			r.mu.Lock()
			r.wire.Write(f)
			r.mu.Unlock()
		}
		if _, err := dst.Write(f); err != nil {
			return
		}
	}
}

func (r *frameRelay) forwarded() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.wire.Bytes())
}

// frameType is a relayed frame's type.
func frameType(f []byte) wire.Type { return wire.Type(f[5]) }

// reheader sets a frame's header checksum again after a change, as an
// attacker on the path would.
func reheader(f []byte) {
	binary.LittleEndian.PutUint32(f[44:], wire.CRC(f[:44]))
}

func startProtected(t *testing.T, exp Exports, p wire.Protection) (*Server, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, Protection: p, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice,
		Logger: slog.New(slog.NewTextHandler(lb, nil))}, exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, lb
}

func dialProtected(t *testing.T, addr string, lanes int, p wire.Protection, lb *logBuf) (*Conn, error) {
	t.Helper()
	cfg := Config{Name: "cli", Key: testKey, Lanes: lanes, IOTimeout: 10 * time.Second, Protection: p}
	if lb != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(lb, nil))
	}
	c, err := Dial(context.Background(), addr, cfg)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// READ and WRITE with aead move the bytes, on one lane and striped over
// four, and none of them crosses the wire in the clear.
func TestAEADReadWrite(t *testing.T) {
	exp := &memExports{}
	r := exp.add(1, "kv", 16<<20, wire.PermReadWrite)
	s, _ := startProtected(t, exp, wire.ProtectAEAD)
	sealed := 0
	var mu sync.Mutex
	rl := startRelay(t, addrOf(s), func(_ int, _ bool, i int, f []byte) []byte {
		if i >= 2 { // past the handshake (hello and auth up; challenge and welcome down)
			var h wire.Header
			h.Unmarshal(f, wire.Limits{MaxPayload: 1 << 30})
			mu.Lock()
			if h.Flags&wire.FlagSealed != 0 {
				sealed++
			} else {
				sealed = -1 << 30 // an unsealed frame after the handshake
			}
			mu.Unlock()
		}
		return f
	})
	ctx := context.Background()
	var large [][]byte
	for _, lanes := range []int{1, 4} {
		c, err := dialProtected(t, rl.addr(), lanes, wire.ProtectAEAD, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{4 << 10, 9<<20 + 123} {
			src := pattern(n, byte(lanes+n))
			if n > 1<<20 {
				large = append(large, src)
			}
			if err := c.Write(ctx, "kv", 4096, src); err != nil {
				t.Fatalf("lanes %d: write %d: %v", lanes, n, err)
			}
			if got := r.bytes()[4096 : 4096+n]; !bytes.Equal(got, src) {
				t.Fatalf("lanes %d: the region holds other bytes after a write of %d", lanes, n)
			}
			dst := make([]byte, n)
			if err := c.Read(ctx, "kv", 4096, dst); err != nil {
				t.Fatalf("lanes %d: read %d: %v", lanes, n, err)
			}
			if !bytes.Equal(dst, src) {
				t.Fatalf("lanes %d: read %d bytes back different", lanes, n)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if sealed <= 0 {
		t.Fatalf("frames after the handshake: %d sealed (negative: one in the clear)", sealed)
	}
	up := rl.forwarded()
	for _, src := range large {
		if bytes.Contains(up, src[1<<20:1<<20+64]) {
			t.Fatalf("a WRITE's payload crossed the wire in the clear")
		}
	}
}

// A relay that changes a frame on the way: the frame is refused as
// corrupt, its connection ends, the region (or the READ's memory) is
// untouched, and the request ends with its effect.
func TestAEADTamperRefused(t *testing.T) {
	cases := []struct {
		name string
		// tamper changes the frame (up: client to server) and says whether it did.
		tamper func(up bool, f []byte) bool
		op     string
		effect Effect
	}{
		{"write payload byte", func(up bool, f []byte) bool {
			if !up || frameType(f) != wire.TypeWrite {
				return false
			}
			f[len(f)-wire.TagLen-100] ^= 0x01
			return true
		}, "write", EffectNone}, // refused before the region: nothing applied
		{"read-data payload byte", func(up bool, f []byte) bool {
			if up || frameType(f) != wire.TypeReadData {
				return false
			}
			f[len(f)-wire.TagLen-100] ^= 0x80
			return true
		}, "read", EffectNone},
		{"write header request id", func(up bool, f []byte) bool {
			if !up || frameType(f) != wire.TypeWrite {
				return false
			}
			f[8] ^= 0x40 // the request id, checksum set again: only the tag tells
			reheader(f)
			return true
		}, "write", EffectUnknown}, // its reply names no request in flight: posted, no ack
		{"write header sealed flag cleared", func(up bool, f []byte) bool {
			if !up || frameType(f) != wire.TypeWrite {
				return false
			}
			f[6] &^= byte(wire.FlagSealed) // offered as a clear frame
			reheader(f)
			return true
		}, "write", EffectNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			exp := &memExports{}
			r := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
			before := pattern(1<<20, 9)
			r.WriteAt(before, 0)
			s, lb := startProtected(t, exp, wire.ProtectAEAD)
			var mu sync.Mutex
			done := false
			rl := startRelay(t, addrOf(s), func(_ int, up bool, i int, f []byte) []byte {
				mu.Lock()
				defer mu.Unlock()
				if !done && i >= 2 && tc.tamper(up, f) {
					done = true
				}
				return f
			})
			c, err := dialProtected(t, rl.addr(), 1, wire.ProtectAEAD, nil)
			if err != nil {
				t.Fatal(err)
			}
			buf := pattern(8<<10, 3)
			orig := bytes.Clone(buf)
			if tc.op == "write" {
				err = c.Write(context.Background(), "kv", 4096, buf)
			} else {
				err = c.Read(context.Background(), "kv", 4096, buf)
			}
			mu.Lock()
			if !done {
				t.Fatal("the relay changed no frame")
			}
			mu.Unlock()
			if err == nil {
				t.Fatalf("%s through a relay that changed a frame succeeded", tc.op)
			}
			if !strings.Contains(err.Error(), "corrupt") {
				t.Errorf("error %v does not say corrupt", err)
			}
			if e := EffectOf(err); e != tc.effect {
				t.Errorf("effect %s, want %s (%v)", e, tc.effect, err)
			}
			if !bytes.Equal(r.bytes(), before) {
				t.Fatal("the region changed")
			}
			if !bytes.Equal(buf, orig) {
				t.Fatal("the READ's memory changed: a payload landed before its tag checked")
			}
			if tc.op == "write" {
				waitFor(t, func() bool { return s.Stats().Corrupt == 1 }, "the server counts the corrupt frame")
				waitFor(t, func() bool { return strings.Contains(lb.String(), "frame refused") }, "the server logs the refused frame")
			}
			// The connection that carried it ended; a new request takes a
			// new lane (the relay leaves it alone now) and works.
			if err := c.Write(context.Background(), "kv", 0, orig[:4096]); err != nil {
				t.Fatalf("the next request: %v", err)
			}
		})
	}
}

// A relay that replays an earlier WRITE frame of the same connection in
// place of a later one: refused (the frame counter moved on), the region
// keeps what the WRITE after the recorded one put there.
func TestAEADReplayRefused(t *testing.T) {
	exp := &memExports{}
	r := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s, _ := startProtected(t, exp, wire.ProtectAEAD)
	var mu sync.Mutex
	var first []byte
	writes := 0
	rl := startRelay(t, addrOf(s), func(_ int, up bool, i int, f []byte) []byte {
		if !up || frameType(f) != wire.TypeWrite {
			return f
		}
		mu.Lock()
		defer mu.Unlock()
		writes++
		switch writes {
		case 1:
			first = bytes.Clone(f)
		case 3:
			return first // in place of the third
		}
		return f
	})
	c, err := dialProtected(t, rl.addr(), 1, wire.ProtectAEAD, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b, third := pattern(4096, 1), pattern(4096, 2), pattern(4096, 3)
	if err := c.Write(ctx, "kv", 0, a); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, "kv", 0, b); err != nil {
		t.Fatal(err)
	}
	err = c.Write(ctx, "kv", 8192, third)
	if err == nil {
		t.Fatal("a replayed frame in place of a WRITE was accepted")
	}
	if e := EffectOf(err); e != EffectUnknown {
		t.Errorf("effect %s, want unknown: the WRITE was posted and never acknowledged (%v)", e, err)
	}
	got := r.bytes()
	if !bytes.Equal(got[:4096], b) {
		t.Fatal("the replayed WRITE reached the region: it holds the first WRITE's bytes again")
	}
	if !bytes.Equal(got[8192:12288], make([]byte, 4096)) {
		t.Fatal("the WRITE the relay replaced reached the region")
	}
	waitFor(t, func() bool { return s.Stats().Corrupt == 1 }, "the server counts the replayed frame as corrupt")
}

// Ends that run different protections are refused at the handshake,
// and both say why; nothing is served in the clear to an aead client.
func TestAEADMismatchRefused(t *testing.T) {
	for _, tc := range []struct{ server, client wire.Protection }{
		{wire.ProtectAEAD, wire.ProtectNone},
		{wire.ProtectNone, wire.ProtectAEAD},
	} {
		t.Run("server "+tc.server.String()+" client "+tc.client.String(), func(t *testing.T) {
			exp := &memExports{}
			exp.add(1, "kv", 4096, wire.PermReadWrite)
			s, slb := startProtected(t, exp, tc.server)
			clog := &logBuf{}
			_, err := dialProtected(t, addrOf(s), 1, tc.client, clog)
			if err == nil {
				t.Fatal("a client with another frame protection was served")
			}
			var pe *errProtection
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), "frame protection mismatch") {
				t.Fatalf("dial error %v does not name the mismatch", err)
			}
			waitFor(t, func() bool { return strings.Contains(slb.String(), "frame protection mismatch") }, "the server logs the mismatch")
			if !strings.Contains(slb.String(), "peer refused") {
				t.Errorf("server log:\n%s", slb.String())
			}
			if !strings.Contains(clog.String(), "peer refused") || !strings.Contains(clog.String(), "frame protection mismatch") {
				t.Errorf("client log does not name the mismatch:\n%s", clog.String())
			}
			if st := s.Stats(); st.Sessions != 0 || st.Refused != 1 {
				t.Errorf("server stats %+v: want no session, one refused", st)
			}
		})
	}
}

// A relay that strips the client's protection from its hello (to reach
// a server that runs none) cannot make the client talk in the clear:
// the proofs cover the protection.
func TestAEADDowngradeRefused(t *testing.T) {
	exp := &memExports{}
	exp.add(1, "kv", 4096, wire.PermReadWrite)
	s, _ := startProtected(t, exp, wire.ProtectNone)
	rl := startRelay(t, addrOf(s), func(_ int, up bool, i int, f []byte) []byte {
		if !up || i != 0 {
			return f
		}
		// The hello: drop its last byte (the protection), fix the lengths.
		g := wire.Frame{Type: wire.TypeHello, Meta: bytes.Clone(f[wire.HeaderLen : len(f)-1])}
		return g.Append(nil)
	})
	_, err := dialProtected(t, rl.addr(), 1, wire.ProtectAEAD, nil)
	if err == nil {
		t.Fatal("a hello stripped of its protection led to a connection")
	}
	if !strings.Contains(err.Error(), "frame protection mismatch") {
		t.Fatalf("dial error %v does not name the mismatch", err)
	}
	if st := s.Stats(); st.Sessions != 0 {
		t.Fatalf("the server holds a session: %+v", st)
	}
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting: %s", what)
}

// Notifications travel sealed on the control connection: one is
// delivered with its message, one over the receiver's limit is refused
// (its payload opened and dropped) and the connection stays in step for
// the next; a message changed on the way is refused and never queued.
func TestAEADNotify(t *testing.T) {
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, Protection: wire.ProtectAEAD, IOTimeout: 10 * time.Second,
		MaxSlice: DefaultMaxSlice, Inbox: NewInbox(roomy), MaxNotifyBytes: 16, Logger: slog.New(slog.DiscardHandler)}, &memExports{})
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var mu sync.Mutex
	flip := false
	rl := startRelay(t, addrOf(s), func(_ int, up bool, i int, f []byte) []byte {
		mu.Lock()
		defer mu.Unlock()
		if flip && up && frameType(f) == wire.TypeNotify {
			flip = false
			f[len(f)-wire.TagLen-1] ^= 0x20
		}
		return f
	})
	c, err := dialProtected(t, rl.addr(), 1, wire.ProtectAEAD, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d, err := c.Notify(ctx, "b1", "a message far over sixteen bytes"); d != NotSent || err == nil {
		t.Fatalf("an oversized notification: %s, %v", d, err)
	}
	if d, err := c.Notify(ctx, "b2", "kv ready"); d != Delivered || err != nil {
		t.Fatalf("Notify = %s, %v; want delivered", d, err)
	}
	n, err := s.Notification(ctx)
	if err != nil || n.Submission != "b2" || n.Message != "kv ready" {
		t.Fatalf("received %+v, %v", n, err)
	}
	mu.Lock()
	flip = true
	mu.Unlock()
	if d, err := c.Notify(ctx, "b3", "kv ready"); d == Delivered || err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("a notification changed on the way: %s, %v", d, err)
	}
	if got := s.inbox.Len(); got != 0 {
		t.Fatalf("the inbox holds %d after a changed notification", got)
	}
}
