// churn_test.go: connection churn leaks nothing. A thousand connections
// open and close (keyed clients that read and write, strangers that say
// nothing, strangers cut mid-hello, wrong keys) and the server's
// goroutines, open descriptors, sessions and handshake places return to
// where they were.

package peer

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// settle waits until count() is at most want, or fails after a while.
func settle(t *testing.T, what string, want int, count func() int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := count()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%s: %d after the churn, %d before\n%s", what, n, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConnectionChurnLeaksNothing(t *testing.T) {
	exp := &memExports{}
	exp.add(1, "kv", 1<<16, wire.PermReadWrite)
	s, _ := startServer(t, exp, "127.0.0.1:0", testKey)
	addr := addrOf(s)
	// One connection of each kind first, so lazily started runtime
	// goroutines and descriptors (netpoll, timers) are in the baseline.
	c0, err := Dial(context.Background(), addr, Config{Name: "cli", Key: testKey, Lanes: 2, IOTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.Write(context.Background(), "kv", 0, pattern(4096, 1)); err != nil {
		t.Fatal(err)
	}
	c0.Close()
	time.Sleep(100 * time.Millisecond)
	g0, f0 := runtime.NumGoroutine(), openFDs(t)

	ctx := context.Background()
	buf := make([]byte, 4096)
	for i := range 1000 {
		switch i % 4 {
		case 0: // a keyed client that writes and reads on two lanes
			c, err := Dial(ctx, addr, Config{Name: "cli", Key: testKey, Lanes: 2, IOTimeout: 10 * time.Second, KeepAlive: time.Second})
			if err != nil {
				t.Fatalf("dial %d: %v", i, err)
			}
			if err := c.Write(ctx, "kv", 0, pattern(4096, byte(i))); err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			if err := c.Read(ctx, "kv", 0, buf); err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
			c.Close()
		case 1: // a stranger that connects and says nothing
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			nc.Close()
		case 2: // a stranger cut in the middle of its hello
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			h := wire.Hello{Name: "stranger", Epoch: 1, Role: wire.RoleControl}
			f := wire.Frame{Type: wire.TypeHello, Meta: h.Marshal()}
			b := f.Append(nil)
			nc.Write(b[:len(b)/2])
			nc.Close()
		case 3: // a wrong key
			if c, err := Dial(ctx, addr, Config{Name: "cli", Key: []byte("another key, also long enough"), IOTimeout: 10 * time.Second}); err == nil {
				c.Close()
				t.Fatalf("dial %d with a wrong key succeeded", i)
			}
		}
	}
	// Silent connections held open together, three times the handshake
	// places: the newest displace the oldest, never more are held.
	var held []net.Conn
	for range 3 * DefaultMaxHandshakes {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, nc)
	}
	eventuallyWithin(t, 10*time.Second, func() bool {
		st := s.Stats()
		return st.Displaced >= 2*DefaultMaxHandshakes && st.Handshaking <= DefaultMaxHandshakes
	})
	for _, nc := range held {
		nc.Close()
	}
	settle(t, "server sessions", 0, func() int { return s.Stats().Sessions })
	settle(t, "connections in their handshake", 0, func() int { return s.Stats().Handshaking })
	settle(t, "goroutines", g0, runtime.NumGoroutine)
	settle(t, "open descriptors", f0, func() int { return openFDs(t) })
}

func eventuallyWithin(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
