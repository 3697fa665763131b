package engine_test

import (
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// TestCloseRequester: new submissions are refused at once, accepted work
// is waited for; a timeout changes nothing and a second call waits again.
func TestCloseRequester(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	defer ref.release()
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 16384)
	seg := openSeg(t, e, path, engine.PermRead)
	reg := register(t, e, 16384)
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress(), Length: 4096}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	waitFor(t, "the op to reach the transport", func() bool { return ref.prepared.Load() == 1 })
	wantKind(t, e.CloseRequester(20*time.Millisecond), engine.KindTimeout)
	_, err = e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress() + 4096, Length: 4096}}, nil, ioTimeout)
	wantKind(t, err, engine.KindClosed)
	if st := b.Status(); st != engine.StateOpen {
		t.Fatalf("accepted work after a timed-out close_requester: %v", st)
	}
	ref.release()
	if err := e.CloseRequester(ioTimeout); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("accepted work: %v", st)
	}
	_, err = e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress(), Length: 4096}}, nil, ioTimeout)
	wantKind(t, err, engine.KindClosed)
}
