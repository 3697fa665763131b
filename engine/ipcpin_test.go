package engine_test

// ipcpin_test.go: the exporter knows its region is mapped. The importer
// announces a mapping (and waits for the acknowledgement) before it
// opens the handle, so no copy runs on an unacknowledged mapping; while
// it is held, Unregister of the exported region is refused naming the
// holder; closing the segment unmaps it and announces that, after which
// Unregister succeeds.

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// ipcWrite writes the first unit of f.dev to the segment and returns the
// task's transport.
func ipcWrite(t *testing.T, f *ipcFixture) engine.TransportKind {
	t.Helper()
	b, err := f.e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if _, err := b.Submit(engine.OpWrite, f.seg, []engine.Request{{Address: f.dev.BaseAddress(), Length: peerUnit}}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	b.Seal()
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	ts, _ := b.TaskStatus(0)
	if ts.State != engine.TaskCompleted {
		t.Fatalf("WRITE: %v (%v)", ts.State, ts.Err)
	}
	return ts.Transport
}

func TestIPCExportedRegionHeldWhileMapped(t *testing.T) {
	f := newIPCFixture(t, 1)
	want := bytes.Repeat([]byte{0x5a}, f.n)
	mustWrite(t, f.dev, want)
	if tr := ipcWrite(t, f); tr != engine.TransportCUDAIPC {
		t.Fatalf("WRITE over %v, want cuda_ipc", tr)
	}
	if !bytes.Equal(regionBytes(t, f.exp), want) {
		t.Fatal("the WRITE did not land in the exported region")
	}
	x := f.remote.exporter
	if x.maps.Load() != 1 || f.exp.IPCMappings()[fakeHolder] != 1 {
		t.Fatalf("%d mappings announced, exporter holds %v: want one", x.maps.Load(), f.exp.IPCMappings())
	}
	err := f.e.Unregister(f.exp)
	if !errors.Is(err, engine.ErrBusy) || !strings.Contains(err.Error(), fakeHolder) {
		t.Fatalf("Unregister of a mapped region: %v, want busy naming %q", err, fakeHolder)
	}
	// Refused: the region is untouched and still serves the mapping.
	if tr := ipcWrite(t, f); tr != engine.TransportCUDAIPC || x.maps.Load() != 1 {
		t.Fatalf("after the refusal: WRITE over %v, %d mappings announced", tr, x.maps.Load())
	}
	if err := f.e.CloseRemoteSegment(f.seg, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if x.unmaps.Load() != 1 || len(f.exp.IPCMappings()) != 0 || f.gpu.ipcOpen.Load() != 0 {
		t.Fatalf("after segment close: %d unmaps, held %v, %d open: want the mapping closed and announced", x.unmaps.Load(), f.exp.IPCMappings(), f.gpu.ipcOpen.Load())
	}
	if err := f.e.Unregister(f.exp); err != nil {
		t.Fatalf("Unregister after the unmap: %v", err)
	}
}

// TestIPCCopyWaitsForMapAck: while the exporter has not acknowledged the
// mapping, the handle is not opened and no copy is queued; every copy
// runs with the exporter's hold in place.
func TestIPCCopyWaitsForMapAck(t *testing.T) {
	f := newIPCFixture(t, 1)
	x := f.remote.exporter
	x.ack, x.asked = make(chan struct{}), make(chan struct{})
	var unheld atomic.Int64
	f.gpu.onDtoD = func(dst, src, n uint64) {
		if f.exp.IPCMappings()[fakeHolder] == 0 {
			unheld.Add(1)
		}
	}
	done := make(chan engine.TransportKind, 1)
	go func() { done <- ipcWrite(t, f) }()
	select {
	case <-x.asked:
	case <-time.After(ioTimeout):
		t.Fatal("the mapping was never announced")
	}
	select {
	case tr := <-done:
		t.Fatalf("the WRITE ended over %v before the exporter acknowledged the mapping", tr)
	case <-time.After(200 * time.Millisecond):
	}
	if f.gpu.importTries.Load() != 0 || f.gpu.dtods.Load() != 0 {
		t.Fatalf("before the acknowledgement: %d imports, %d copies", f.gpu.importTries.Load(), f.gpu.dtods.Load())
	}
	close(x.ack)
	if tr := <-done; tr != engine.TransportCUDAIPC {
		t.Fatalf("WRITE over %v, want cuda_ipc", tr)
	}
	if f.gpu.dtods.Load() != 1 || unheld.Load() != 0 {
		t.Fatalf("%d copies, %d of them without the exporter's hold", f.gpu.dtods.Load(), unheld.Load())
	}
}

// olderRemote is a Remote that cannot announce mappings (a peer
// transport from before the announcements): only engine.Remote and its
// health.
type olderRemote struct{ engine.Remote }

func (r olderRemote) Err() error { return r.Remote.(*fakeRemote).Err() }

// TestIPCNoMappingWithoutAnnouncer: a Remote that cannot tell its
// exporter never gets a mapping, and one whose exporter refuses the
// announcement neither: their requests keep TCP.
func TestIPCNoMappingWithoutAnnouncer(t *testing.T) {
	t.Run("older transport", func(t *testing.T) {
		f := newIPCFixture(t, 1)
		seg, err := f.e.OpenRemoteSegment("tcp://127.0.0.1:1/kv2", olderRemote{f.remote}, engine.PermReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		f.seg = seg
		if tr := ipcWrite(t, f); tr != engine.TransportTCP {
			t.Fatalf("WRITE over %v, want tcp", tr)
		}
		if f.gpu.importTries.Load() != 0 || f.gpu.dtods.Load() != 0 || f.remote.exporter.maps.Load() != 0 {
			t.Fatalf("%d imports, %d copies without an announcer", f.gpu.importTries.Load(), f.gpu.dtods.Load())
		}
	})
	t.Run("exporter refuses", func(t *testing.T) {
		f := newIPCFixture(t, 1)
		f.remote.exporter = nil
		if tr := ipcWrite(t, f); tr != engine.TransportTCP {
			t.Fatalf("WRITE over %v, want tcp", tr)
		}
		if f.gpu.importTries.Load() != 0 || f.gpu.dtods.Load() != 0 {
			t.Fatalf("%d imports, %d copies without an acknowledged mapping", f.gpu.importTries.Load(), f.gpu.dtods.Load())
		}
	})
}
