package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func encode(t *testing.T, f Frame) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := f.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func decode(b []byte, lim Limits) (Header, []byte, []byte, error) {
	r := bytes.NewReader(b)
	h, err := ReadHeader(r, make([]byte, HeaderLen), lim)
	if err != nil {
		return h, nil, nil, err
	}
	meta, err := ReadMeta(r, &h)
	if err != nil {
		return h, nil, nil, err
	}
	p := make([]byte, h.PayloadLen)
	return h, meta, p, ReadPayload(r, &h, p)
}

func TestFrameRoundTrip(t *testing.T) {
	for _, crc := range []bool{false, true} {
		f := Frame{Type: TypeWrite, ID: 0x0102030405060708, Slice: 7,
			Meta: (&Write{Region: 3, Offset: 1 << 40}).Marshal(), Payload: []byte("payload bytes"), PayloadCRC: crc}
		b := encode(t, f)
		if len(b) != HeaderLen+len(f.Meta)+len(f.Payload) {
			t.Fatalf("encoded %d bytes", len(b))
		}
		h, meta, p, err := decode(b, Limits{MaxPayload: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if h.Type != f.Type || h.ID != f.ID || h.Slice != f.Slice || (h.Flags&FlagPayloadCRC != 0) != crc {
			t.Fatalf("header %+v from %+v", h, f)
		}
		var w Write
		if err := w.Unmarshal(meta); err != nil || w.Region != 3 || w.Offset != 1<<40 {
			t.Fatalf("meta %+v %v", w, err)
		}
		if !bytes.Equal(p, f.Payload) {
			t.Fatalf("payload %q", p)
		}
	}
}

// Every single-bit flip anywhere in the header, the metadata, or (with
// the flag) the payload is refused with ErrCorrupt.
func TestFrameCorruptionRefused(t *testing.T) {
	f := Frame{Type: TypeRead, ID: 42, Slice: 1, Meta: (&Read{Region: 1, Offset: 4096, Length: 8}).Marshal(),
		Payload: []byte("12345678"), PayloadCRC: true}
	good := encode(t, f)
	for i := range good {
		for bit := range 8 {
			b := bytes.Clone(good)
			b[i] ^= 1 << bit
			if _, _, _, err := decode(b, Limits{MaxPayload: 1 << 20}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d bit %d flipped: err %v, want ErrCorrupt", i, bit, err)
			}
		}
	}
}

// Without the flag a payload is not checked, but header and metadata are.
func TestPayloadUncheckedWithoutFlag(t *testing.T) {
	b := encode(t, Frame{Type: TypeWrite, ID: 1, Meta: (&Write{Region: 1}).Marshal(), Payload: []byte("abc")})
	b[len(b)-1] ^= 1
	if _, _, p, err := decode(b, Limits{MaxPayload: 16}); err != nil || string(p) != "abb" {
		t.Fatalf("payload %q err %v", p, err)
	}
}

func TestHeaderLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Header
		lim  uint64
	}{
		{"payload over the limit", Header{Type: TypeWrite, PayloadLen: 1 << 20}, 1<<20 - 1},
		{"metadata over its limit", Header{Type: TypeRegionsOK, MetaLen: MaxMetaLen + 1}, 0},
		{"unknown type", Header{Type: 99}, 0},
		{"unknown flag", Header{Type: TypePing, Flags: 1 << 5}, 0},
		{"payload crc without flag", Header{Type: TypePing, PayloadCRC: 1}, 0},
	} {
		b := make([]byte, HeaderLen)
		tc.h.Marshal(b)
		var h Header
		if err := h.Unmarshal(b, Limits{MaxPayload: tc.lim}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", tc.name, err)
		}
	}
	b := make([]byte, HeaderLen)
	(&Header{Type: TypePing}).Marshal(b)
	b[4] = Version + 1
	binary.LittleEndian.PutUint32(b[44:], CRC(b[:44])) // a matching checksum is not enough
	var h Header
	if err := h.Unmarshal(b, Limits{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version %d: err %v", b[4], err)
	}
}

func TestMessagesTruncatedOrLong(t *testing.T) {
	msgs := []interface {
		Marshal() []byte
		Unmarshal([]byte) error
	}{
		&Hello{Name: "a", Epoch: 9, Role: RoleLane, Session: 3},
		&Challenge{Name: "b", Epoch: 1},
		&Auth{},
		&Welcome{Session: 1},
		&Regions{List: []Descriptor{{ID: 1, Name: "kv", Location: "cpu", Bytes: 4096, Perm: PermRead}}},
		&Regions{List: []Descriptor{{ID: 2, Name: "g", Location: "cuda:0", Bytes: 4096, Perm: PermRead, IPC: make([]byte, IPCHandleLen)}}},
		&RegionsQuery{Host: "boot-id"},
		&RegionsQuery{Host: "boot-id", Caps: CapIPCMap},
		&IPCMap{Region: 7},
		&Read{Region: 1, Offset: 2, Length: 3},
		&Write{Region: 1, Offset: 2},
		&Pong{Epoch: 5},
		&Error{Code: CodeDenied, Message: "no"},
		&CreditConnect{QoSClass: 2},
		&CreditDone{Bytes: 1, Requests: 2},
		&CreditGrant{Bytes: 1, Requests: 2, StagingSlots: 3, ConsumerSlots: 4},
	}
	for _, m := range msgs {
		b := m.Marshal()
		if err := m.Unmarshal(b); err != nil {
			t.Fatalf("%T round trip: %v", m, err)
		}
		if err := m.Unmarshal(b[:len(b)-1]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%T truncated: %v", m, err)
		}
		if err := m.Unmarshal(append(b, 0)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%T with a trailing byte: %v", m, err)
		}
	}
}

// An older client's query (a host, no capabilities) still decodes, with
// none: a server then never takes it for a client that announces its
// CUDA IPC mappings.
func TestRegionsQueryCaps(t *testing.T) {
	for _, q := range []RegionsQuery{{}, {Host: "boot-id"}, {Host: "boot-id", Caps: CapIPCMap}, {Caps: CapIPCMap}} {
		var e enc
		e.str(q.Host)
		old := e.b // what a client without capabilities sends
		var got RegionsQuery
		if err := got.Unmarshal(q.Marshal()); err != nil || got != q {
			t.Fatalf("%+v round trip: %+v, %v", q, got, err)
		}
		if err := got.Unmarshal(old); err != nil || got.Host != q.Host || got.Caps != 0 {
			t.Fatalf("an older client's query for host %q: %+v, %v", q.Host, got, err)
		}
	}
}

func TestProofsBindBothSides(t *testing.T) {
	key := []byte("0123456789abcdef")
	h := &Hello{Name: "a", Epoch: 1, Role: RoleControl, Nonce: [NonceLen]byte{1}}
	c := &Challenge{Name: "b", Epoch: 2, Nonce: [NonceLen]byte{2}}
	srv, cli := Proof(key, true, h, c), Proof(key, false, h, c)
	if ProofOK(srv, cli) {
		t.Fatal("a server proof passes as the client's")
	}
	if ProofOK(cli, Proof([]byte("0123456789abcdeF"), false, h, c)) {
		t.Fatal("a proof from another key passes")
	}
	h2 := *h
	h2.Nonce[0] = 9
	if ProofOK(cli, Proof(key, false, &h2, c)) {
		t.Fatal("a proof replayed with another nonce passes")
	}
}

func TestRegionsSize(t *testing.T) {
	rs := Regions{List: []Descriptor{{ID: 1, Name: "kv", Location: "cpu", Bytes: 1, Perm: PermRead},
		{ID: 2, Name: "weights-0", Location: "cuda:0", IPC: make([]byte, IPCHandleLen)}}}
	want := RegionsBase
	for _, d := range rs.List {
		want += DescriptorSize(d.Name, d.Location, d.IPC != nil)
	}
	if got := len(rs.Marshal()); got != want {
		t.Fatalf("encoded %d bytes, RegionsBase + DescriptorSize says %d", got, want)
	}
}
