package peer

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// TestHandshakeFlood: a flood of connections that never say hello holds
// at most MaxHandshakes of the server's handshakes (the rest are closed
// to make room, and logged), and a real peer dialing in the middle of it
// connects at once and moves bytes, long before the I/O timeout that
// would free a silent connection's place.
func TestHandshakeFlood(t *testing.T) {
	const max, flood = 8, 100
	var exp memExports
	reg := exp.add(1, "kv", 1<<20, wire.PermRead|wire.PermWrite)
	lb := &logBuf{}
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 20 * time.Second, MaxSlice: DefaultMaxSlice,
		MaxHandshakes: max, Logger: slog.New(slog.NewTextHandler(lb, nil))}, &exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	var mu sync.Mutex
	var silent []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range silent {
			c.Close()
		}
	})
	open := func() {
		c, err := net.Dial("tcp", addrOf(s))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		silent = append(silent, c)
		mu.Unlock()
	}
	for range flood {
		open()
	}
	deadline := time.Now().Add(5 * time.Second)
	for st := s.Stats(); st.Displaced < flood-max; st = s.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("after %d silent connections: %d in their handshake, %d displaced; want at most %d held", flood, st.Handshaking, st.Displaced, max)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := s.Stats(); st.Handshaking > max {
		t.Fatalf("%d connections in their handshake, over the bound of %d", st.Handshaking, max)
	}

	// The flood goes on while a real peer dials.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				open()
			}
		}
	}()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addrOf(s), Config{Name: "cli", Key: testKey, IOTimeout: 5 * time.Second})
	if err == nil {
		defer c.Close()
		err = c.Write(ctx, "kv", 0, []byte("through the flood"))
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("a real peer during a flood of silent connections: %v after %v", err, time.Since(start))
	}
	if got := string(reg.bytes()[:17]); got != "through the flood" {
		t.Fatalf("region holds %q", got)
	}
	t.Logf("connected and wrote %v after the dial began, %d displaced", time.Since(start).Round(time.Millisecond), s.Stats().Displaced)
	if !strings.Contains(lb.String(), "closed in its handshake to make room for a newer connection: 8 were in their handshake (peer.max_handshakes)") {
		t.Fatalf("no displaced connection logged:\n%.2000s", lb.String())
	}
}

// TestHandshakesSpareAnUnreadHello: at the bound, a connection whose
// hello has arrived but was not read yet (its goroutine still waits for
// a CPU, as on a loaded machine) is not taken for a silent one; the
// silent connection behind it is displaced instead. Without the look at
// the socket the older, speaking one was closed: a flood fast enough to
// fill the bound in that wait locked a real peer out.
func TestHandshakesSpareAnUnreadHello(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// pair returns the server's end of a new connection, after the
	// client wrote say on it and it arrived (never read here).
	pair := func(say string) net.Conn {
		t.Helper()
		cli, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		srv, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		if say != "" {
			if _, err := cli.Write([]byte(say)); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Second); !pending(srv); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the client's bytes never reached the server's socket")
				}
			}
		}
		return srv
	}
	h := newHandshakes(2)
	speaking := h.begin(pair("a hello, not read yet"))
	silent := h.begin(pair(""))
	h.begin(pair(""))
	if h.end(speaking) {
		t.Fatal("the connection with an unread hello was displaced; the silent one behind it should have been")
	}
	if !h.end(silent) {
		t.Fatal("the silent connection was not displaced")
	}
	if _, displaced := h.stats(); displaced != 1 {
		t.Fatalf("%d displaced, want 1", displaced)
	}
}
