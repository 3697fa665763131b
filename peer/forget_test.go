package peer

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// A Remote told its epoch is gone (Forget) drops its Conn: another epoch
// changes nothing; its own fails the Conn, and the next request dials
// again and completes on a new Conn.
func TestRemoteForget(t *testing.T) {
	ctx := context.Background()
	var exp memExports
	kv := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	c := dial(t, addrOf(s), testKey, 1)
	r, err := OpenRemote(ctx, c, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Forget(s.Epoch()+1, "another epoch") || c.Err() != nil {
		t.Fatalf("Forget of another epoch dropped the Conn: %v", c.Err())
	}
	if !r.Forget(s.Epoch(), "the cluster says it left") || !errors.Is(c.Err(), errForgotten) {
		t.Fatalf("Forget of the Conn's epoch: the Conn is %v", c.Err())
	}
	if r.Forget(s.Epoch(), "again") {
		t.Fatal("a second Forget dropped a Conn again")
	}
	src := pattern(4096, 3)
	if eff, err := r.WriteAt(ctx, src, 0); err != nil || eff != engine.EffectApplied {
		t.Fatalf("write after Forget: %v, effect %s", err, eff)
	}
	if r.mu.c == c || !bytes.Equal(kv.bytes()[:4096], src) {
		t.Fatal("the write after Forget did not go on a new Conn into kv")
	}
}

// A request that took its Conn just before Forget dropped it (held there
// by the hook) finds it dropped before posting anything (effect none),
// and is sent once more, on a new Conn.
func TestRemoteForgetDuringRequest(t *testing.T) {
	ctx := context.Background()
	var exp memExports
	kv := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	c := dial(t, addrOf(s), testKey, 1)
	r, err := OpenRemote(ctx, c, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	calls := 0
	r.tookConn = func(got *Conn) {
		calls++
		if calls == 1 {
			if got != c || !r.Forget(s.Epoch(), "restarted") {
				t.Error("the hook did not drop the Conn the request took")
			}
		}
	}
	src := pattern(4096, 5)
	if eff, err := r.WriteAt(ctx, src, 0); err != nil || eff != engine.EffectApplied {
		t.Fatalf("write whose Conn was dropped under it: %v, effect %s", err, eff)
	}
	if r.mu.c == c || !bytes.Equal(kv.bytes()[:4096], src) || s.Stats().Writes != 1 {
		t.Fatalf("want one write, on a new Conn: %d writes served", s.Stats().Writes)
	}
}

// A server whose Superseded says an epoch is dead refuses its handshake
// (and serves nothing); Evict closes the sessions of one name and epoch
// and no other.
func TestServerSupersededAndEvict(t *testing.T) {
	ctx := context.Background()
	var exp memExports
	exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 5 * time.Second, MaxSlice: DefaultMaxSlice,
		Superseded: func(name string, epoch uint64) bool { return name == "c" && epoch == 0xdead }}, &exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cfg := Config{Name: "c", Epoch: 0xdead, Key: testKey, IOTimeout: 5 * time.Second}
	if c, err := Dial(ctx, addrOf(s), cfg); err == nil {
		c.Close()
		t.Fatal("a superseded epoch's handshake was accepted")
	} else if !strings.Contains(err.Error(), "superseded") {
		t.Fatalf("a superseded epoch's handshake: %v", err)
	}
	cfg.Epoch = 0xbeef
	live, err := Dial(ctx, addrOf(s), cfg)
	if err != nil {
		t.Fatalf("the live epoch: %v", err)
	}
	defer live.Close()
	other, err := Dial(ctx, addrOf(s), Config{Name: "d", Epoch: 0xbeef, Key: testKey, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	buf := make([]byte, 16)
	if err := live.Read(ctx, "kv", 0, buf); err != nil {
		t.Fatal(err)
	}
	if n := s.Evict("c", 0xbeef); n != 1 {
		t.Fatalf("Evict closed %d sessions, want 1", n)
	}
	if err := live.Read(ctx, "kv", 0, buf); err == nil {
		t.Fatal("an evicted session still served a read")
	}
	if err := other.Read(ctx, "kv", 0, buf); err != nil {
		t.Fatalf("another engine's session after the eviction: %v", err)
	}
}

// Evict holds at the racy point: the session is evicted while its
// control connection's handler has not yet left (here: there is none),
// and a lane of that session arrives (the client has not seen the close
// yet and dials a new one). The lane is refused; a second Evict counts
// nothing.
func TestEvictRefusesLateLane(t *testing.T) {
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: time.Second, MaxSlice: DefaultMaxSlice}, &memExports{})
	ctrl, ctrlPeer := net.Pipe()
	defer ctrlPeer.Close()
	ss, err := s.join(ctrl, &wire.Hello{Role: wire.RoleControl, Name: "c", Epoch: 0xbeef})
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Evict("c", 0xbeef); n != 1 {
		t.Fatalf("Evict closed %d sessions, want 1", n)
	}
	lane, lanePeer := net.Pipe()
	defer lane.Close()
	defer lanePeer.Close()
	if _, err := s.join(lane, &wire.Hello{Role: wire.RoleLane, Session: ss.id, Name: "c", Epoch: 0xbeef}); err == nil || !strings.Contains(err.Error(), "evicted") {
		t.Fatalf("a lane joining an evicted session: %v, want refused as evicted", err)
	}
	if n := s.Evict("c", 0xbeef); n != 0 {
		t.Fatalf("a second Evict closed %d sessions, want 0", n)
	}
}
