// handshakes_test.go: a real daemon configured with peer.max_handshakes
// = 4 under a flood of TCP connections that never say hello: it holds at
// most that many, logs the ones it closed to make room, and a real peer
// (`orbitefs peer write`) dialing while the flood goes on writes its
// bytes, checked with cmp through the daemon's mount.

package tests

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPeerHandshakeFlood(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	m, addr := startPeerDaemonConf(t, "alpha", key, "max_handshakes = 4\n")
	client := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(client, []byte(fmt.Sprintf("[peer]\nkey_file = %q\ndial_timeout = \"3s\"\n", key)), 0o644); err != nil {
		t.Fatal(err)
	}
	m.ok(t, `echo '{"name":"kv","location":"cpu","bytes":4096,"export":"read_write"}' > $M/memory/register`)

	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	open := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return // the backlog may be full for a moment
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	for range 64 {
		open()
	}
	// The daemon closed all but 4 of them: reads on the rest see EOF.
	eventually(t, 5*time.Second, "all but 4 silent connections closed by the daemon", func() bool {
		mu.Lock()
		cs := append([]net.Conn(nil), conns...)
		mu.Unlock()
		open := 0
		for _, c := range cs {
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil && strings.Contains(err.Error(), "timeout") {
				open++
			}
		}
		return open == 4
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				open()
			}
		}
	}()
	r := m.run(t, fmt.Sprintf(`head -c 4096 /dev/urandom > $T/src
$BIN peer write --config %s --addr %s --region kv --file $T/src && cmp $T/src $M/memory/kv/data`, client, addr))
	close(stop)
	wg.Wait()
	if r.code != 0 || !strings.Contains(r.stdout, `"effect":"applied"`) {
		t.Fatalf("a real peer during the flood: %s", r)
	}
	if !strings.Contains(m.logText(), "closed in its handshake to make room for a newer connection: 4 were in their handshake (peer.max_handshakes)") {
		t.Fatalf("the daemon logged no displaced connection:\n%.3000s", m.logText())
	}
}
