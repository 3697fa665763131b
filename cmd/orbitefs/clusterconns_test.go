package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/discovery"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// oneRegion exports one 4 KiB region "kv" in memory.
type oneRegion struct{ b [4096]byte }

func (r *oneRegion) ReadAt(p []byte, off int64) (int, error)  { return copy(p, r.b[off:]), nil }
func (r *oneRegion) WriteAt(p []byte, off int64) (int, error) { return copy(r.b[off:], p), nil }
func (r *oneRegion) export() peer.Export {
	return peer.Export{Descriptor: wire.Descriptor{ID: 1, Name: "kv", Location: "cpu", Bytes: 4096, Perm: wire.PermReadWrite}, Mem: r}
}
func (r *oneRegion) Exports() []peer.Export { return []peer.Export{r.export()} }
func (r *oneRegion) Export(id uint64) (peer.Export, bool) {
	return r.export(), id == 1
}

// The pool drops the connections of one name's epoch, and forgets a
// segment's connection once the segment closes.
func TestNamedRemotesForget(t *testing.T) {
	ctx := context.Background()
	key := []byte("the key of the pool test, long enough")
	s := peer.NewServer(peer.ServerConfig{Name: "c", Key: key, IOTimeout: 5 * time.Second, MaxSlice: peer.DefaultMaxSlice}, &oneRegion{})
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var pool namedRemotes
	open := func() *peer.Conn {
		c, err := peer.Dial(ctx, s.Addr().String(), peer.Config{Name: "b", Key: key, IOTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		r, err := peer.OpenRemote(ctx, c, "kv")
		if err != nil {
			t.Fatal(err)
		}
		pool.add("c", r)
		return c
	}
	c1, c2 := open(), open()
	epoch := discovery.Epoch(s.Epoch())
	if n := pool.forget("c", epoch+1, "another epoch"); n != 0 || c1.Err() != nil {
		t.Fatalf("forget of another epoch dropped %d", n)
	}
	if n := pool.forget("d", epoch, "another name"); n != 0 || c1.Err() != nil {
		t.Fatalf("forget of another name dropped %d", n)
	}
	if n := pool.forget("c", epoch, "left"); n != 2 || c1.Err() == nil || c2.Err() == nil {
		t.Fatalf("forget of c's epoch dropped %d (%v, %v), want both", n, c1.Err(), c2.Err())
	}
	pool.mu.Lock()
	var rs []*namedRemote
	for r := range pool.m["c"] {
		rs = append(rs, r)
	}
	pool.mu.Unlock()
	for _, r := range rs {
		r.Close()
	}
	if len(pool.m) != 0 {
		t.Fatalf("closed segments still pooled: %v", pool.m)
	}
}

func TestSupersededBounded(t *testing.T) {
	s := superseded{}
	for e := discovery.Epoch(1); e <= maxSuperseded+10; e++ {
		s.add("c", e)
	}
	if len(s["c"]) != maxSuperseded || s.has("c", 10) || !s.has("c", 11) || !s.has("c", maxSuperseded+10) || s.has("d", 20) {
		t.Fatalf("superseded after %d adds: %d kept, has(10)=%v has(11)=%v", maxSuperseded+10, len(s["c"]), s.has("c", 10), s.has("c", 11))
	}
}

// A pooled connection's redial asks the view (lookup) for its name's
// address: while the view lists no such engine nothing is dialed and
// the error says why (effect none); once it lists the engine at a new
// address, the next request goes there.
func TestNamedRemotesFollowTheView(t *testing.T) {
	ctx := context.Background()
	key := []byte("the key of the pool test, long enough")
	serve := func() *peer.Server {
		s := peer.NewServer(peer.ServerConfig{Name: "c", Key: key, IOTimeout: 5 * time.Second, MaxSlice: peer.DefaultMaxSlice}, &oneRegion{})
		if err := s.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s1 := serve()
	var mu sync.Mutex
	listed := map[string]string{"c": s1.Addr().String()}
	pool := namedRemotes{lookup: func(name string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		a, ok := listed[name]
		return a, ok
	}}
	c, err := peer.Dial(ctx, s1.Addr().String(), peer.Config{Name: "b", Key: key, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := peer.OpenRemote(ctx, c, "kv")
	if err != nil {
		t.Fatal(err)
	}
	seg := pool.add("c", r)
	defer seg.Close()
	s1.Close()
	mu.Lock()
	delete(listed, "c")
	mu.Unlock()
	pool.forget("c", discovery.Epoch(s1.Epoch()), "left")
	eff, err := seg.WriteAt(ctx, []byte("x"), 0)
	if eff != engine.EffectNone || !errors.Is(err, engine.ErrNotFound) || !strings.Contains(err.Error(), "peer://c: no engine of that name in the cluster") {
		t.Fatalf("write while the view lists no c: %v, effect %s", err, eff)
	}
	s2 := serve()
	mu.Lock()
	listed["c"] = s2.Addr().String()
	mu.Unlock()
	if eff, err := seg.WriteAt(ctx, []byte("x"), 0); err != nil || eff != engine.EffectApplied {
		t.Fatalf("write once the view lists c at %s: %v, effect %s", s2.Addr(), err, eff)
	}
	if got := seg.Info().Address; got != s2.Addr().String() {
		t.Fatalf("info address %s, want %s", got, s2.Addr())
	}
}
