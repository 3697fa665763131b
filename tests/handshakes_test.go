// handshakes_test.go: a real daemon configured with peer.max_handshakes
// = 4 under a flood of TCP connections that never say hello: it holds at
// most that many, logs the ones it closed to make room, and a real peer
// (`orbitefs peer write`) dialing while the flood goes on writes its
// bytes, checked with cmp through the daemon's mount.
//
// The real peer reaches the daemon through a relay in this process that
// holds the flood back from the moment one of its connections opens until
// the daemon answered its hello: a hello not yet read is indistinguishable
// from silence once max_handshakes newer connections arrived (8 ms of this
// flood; a loaded machine can take longer to run the client or the
// daemon's reader). Once the hello is read the flood goes on, 4 newer
// silent connections first, through the rest of the handshake and the
// write: what is tested is that a peer that spoke is never the one closed.

package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
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

	var gate sync.Mutex // held: no new flood connection
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
				gate.Lock()
				open()
				gate.Unlock()
			}
		}
	}()
	via := helloGate(t, addr, &gate, func() {
		for range 4 {
			open()
		}
	})
	r := m.run(t, fmt.Sprintf(`head -c 4096 /dev/urandom > $T/src
$BIN peer write --config %s --addr %s --region kv --file $T/src && cmp $T/src $M/memory/kv/data`, client, via))
	close(stop)
	wg.Wait()
	if r.code != 0 || !strings.Contains(r.stdout, `"effect":"applied"`) {
		t.Fatalf("a real peer during the flood: %s", r)
	}
	if !strings.Contains(m.logText(), "closed in its handshake to make room for a newer connection: 4 were in their handshake (peer.max_handshakes)") {
		t.Fatalf("the daemon logged no displaced connection:\n%.3000s", m.logText())
	}
}

// helloGate relays connections to target. For each, it holds gate from
// the client's first bytes (its hello) until the target's first answer
// (the challenge, sent once the hello was read), then calls more (still
// holding gate, before the challenge goes on to the client) and relays
// the rest both ways.
func helloGate(t *testing.T, target string, gate *sync.Mutex, more func()) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	// first reads c's first frame whole and returns its bytes.
	first := func(c net.Conn) ([]byte, error) {
		c.SetReadDeadline(time.Now().Add(scriptTimeout))
		defer c.SetReadDeadline(time.Time{})
		var raw bytes.Buffer
		r := io.TeeReader(c, &raw)
		h, err := wire.ReadHeader(r, make([]byte, wire.HeaderLen), wire.Limits{})
		if err == nil {
			_, err = wire.ReadMeta(r, &h)
		}
		return raw.Bytes(), err
	}
	serve := func(c net.Conn) {
		defer c.Close()
		hello, err := first(c)
		if err != nil {
			return
		}
		gate.Lock()
		up, err := net.Dial("tcp", target)
		if err != nil {
			gate.Unlock()
			return
		}
		defer up.Close()
		var challenge []byte
		if _, err = up.Write(hello); err == nil {
			challenge, err = first(up)
		}
		if err == nil {
			more()
		}
		gate.Unlock()
		if err != nil {
			return
		}
		if _, err := c.Write(challenge); err != nil {
			return
		}
		done := make(chan struct{}, 2)
		go func() { io.Copy(c, up); c.Close(); done <- struct{}{} }()
		go func() { io.Copy(up, c); up.Close(); done <- struct{}{} }()
		<-done
		<-done
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); serve(c) }()
		}
	}()
	return ln.Addr().String()
}
