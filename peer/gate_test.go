package peer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// tcpPair is a connected pair of loopback TCP sockets.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// readAll reads n bytes from c in the background; the result comes on
// the channel.
func readAll(c net.Conn, n int) chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			b = nil
		}
		ch <- b
	}()
	return ch
}

// A bulk copy waits for a free slot: with one slot held by a bulk write,
// a second bulk write on another connection waits, and goes once the
// first is done; both arrive whole.
func TestGateBoundsBulkCopies(t *testing.T) {
	g := newGate(1)
	g.smallBegin() // a small round trip in flight engages the gate
	defer g.smallEnd()
	held, waiting, release := make(chan struct{}, 2), make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	g.held = func(int) {
		select {
		case held <- struct{}{}:
		default:
		}
		once.Do(func() { <-release }) // the first copy holds its slot
	}
	g.waiting = func() { waiting <- struct{}{} }
	var unhold sync.Once
	releaseAll := func() { unhold.Do(func() { close(release) }) }
	defer releaseAll() // before the connections close: a copy in a hook holds its socket
	const n = 1 << 20
	var wg sync.WaitGroup
	var got [2]chan []byte
	for i := range 2 {
		a, b := tcpPair(t)
		got[i] = readAll(b, wire.HeaderLen+n)
		if i == 1 {
			select {
			case <-held:
			case <-time.After(10 * time.Second):
				t.Fatal("the first bulk write never took a slot")
			}
		}
		wg.Go(func() {
			if _, err := g.writev(a, pattern(wire.HeaderLen, byte(i)), pattern(n, byte(i))); err != nil {
				t.Error(err)
			}
		})
	}
	select {
	case <-waiting:
	case <-held:
		t.Fatal("a second bulk write entered its system call while the only slot was held")
	case <-time.After(10 * time.Second):
		t.Fatal("the second bulk write neither waited nor entered")
	}
	releaseAll()
	wg.Wait()
	for i := range 2 {
		want := append(pattern(wire.HeaderLen, byte(i)), pattern(n, byte(i))...)
		if b := <-got[i]; !bytes.Equal(b, want) {
			t.Fatalf("connection %d: the bytes received differ from those written", i)
		}
	}
}

// A bulk write that must wait for room in its socket gives its slot
// back while it waits: with one slot, a write to a peer that reads
// nothing does not stop a write on another connection.
func TestGateReleasedAcrossWaits(t *testing.T) {
	g := newGate(1)
	g.smallBegin()
	defer g.smallEnd()
	entered := make(chan struct{}, 1)
	g.held = func(int) {
		select {
		case entered <- struct{}{}:
		default:
		}
	}
	stuckA, stuckB := tcpPair(t)
	const big = 64 << 20 // more than both socket buffers hold
	drain := make(chan struct{})
	var rest chan []byte
	go func() { <-drain; rest = readAll(stuckB, big); drain <- struct{}{} }()
	var drainOnce sync.Once
	drained := func() { drainOnce.Do(func() { drain <- struct{}{}; <-drain }) }
	defer drained() // a failed test still ends: the stuck write completes
	stuck := make(chan error, 1)
	go func() {
		_, err := g.writev(stuckA, nil, pattern(big, 1))
		stuck <- err
	}()
	<-entered
	a, b := tcpPair(t)
	got := readAll(b, 1<<20)
	done := make(chan error, 1)
	go func() {
		_, err := g.writev(a, nil, pattern(1<<20, 2))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a bulk write waited behind another waiting for its socket: the slot was held across the wait")
	}
	if !bytes.Equal(<-got, pattern(1<<20, 2)) {
		t.Fatal("the bytes received differ from those written")
	}
	drained()
	if err := <-stuck; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(<-rest, pattern(big, 1)) {
		t.Fatal("the stuck write's bytes differ once drained")
	}
}

// A bulk payload read (server) or write (client) held in the only slot
// of its side's gate does not hold up a small request (a 4 KiB one, or
// one of exactly SmallFrame, header and metadata besides) on the small
// lane, a WRITE or a READ: small frames never take a slot.
func TestSmallPassesHeldGate(t *testing.T) {
	for _, side := range []string{"client", "server"} {
		for _, op := range []string{"write", "read"} {
			for _, size := range []int{4096, SmallFrame} {
				t.Run(fmt.Sprintf("%s/%s/%d", side, op, size), func(t *testing.T) {
					testSmallPassesHeldGate(t, side, op, size)
				})
			}
		}
	}
}

func testSmallPassesHeldGate(t *testing.T, side, op string, size int) {
	var exp memExports
	r := exp.add(1, "kv", 2<<20, wire.PermReadWrite)
	g := newGate(1)
	g.linger = time.Hour // engaged by the first small WRITE below, for the test
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	g.held = func(n int) {
		if n >= 512<<10 { // the 1 MiB payload, not the small one
			once.Do(func() { close(held); <-release })
		}
	}
	scfg := ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice}
	ccfg := Config{Name: "cli", Key: testKey, Lanes: 1, IOTimeout: 10 * time.Second}
	if side == "client" {
		ccfg.Gate = g
	} else {
		scfg.Gate = g
	}
	s := NewServer(scfg, &exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Dial(context.Background(), addrOf(s), ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A small WRITE engages the gate of each side: the client's as its
	// round trip ends, the server's as it answers.
	if err := c.Write(context.Background(), "kv", 1<<20+SmallFrame, pattern(16, 4)); err != nil {
		t.Fatal(err)
	}
	big := pattern(1<<20, 1)
	var wg sync.WaitGroup
	var bigErr error
	wg.Go(func() { bigErr = c.Write(context.Background(), "kv", 0, big) })
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatalf("the %s's bulk copy never took a slot after a small round trip", side)
	}
	small := pattern(size, 3)
	smallDone := make(chan error, 1)
	go func() {
		if op == "write" {
			smallDone <- c.Write(context.Background(), "kv", 1<<20, small)
			return
		}
		smallDone <- c.Read(context.Background(), "kv", 1<<20, small)
	}()
	select {
	case err = <-smallDone:
	case <-time.After(10 * time.Second):
		close(release)
		wg.Wait()
		<-smallDone
		t.Fatalf("a %d-byte %s waited while the %s's bulk copy held the only slot", size, op, side)
	}
	close(release)
	wg.Wait()
	if err != nil {
		t.Fatalf("a %d-byte %s while the %s's bulk copy holds the only slot: %v", size, op, side, err)
	}
	if bigErr != nil {
		t.Fatalf("the 1 MiB write: %v", bigErr)
	}
	want := small
	if op == "read" {
		want = make([]byte, size) // the region's bytes there were never written
	}
	b := r.bytes()
	if !bytes.Equal(b[:1<<20], big) || !bytes.Equal(small, want) || !bytes.Equal(b[1<<20:1<<20+size], want) {
		t.Fatal("the bytes differ from those written")
	}
}

// Bulk copies take a slot only while the gate is engaged: with the only
// slot taken and no small round trip about, a bulk write goes at once; a
// small round trip in flight (client) or answered within linger
// (server) makes the next one wait for the slot; once linger has passed
// after it, bulk writes go at once again.
func TestGateEngagedBySmall(t *testing.T) {
	g := newGate(1)
	g.linger = 200 * time.Millisecond
	waiting := make(chan struct{}, 1)
	g.waiting = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	g.slots <- struct{}{} // the only slot, taken
	write := func(i int) chan error {
		a, b := tcpPair(t)
		got := readAll(b, 1<<20)
		done := make(chan error, 1)
		go func() {
			_, err := g.writev(a, nil, pattern(1<<20, byte(i)))
			if err == nil && !bytes.Equal(<-got, pattern(1<<20, byte(i))) {
				err = fmt.Errorf("write %d: the bytes received differ from those written", i)
			}
			done <- err
		}()
		return done
	}
	passes := func(when string, i int) {
		t.Helper()
		select {
		case err := <-write(i):
			if err != nil {
				t.Fatal(err)
			}
		case <-waiting:
			<-g.slots // let it go: a copy waiting in the gate holds its socket open
			t.Fatalf("%s, a bulk write waited for a slot", when)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s, a bulk write neither went nor waited", when)
		}
	}
	passes("with no small round trip about", 1)
	for i, c := range []struct {
		name           string
		engage, settle func()
	}{
		{"in flight", g.smallBegin, g.smallEnd},
		{"answered", g.smallSeen, func() {}},
	} {
		c.engage()
		done := write(10 + i)
		select {
		case <-waiting:
		case err := <-done:
			t.Fatalf("a small round trip %s: a bulk write went without a slot (err %v)", c.name, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("a small round trip %s: a bulk write neither went nor waited", c.name)
		}
		<-g.slots // the slot is free: the waiting write goes
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		g.slots <- struct{}{}
		c.settle()
		time.Sleep(g.linger + 50*time.Millisecond)
		passes(fmt.Sprintf("linger after a small round trip %s", c.name), 20+i)
	}
}

// A gate of linger 0 (peer.bulk_gate_linger = "0s") is never engaged:
// with every slot taken, a small round trip in flight and one just
// answered, a bulk write still goes at once. NewGate keeps the linger
// it is given.
func TestGateLingerZeroNeverEngaged(t *testing.T) {
	if g := NewGate(1500 * time.Millisecond); g.Linger() != 1500*time.Millisecond {
		t.Fatalf("NewGate(1.5s).Linger() = %s", g.Linger())
	}
	g := NewGate(0)
	if g.Linger() != 0 {
		t.Fatalf("NewGate(0).Linger() = %s", g.Linger())
	}
	waiting := make(chan struct{}, 1)
	g.waiting = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	for range cap(g.slots) {
		g.slots <- struct{}{}
	}
	g.smallBegin()
	g.smallSeen()
	defer g.smallEnd()
	a, b := tcpPair(t)
	got := readAll(b, 1<<20)
	done := make(chan error, 1)
	go func() {
		_, err := g.writev(a, nil, pattern(1<<20, 7))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(<-got, pattern(1<<20, 7)) {
			t.Fatal("the bytes received differ from those written")
		}
	case <-waiting:
		for range cap(g.slots) {
			<-g.slots // let it go
		}
		<-done
		t.Fatal("linger 0: a bulk write waited for a slot while a small round trip was in flight")
	case <-time.After(10 * time.Second):
		t.Fatal("linger 0: a bulk write neither went nor waited")
	}
}
