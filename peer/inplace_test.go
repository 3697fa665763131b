package peer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// regionExports exports one engine region (cpu memory, reachable in
// place) as id 1, "kv".
type regionExports struct{ r *engine.Region }

func (x regionExports) Exports() []Export {
	return []Export{{Descriptor: wire.Descriptor{ID: 1, Name: "kv", Location: "cpu", Bytes: x.r.Len(), Perm: wire.PermReadWrite}, Mem: x.r}}
}

func (x regionExports) Export(id uint64) (Export, bool) {
	if id != 1 {
		return Export{}, false
	}
	return x.Exports()[0], true
}

// TestWriteReceivedInPlace: a WRITE into host memory is received
// straight into the region (its first half is there while the second is
// still to come), acknowledged once all of it is, and a READ of it
// returns the same bytes; an Unregister meanwhile answers busy.
func TestWriteReceivedInPlace(t *testing.T) {
	e, err := engine.New(config.DefaultEngine())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(5 * time.Second) })
	const n = 1 << 20
	r, err := e.RegisterMemory(n)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, regionExports{r}, "127.0.0.1:0", testKey)
	c := dial(t, addrOf(s), testKey, 1)
	l, err := c.dialLane(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)

	payload := pattern(n, 7)
	f := wire.Frame{Type: wire.TypeWrite, ID: 1, Meta: (&wire.Write{Region: 1}).Marshal(), Payload: payload}
	l.c.Write(append(f.Append(nil), payload[:n/2]...))
	half := make([]byte, n/2)
	eventually(t, func() bool {
		_, err := r.ReadAt(half, 0)
		return err == nil && bytes.Equal(half, payload[:n/2])
	})
	if err := e.Unregister(r); engine.KindOf(err) != engine.KindBusy {
		t.Fatalf("Unregister while a WRITE is received into the region: %v, want busy", err)
	}
	l.c.Write(payload[n/2:])
	h, err := wire.ReadHeader(l.br, make([]byte, wire.HeaderLen), wire.Limits{MaxPayload: n})
	if err != nil || h.Type != wire.TypeWriteAck || h.ID != 1 {
		t.Fatalf("reply to the WRITE: %+v, %v", h, err)
	}
	if _, err := wire.ReadMeta(l.br, &h); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := c.Read(context.Background(), "kv", 0, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("READ after the in-place WRITE: %v", err)
	}
	// Counted after the reply went out.
	eventually(t, func() bool { st := s.Stats(); return st.BytesIn == n && st.BytesOut == n })

	// With a payload checksum the payload goes through a buffer: one that
	// fails its check never touches the region (effect none).
	bad := pattern(4096, 9)
	f = wire.Frame{Type: wire.TypeWrite, ID: 5, Meta: (&wire.Write{Region: 1}).Marshal(), Payload: bad, PayloadCRC: true}
	hdr := f.Append(nil)
	bad = bytes.Clone(bad)
	bad[100] ^= 1
	l2, err := c.dialLane(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l2.close)
	l2.c.Write(append(hdr, bad...))
	_, _, err = l2.roundTrip(context.Background(), &wire.Frame{Type: wire.TypePing, ID: 5}, wire.TypePong, nil)
	var re *remoteError
	if !errors.As(err, &re) || re.m.Code != wire.CodeCorrupt || re.m.Applied != wire.AppliedNone {
		t.Fatalf("reply to a corrupt payload: %v", err)
	}
	if _, err := r.ReadAt(got[:4096], 0); err != nil || !bytes.Equal(got[:4096], payload[:4096]) {
		t.Fatalf("a WRITE with a corrupt payload changed the region (%v)", err)
	}

	// A refused WRITE (the region unregistered, still listed here) moves
	// no byte, says so, and its payload is consumed: the lane stays in
	// step.
	if err := e.Unregister(r); err != nil {
		t.Fatal(err)
	}
	f = wire.Frame{Type: wire.TypeWrite, ID: 3, Meta: (&wire.Write{Region: 1}).Marshal(), Payload: payload[:64<<10]}
	_, _, err = l.roundTrip(context.Background(), &f, wire.TypeWriteAck, nil)
	if !errors.As(err, &re) || re.m.Applied != wire.AppliedNone || !strings.Contains(re.m.Message, "unregistered") {
		t.Fatalf("WRITE into an unregistered region: %v", err)
	}
	if _, _, err := l.roundTrip(context.Background(), &wire.Frame{Type: wire.TypePing, ID: 4}, wire.TypePong, nil); err != nil {
		t.Fatalf("the lane after a refused in-place WRITE: %v", err)
	}
}
