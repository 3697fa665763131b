package peer

// credit_test.go: the receiver's issuer over real TCP: windows carved
// from the aggregate bounds, a retried connect, grants of window +
// completed, completed totals checked against the bytes the sender's
// frames carried, close with its tombstone, credits off, and remote Pin
// slot windows.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

func startCreditServer(t *testing.T, lim IssuerLimits) (*Server, *Issuer, *memRegion) {
	t.Helper()
	exp := &memExports{}
	r := exp.add(1, "kv", 4<<20, wire.PermReadWrite)
	x := NewIssuer(lim)
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice,
		Credit: x, Logger: slog.New(slog.DiscardHandler)}, exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, x, r
}

func dialAs(t *testing.T, addr, name string, epoch uint64) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, Config{Name: name, Epoch: epoch, Key: testKey, Lanes: 2, IOTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var testLimits = IssuerLimits{MaxSessions: 2, MaxBytes: 2 << 20, MaxRequests: 32, BytesPerSender: 1 << 20, RequestsPerSender: 16}

func TestCreditIssuer(t *testing.T) {
	ctx := context.Background()
	s, x, _ := startCreditServer(t, testLimits)
	a := NewCreditIssuer(dialAs(t, addrOf(s), "a", 1))
	g, err := a.Connect(ctx, 3)
	if err != nil || g != (engine.CreditGrant{Bytes: 1 << 20, Requests: 16}) {
		t.Fatalf("connect: %+v %v", g, err)
	}
	// A retried connect (its reply lost) gets the same window, not a second.
	if g2, err := a.Connect(ctx, 3); err != nil || g2 != g {
		t.Fatalf("reconnect: %+v %v", g2, err)
	}
	b := NewCreditIssuer(dialAs(t, addrOf(s), "b", 2))
	if _, err := b.Connect(ctx, 0); err != nil {
		t.Fatal(err)
	}
	c := NewCreditIssuer(dialAs(t, addrOf(s), "c", 3))
	_, err = c.Connect(ctx, 0)
	if asError(t, err).Kind != engine.KindBusy || !strings.Contains(err.Error(), "2 credit sessions, the receiver's max_sessions") {
		t.Fatalf("third sender: %v", err)
	}
	if st := x.Stats(); st.Senders != 2 || st.WindowBytes != 2<<20 || st.WindowRequests != 32 || st.Connects != 2 || st.Refused != 1 {
		t.Fatalf("stats: %+v", st)
	}

	// a's frames: the issuer counts them from its side.
	data := pattern(512<<10, 1)
	if err := a.Conn().Write(ctx, "kv", 0, data); err != nil {
		t.Fatal(err)
	}
	if st := x.Stats().List[0]; st.Name != "a" || st.ServedBytes != 512<<10 || st.OutstandingBytes != 512<<10 || st.PeakOutstandingBytes != 512<<10 {
		t.Fatalf("a: %+v", st)
	}
	// More completed than its frames carried: refused, nothing changes.
	_, err = a.Sync(ctx, 1<<20, 1)
	if err == nil || !strings.Contains(err.Error(), "1048576 bytes reported completed, but a's frames carried 524288") {
		t.Fatalf("overclaim: %v", err)
	}
	if g, err = a.Sync(ctx, 512<<10, 1); err != nil || g.Bytes != 1<<20+512<<10 || g.Requests != 17 {
		t.Fatalf("sync: %+v %v", g, err)
	}
	if _, err = a.Sync(ctx, 0, 0); err == nil || !strings.Contains(err.Error(), "completed totals went back") {
		t.Fatalf("decrease: %v", err)
	}
	if st := x.Stats(); st.OutstandingBytes != 0 || st.PeakOutstandingBytes != 512<<10 || st.Overruns != 0 {
		t.Fatalf("after sync: %+v", st)
	}
	if err := a.Close(ctx, 512<<10, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx, 512<<10, 1); err != nil {
		t.Fatalf("a repeated close (its reply lost): %v", err)
	}
	if st := x.Stats(); st.Senders != 1 || st.Tombstones != 1 || st.WindowBytes != 1<<20 || st.Closes != 1 {
		t.Fatalf("after close: %+v", st)
	}
	// The window a returned fits c now.
	if _, err := c.Connect(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Sync(ctx, 512<<10, 1); asError(t, err).Kind != engine.KindNotFound {
		t.Fatalf("sync after close: %v", err)
	}
}

func TestCreditIssuerOff(t *testing.T) {
	s, _ := startServer(t, &memExports{}, "127.0.0.1:0", testKey)
	x := NewCreditIssuer(dial(t, addrOf(s), testKey, 1))
	_, err := x.Connect(context.Background(), 0)
	if asError(t, err).Kind != engine.KindPermission || !strings.Contains(err.Error(), "receiver credits are off") {
		t.Fatalf("connect to a server without credits: %v", err)
	}
	if err := x.Conn().Err(); err != nil {
		t.Fatalf("a refusal broke the connection: %v", err)
	}
}

func TestCreditIssuerPinSlots(t *testing.T) {
	lim := testLimits
	lim.MaxStagingSlots, lim.MaxConsumerSlots, lim.StagingSlotsPerSender, lim.ConsumerSlotsPerSender = 8, 2, 4, 1
	s, x, _ := startCreditServer(t, lim)
	if _, err := x.AcquirePin("a", 1, 2); !errors.Is(err, ErrNoCreditBinding) {
		t.Fatalf("pin without a binding: %v", err)
	}
	a := NewCreditIssuer(dialAs(t, addrOf(s), "a", 1))
	g, err := a.Connect(context.Background(), 0)
	if err != nil || g.StagingSlots != 4 || g.ConsumerSlots != 1 {
		t.Fatalf("connect: %+v %v", g, err)
	}
	if _, err := x.AcquirePin("a", 99, 2); !errors.Is(err, ErrNoCreditBinding) {
		t.Fatalf("pin from a stale epoch: %v", err)
	}
	if _, err := x.AcquirePin("a", 1, 5); err == nil {
		t.Fatal("a pin deeper than the staging window")
	}
	release, err := x.AcquirePin("a", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.AcquirePin("a", 1, 1); err == nil || !strings.Contains(err.Error(), "1 consumer slot") {
		t.Fatalf("a second session past the consumer window: %v", err)
	}
	if st := x.Stats().List[0]; st.StagingSlotsHeld != 3 || st.ConsumerSlotsHeld != 1 {
		t.Fatalf("held: %+v", st)
	}
	if err := a.Close(context.Background(), 0, 0); err == nil {
		t.Fatal("close while a Pin holds slots")
	}
	release(false)
	release(false) // once only
	uncertain, err := x.AcquirePin("a", 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	uncertain(true) // uncertain cleanup keeps both charges
	if st := x.Stats().List[0]; st.StagingSlotsHeld != 4 || st.ConsumerSlotsHeld != 1 {
		t.Fatalf("after uncertain cleanup: %+v", st)
	}
	// A second sender's slot window fits (8 staging, 2 consumers); a
	// third does not.
	b := NewCreditIssuer(dialAs(t, addrOf(s), "b", 2))
	if _, err := b.Connect(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	c := NewCreditIssuer(dialAs(t, addrOf(s), "c", 3))
	if _, err := c.Connect(context.Background(), 0); err == nil {
		t.Fatal("a third window past the slot bounds")
	}
}

// A READ the server refuses (here: far over its frame limit) carried no
// bytes: it must not count as served, or the sender could report that
// many completed bytes and grant itself an unbounded window.
func TestCreditRefusedReadNotServed(t *testing.T) {
	ctx := context.Background()
	s, x, _ := startCreditServer(t, testLimits)
	a := NewCreditIssuer(dialAs(t, addrOf(s), "a", 1))
	if _, err := a.Connect(ctx, 0); err != nil {
		t.Fatal(err)
	}
	c := a.Conn()
	l, err := c.getLane(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Past the sender's window it is refused before anything else;
	// within it, a READ the server refuses (out of the region's range)
	// is admitted, then counts nothing.
	const huge = 1 << 62
	for _, q := range []struct {
		m    wire.Read
		code wire.Code
	}{
		{wire.Read{Region: 1, Offset: 0, Length: huge}, wire.CodeCredit},
		{wire.Read{Region: 1, Offset: 4<<20 - 4096, Length: 512 << 10}, wire.CodeRange},
	} {
		f := wire.Frame{Type: wire.TypeRead, ID: c.nextID.Add(1), Meta: q.m.Marshal()}
		_, _, err = l.roundTrip(ctx, &f, wire.TypeReadData, nil)
		var re *remoteError
		if !errors.As(err, &re) || re.m.Code != q.code {
			t.Fatalf("READ of %d bytes at %d: %v, want %s", q.m.Length, q.m.Offset, err, q.code)
		}
		if st := x.Stats().List[0]; st.ServedBytes != 0 {
			t.Fatalf("a refused READ counted as served: %+v", st)
		}
	}
	c.putLane(l, 0)
	g, err := a.Sync(ctx, huge, 0)
	if err == nil || !strings.Contains(err.Error(), "reported completed") {
		t.Fatalf("sync reporting %d completed bytes: grant %+v, %v; want refused", uint64(huge), g, err)
	}
	// A READ served counts its bytes.
	if err := c.Read(ctx, "kv", 0, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if st := x.Stats().List[0]; st.ServedBytes != 4096 {
		t.Fatalf("served %d after a 4096-byte READ", st.ServedBytes)
	}
}

// A sender engine that restarts without closing (a crash, a kill) comes
// back at a new epoch: its old window is returned then, so restarts do
// not use up the receiver's windows until the receiver restarts.
func TestCreditNewEpochRetiresOldWindow(t *testing.T) {
	ctx := context.Background()
	s, x, _ := startCreditServer(t, testLimits) // room for two windows
	b := NewCreditIssuer(dialAs(t, addrOf(s), "b", 7))
	if _, err := b.Connect(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for epoch := uint64(1); epoch <= 4; epoch++ { // "a" restarts three times
		a := NewCreditIssuer(dialAs(t, addrOf(s), "a", epoch))
		if _, err := a.Connect(ctx, 0); err != nil {
			t.Fatalf("a at epoch %d: %v", epoch, err)
		}
		a.Release()
	}
	st := x.Stats()
	if st.Senders != 2 || st.WindowBytes != 2<<20 || st.Retired != 3 || st.List[0].Epoch != "0000000000000004" {
		t.Fatalf("after three restarts of a: %+v", st)
	}
	// The live sender of another name kept its window.
	if _, err := b.Sync(ctx, 0, 0); err != nil {
		t.Fatalf("b's window: %v", err)
	}
	// A retired epoch's close is answered like a repeated close.
	old := NewCreditIssuer(dialAs(t, addrOf(s), "a", 1))
	if err := old.Close(ctx, 0, 0); err != nil {
		t.Fatalf("close of a retired epoch: %v", err)
	}
}

// A sender that ignores its grant (a raw client: no engine gating its
// owners) is held to its window by the receiver: a frame that would take
// its outstanding bytes past the window is refused whole, with a
// definite error and nothing read or written, and the lane stays usable.
// Its completed report opens the window again; a sender without a
// credit session is not gated.
func TestCreditIssuerRefusesOverrun(t *testing.T) {
	ctx := context.Background()
	s, x, r := startCreditServer(t, testLimits)
	raw := dialAs(t, addrOf(s), "raw", 1)
	a := NewCreditIssuer(raw)
	if _, err := a.Connect(ctx, 0); err != nil {
		t.Fatal(err)
	}
	first := pattern(768<<10, 1)
	if err := raw.Write(ctx, "kv", 0, first); err != nil {
		t.Fatal(err)
	}
	before := append([]byte(nil), r.bytes()...)
	over := pattern(512<<10, 2) // 768 KiB + 512 KiB > the 1 MiB window
	err := raw.Write(ctx, "kv", 1<<20, over)
	e := asError(t, err)
	if e.Kind != engine.KindExhausted || e.Effect != EffectNone || !strings.Contains(err.Error(), "past its receiver credit window of 1048576") {
		t.Fatalf("write past the window: %v (kind %v, effect %v)", err, e.Kind, e.Effect)
	}
	if !bytes.Equal(r.bytes(), before) {
		t.Fatal("a refused write changed the region")
	}
	if err := raw.Read(ctx, "kv", 0, make([]byte, 512<<10)); asError(t, err).Kind != engine.KindExhausted {
		t.Fatalf("read past the window: %v", err)
	}
	st := x.Stats()
	if st.Overruns != 2 || st.List[0].ServedBytes != 768<<10 || st.PeakOutstandingBytes != 768<<10 {
		t.Fatalf("stats after refusals: %+v", st)
	}
	if err := raw.Err(); err != nil {
		t.Fatalf("a refusal broke the connection: %v", err)
	}
	// What fits the window still goes through.
	if err := raw.Write(ctx, "kv", 1<<20, over[:256<<10]); err != nil {
		t.Fatal(err)
	}
	// Reporting completion opens the window again.
	if _, err := a.Sync(ctx, 1<<20, 2); err != nil {
		t.Fatal(err)
	}
	if err := raw.Write(ctx, "kv", 1<<20, over); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.bytes()[1<<20:1<<20+512<<10], over) {
		t.Fatal("the write after the sync did not land")
	}
	// A sender with no credit session is not gated by the issuer.
	if err := dialAs(t, addrOf(s), "plain", 2).Write(ctx, "kv", 0, pattern(2<<20, 3)); err != nil {
		t.Fatal(err)
	}
}

// Frames on two lanes at once: the second is checked against the window
// with the first's bytes counted although the first is not settled yet.
// The hook holds the first WRITE in the server after its admission, so
// the second meets it in flight every run.
func TestCreditIssuerCountsFramesInFlight(t *testing.T) {
	ctx := context.Background()
	s, x, r := startCreditServer(t, testLimits)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	setHook(s, func(p hookPoint, h *wire.Header, c net.Conn) {
		if p == hookWriteBody && h.PayloadLen == 768<<10 {
			once.Do(func() { close(entered); <-release })
		}
	})
	raw := dialAs(t, addrOf(s), "raw", 1)
	if _, err := NewCreditIssuer(raw).Connect(ctx, 0); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- raw.Write(ctx, "kv", 0, pattern(768<<10, 1)) }()
	<-entered
	err := raw.Write(ctx, "kv", 1<<20, pattern(512<<10, 2))
	close(release)
	if e := asError(t, err); e.Kind != engine.KindExhausted || e.Effect != EffectNone {
		t.Fatalf("a frame past the window beside one in flight: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if st := x.Stats(); st.Overruns != 1 || st.List[0].ServedBytes != 768<<10 || !bytes.Equal(r.bytes()[1<<20:1<<20+512<<10], make([]byte, 512<<10)) {
		t.Fatalf("after: %+v", st)
	}
}
