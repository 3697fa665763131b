// fuzz_test.go: the decoder of the frame and of every message's metadata
// meets arbitrary bytes (a stranger's first frame, a corrupt stream):
// it returns an error wrapping ErrCorrupt or a value, never panics, and
// never accepts a length over its limit.

package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func FuzzFrame(f *testing.F) {
	hello := Hello{Name: "alpha", Epoch: 7, Role: RoleLane, Session: 3}
	for _, fr := range []Frame{
		{Type: TypeHello, Meta: hello.Marshal()},
		{Type: TypeWrite, ID: 9, Meta: (&Write{Region: 1, Offset: 4096}).Marshal(), Payload: []byte("abcd"), PayloadCRC: true},
		{Type: TypeRegionsOK, Meta: (&Regions{List: []Descriptor{{ID: 1, Name: "kv", Location: "cpu", Bytes: 1 << 20, Perm: PermRead}}}).Marshal()},
		{Type: TypeError, Meta: (&Error{Code: CodeRange, Message: "x"}).Marshal()},
		{Type: TypeCreditGrant, Meta: (&CreditGrant{Bytes: 1}).Marshal()},
	} {
		var b bytes.Buffer
		fr.Write(&b)
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		lim := Limits{MaxPayload: 1 << 10}
		h, err := ReadHeader(r, make([]byte, HeaderLen), lim)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("header: %v", err)
			}
			return
		}
		if h.MetaLen > MaxMetaLen || h.PayloadLen > lim.MaxPayload {
			t.Fatalf("accepted lengths %d, %d over their limits", h.MetaLen, h.PayloadLen)
		}
		meta, err := ReadMeta(r, &h)
		if err != nil {
			return
		}
		if err := ReadPayload(r, &h, make([]byte, h.PayloadLen)); err != nil && !errors.Is(err, ErrCorrupt) &&
			!errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("payload: %v", err)
		}
		for _, m := range []interface{ Unmarshal([]byte) error }{
			&Hello{}, &Challenge{}, &Auth{}, &Welcome{}, &Regions{}, &Read{}, &Write{}, &Pong{}, &Error{}, &Notify{},
			&CreditConnect{}, &CreditDone{}, &CreditGrant{}, &RegionsQuery{}, &IPCMap{},
		} {
			if err := m.Unmarshal(meta); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%T: %v does not wrap ErrCorrupt", m, err)
			}
		}
	})
}
