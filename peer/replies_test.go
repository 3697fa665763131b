package peer

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// serveLane serves the server end of a TCP pair as a lane (no
// handshake) and returns the client end.
func serveLane(t *testing.T, s *Server) net.Conn {
	t.Helper()
	cli, srv := tcpPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve(srv, &wire.Hello{Name: "cli", Role: wire.RoleLane}, &session{})
	}()
	t.Cleanup(func() { srv.Close(); <-done })
	return cli
}

func writeFrame(id uint64, off uint64, p []byte) []byte {
	f := wire.Frame{Type: wire.TypeWrite, ID: id, Meta: (&wire.Write{Region: 1, Offset: off}).Marshal(), Payload: p}
	return append(f.Append(nil), p...)
}

// readAcks reads n replies from c (through br) and checks that they
// are acks of ids 1..n, in order.
func readAcks(t *testing.T, c net.Conn, br *bufio.Reader, n int) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	hb := make([]byte, wire.HeaderLen)
	for i := 1; i <= n; i++ {
		h, err := wire.ReadHeader(br, hb, wire.Limits{MaxPayload: SmallFrame})
		if err != nil {
			t.Fatalf("reply %d of %d: %v", i, n, err)
		}
		if _, err := wire.ReadMeta(br, &h); err != nil {
			t.Fatal(err)
		}
		if h.Type != wire.TypeWriteAck || h.ID != uint64(i) {
			t.Fatalf("reply %d: %s to request %d, want an ack to %d", i, h.Type, h.ID, i)
		}
	}
}

// Pipelined small WRITEs that the server finds buffered together are
// answered together: eight 4 KiB WRITEs written before the server reads
// any are acknowledged in fewer writes than eight, in order, and every
// byte is in the region.
func TestServerBatchesReplies(t *testing.T) {
	var exp memExports
	r := exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice}, &exp)
	var mu sync.Mutex
	var writes []int
	s.replies = func(n int) {
		mu.Lock()
		writes = append(writes, n)
		mu.Unlock()
	}
	cli, srv := tcpPair(t)
	var all []byte
	for i := range 8 {
		all = append(all, writeFrame(uint64(i+1), uint64(i)*4096, pattern(4096, byte(i)))...)
	}
	if _, err := cli.Write(all); err != nil { // in the server's socket before it reads
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve(srv, &wire.Hello{Name: "cli", Role: wire.RoleLane}, &session{})
	}()
	defer func() { srv.Close(); <-done }()
	readAcks(t, cli, bufio.NewReader(cli), 8)
	mu.Lock()
	got := append([]int(nil), writes...)
	mu.Unlock()
	if len(got) >= 8 {
		t.Errorf("8 buffered WRITEs answered in %d writes %v, want fewer", len(got), got)
	}
	for i := range 8 {
		if !bytes.Equal(r.bytes()[i*4096:(i+1)*4096], pattern(4096, byte(i))) {
			t.Fatalf("WRITE %d: the bytes differ", i+1)
		}
	}
}

// A reply is not held for a request that is not all here: with the
// next WRITE's header and half its payload sent, the ack of the one
// before it comes at once.
func TestServerHoldsNoReplyForPartialRequest(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice}, &exp)
	cli := serveLane(t, s)
	second := writeFrame(2, 4096, pattern(4096, 2))
	if _, err := cli.Write(append(writeFrame(1, 0, pattern(4096, 1)), second[:len(second)-2048]...)); err != nil {
		t.Fatal(err)
	}
	readAcks(t, cli, bufio.NewReader(cli), 1)
}

// A refusal goes out after the replies held before it: a WRITE, then a
// WRITE whose metadata fails its checksum, both buffered together, are
// answered by the first's ack and then the refusal, in that order.
func TestServerRefusalAfterHeldReplies(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 1<<20, wire.PermReadWrite)
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice}, &exp)
	cli, srv := tcpPair(t)
	bad := writeFrame(2, 4096, pattern(4096, 2))
	bad[wire.HeaderLen] ^= 0xff // the metadata's first byte: its checksum fails
	if _, err := cli.Write(append(writeFrame(1, 0, pattern(4096, 1)), bad...)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.serve(srv, &wire.Hello{Name: "cli", Role: wire.RoleLane}, &session{})
	}()
	defer func() { srv.Close(); <-done }()
	br := bufio.NewReader(cli)
	readAcks(t, cli, br, 1)
	h, err := wire.ReadHeader(br, make([]byte, wire.HeaderLen), wire.Limits{MaxPayload: SmallFrame})
	if err != nil || h.Type != wire.TypeError || h.ID != 2 {
		t.Fatalf("after the ack: %s for request %d (%v), want the refusal of request 2", h.Type, h.ID, err)
	}
}
