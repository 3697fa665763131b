package bench

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer"
	"github.com/orbitefs/orbitefs/peer/wire"
)

func TestPeerOptionsValidate(t *testing.T) {
	ok := PeerOptions{Op: "write", RegionBytes: 1 << 20, Size: 4096, Concurrency: 1, Runtime: time.Second}
	for _, tc := range []struct {
		name string
		edit func(*PeerOptions)
		want string
	}{
		{"ok", func(*PeerOptions) {}, ""},
		{"op", func(o *PeerOptions) { o.Op = "copy" }, `--op "copy"`},
		{"size", func(o *PeerOptions) { o.Size = 0 }, "--size must be"},
		{"over region", func(o *PeerOptions) { o.Size = 2 << 20 }, "over the region"},
		{"stream over region", func(o *PeerOptions) { o.Stream = 2 << 20 }, "over the stream region"},
		{"stream region", func(o *PeerOptions) { o.Stream, o.StreamRegion, o.StreamRegionBytes = 2<<20, "st", 4<<20 }, ""},
		{"runtime", func(o *PeerOptions) { o.Runtime = 0 }, "--runtime"},
		{"concurrency", func(o *PeerOptions) { o.Concurrency = 0 }, "--concurrency 0"},
		{"count", func(o *PeerOptions) { o.Op, o.Count = "notify", 0 }, "--count 0"},
	} {
		o := ok
		tc.edit(&o)
		err := o.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestProcCPU(t *testing.T) {
	if v := procCPU(os.Getpid()); v < 0 {
		t.Fatalf("procCPU of this process: %v", v)
	}
	if v := procCPU(0); v != -1 {
		t.Fatalf("procCPU(0) = %v, want -1", v)
	}
}

// mem is one exported region for the smoke runs.
type mem struct {
	mu sync.Mutex
	b  []byte
}

func (m *mem) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(p, m.b[off:]), nil
}

func (m *mem) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(m.b[off:], p), nil
}

type oneExport struct{ x peer.Export }

func (e oneExport) Exports() []peer.Export { return []peer.Export{e.x} }
func (e oneExport) Export(id uint64) (peer.Export, bool) {
	return e.x, id == e.x.ID
}

// The peer workloads run over loopback against a real server: bytes and
// ops agree, the CPU is counted, and every acknowledged notification is
// received exactly once.
func TestRunPeerSmoke(t *testing.T) {
	key := []byte("a key for the bench smoke test, long enough")
	exp := oneExport{peer.Export{Descriptor: wire.Descriptor{ID: 1, Name: "kv", Location: "cpu", Bytes: 4 << 20, Perm: wire.PermReadWrite},
		Mem: &mem{b: make([]byte, 4<<20)}}}
	s := peer.NewServer(peer.ServerConfig{Name: "srv", Key: key, IOTimeout: 10 * time.Second, MaxSlice: peer.DefaultMaxSlice}, exp)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := peer.Dial(context.Background(), s.Addr().String(), peer.Config{Name: "cli", Key: key, Lanes: 2, IOTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, op := range []string{"write", "read"} {
		r, err := RunPeer(context.Background(), c, PeerOptions{Op: op, Region: "kv", RegionBytes: 4 << 20, Size: 64 << 10,
			Concurrency: 2, Runtime: 200 * time.Millisecond, Stream: 1 << 20, ServerPID: os.Getpid()})
		if err != nil {
			t.Fatal(err)
		}
		if r.Ops == 0 || r.Bytes != r.Ops*(64<<10) || r.P50Us <= 0 || r.ClientCPUSeconds <= 0 || r.ServerCPUSeconds < 0 ||
			r.Stream == nil || r.Stream.Bytes%(1<<20) != 0 {
			t.Fatalf("%s: %+v", op, r)
		}
	}
	r, err := RunPeerNotify(context.Background(), c, s.Notification, PeerOptions{Op: "notify", Count: 2000, Concurrency: 16})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Notify; n.Delivered != 2000 || n.Received != 2000 || n.Duplicates != 0 || n.Missing != 0 {
		t.Fatalf("notify: %+v", n)
	}
}
