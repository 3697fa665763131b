package engine_test

// remote_test.go: what a remote segment refuses before any byte moves
// (the fake Remote of fakeremote_test.go sees no call): a permission the
// region was not exported with, a range past the region, a producer
// event on host memory, a transport; and that closing the segment closes its Remote once its
// transfers drained.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

func TestRemoteSegmentRefusals(t *testing.T) {
	e := gpuEngine(t, newFakeGPU(1), nil, nil)
	host := register(t, e, 8192)

	ro := newFakeRemote(4096, engine.PermRead, peerUnit)
	_, err := e.OpenRemoteSegment("tcp://127.0.0.1:1/kv", ro, engine.PermReadWrite)
	wantKind(t, err, engine.KindPermission)
	if !strings.Contains(err.Error(), `permission read_write asked, but fake exports region "kv" with permission read`) {
		t.Fatalf("open refusal: %v", err)
	}

	f := newFakeRemote(4096, engine.PermReadWrite, peerUnit)
	seg, err := e.OpenRemoteSegment("tcp://127.0.0.1:1/kv", f, engine.PermRead)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		op   engine.Op
		req  engine.Request
		kind engine.Kind
		text string
	}{
		{"write on a read segment", engine.OpWrite, engine.Request{Address: host.BaseAddress(), Length: 4096}, engine.KindPermission, "write on tcp://127.0.0.1:1/kv, opened read"},
		{"past the region", engine.OpRead, engine.Request{Address: host.BaseAddress(), TargetOffset: 4000, Length: 200}, engine.KindRange, `target_offset 4000 + length 200 = 4200 is beyond region "kv" of fake (4096 bytes)`},
		{"a producer on host memory", engine.OpRead, engine.Request{Address: host.BaseAddress(), Length: 4096, Producer: &producerEvent{done: make(chan struct{})}}, engine.KindInvalid, "a producer event needs device memory"},
		{"a transport", engine.OpRead, engine.Request{Address: host.BaseAddress(), Length: 4096, Transport: engine.TransportIOUring}, engine.KindInvalid, "leave transport unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.SubmitAndWait(tc.op, seg, []engine.Request{tc.req}, ioTimeout)
			wantKind(t, err, tc.kind)
			if !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("%v: want %q", err, tc.text)
			}
		})
	}
	if n := f.reads.Load() + f.writes.Load(); n != 0 {
		t.Fatalf("refused submissions reached the peer %d times", n)
	}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if info := seg.Info(); info.Remote.Peer != "fake" || info.Remote.Epoch != 7 || info.Remote.Size != 4096 || info.Users != 0 {
		t.Fatalf("info %+v", info)
	}
	if err := e.CloseRemoteSegment(seg, ioTimeout); err != nil || !f.closed.Load() {
		t.Fatalf("close: %v, remote closed %v", err, f.closed.Load())
	}
	_, err = e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindBusy)
}

// A vector moves as its pieces, padding included: zeros on WRITE, and on
// READ the padded bytes are skipped.
func TestRemoteSegmentVector(t *testing.T) {
	e := gpuEngine(t, newFakeGPU(1), nil, nil)
	host := register(t, e, 8192)
	src := make([]byte, 8192)
	for i := range src {
		src[i] = byte(i%251 + 1)
	}
	host.WriteAt(src, 0)
	f := newFakeRemote(8192, engine.PermReadWrite, peerUnit)
	for i := range f.data {
		f.data[i] = 0xEE
	}
	seg, err := e.OpenRemoteSegment("tcp://127.0.0.1:1/kv", f, engine.PermReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	b := host.BaseAddress()
	vec := engine.Vector(engine.TransportUnspec, 100, engine.Range(b, 1000), engine.Pad(24), engine.Range(b+4096, 3072))
	if _, err := e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{vec}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{0xEE}, 8192)
	copy(want[100:], src[:1000])
	copy(want[1100:], make([]byte, 24))
	copy(want[1124:], src[4096:4096+3072])
	if !bytes.Equal(f.bytes(), want) {
		t.Fatal("the region differs from the vector's pieces and zeroed padding")
	}
	back := register(t, e, 8192)
	rb := back.BaseAddress()
	rvec := engine.Vector(engine.TransportUnspec, 100, engine.Range(rb, 1000), engine.Pad(24), engine.Range(rb+4096, 3072))
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{rvec}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8192)
	back.ReadAt(got, 0)
	if !bytes.Equal(got[:1000], src[:1000]) || !bytes.Equal(got[4096:4096+3072], src[4096:4096+3072]) || !bytes.Equal(got[1000:4096], make([]byte, 3096)) {
		t.Fatal("READ of the vector put the wrong bytes in memory")
	}
}
