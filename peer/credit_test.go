package peer

// credit_test.go: the receiver's issuer over real TCP: windows carved
// from the aggregate bounds, a retried connect, grants of window +
// completed, completed totals checked against the bytes the sender's
// frames carried, close with its tombstone, credits off, and remote Pin
// slot windows.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
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
	l, err := c.getLane(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	const huge = 1 << 62
	f := wire.Frame{Type: wire.TypeRead, ID: c.nextID.Add(1), Meta: (&wire.Read{Region: 1, Offset: 0, Length: huge}).Marshal()}
	_, _, err = l.roundTrip(ctx, &f, wire.TypeReadData, nil)
	c.putLane(l, 0)
	var re *remoteError
	if !errors.As(err, &re) || re.m.Code != wire.CodeTooLarge {
		t.Fatalf("READ of %d bytes: %v, want too large", uint64(huge), err)
	}
	if st := x.Stats().List[0]; st.ServedBytes != 0 {
		t.Fatalf("a refused READ counted as served: %+v", st)
	}
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
