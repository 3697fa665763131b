package peer

// ipcpin_test.go: the exporter knows who maps its device regions. A
// client announces each CUDA IPC mapping (held until it unmaps it, or
// until the grace after its connection ended); a client that does not
// speak the announcements gets no handle; a map of a region that is
// not exported is refused and holds nothing.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// ipcPinServer serves region "g" (cuda:0, read_write, id 1) with a CUDA
// IPC handle on host "host-a", releasing a finished session's mappings
// grace after it ended; dropped gets each released holder; older: it
// refuses regions queries with capabilities, as a server before them.
func ipcPinServer(t *testing.T, grace time.Duration, older ...bool) (*Server, *ipcExports, chan string) {
	t.Helper()
	mx := &memExports{}
	mx.add(1, "g", 4096, wire.PermReadWrite).d.Location = "cuda:0"
	exp := &ipcExports{memExports: mx, handle: bytes.Repeat([]byte{0xab}, wire.IPCHandleLen)}
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice,
		Host: "host-a", IPCReleaseGrace: grace, Logger: slog.New(slog.NewTextHandler(&logBuf{}, nil))}, exp)
	dropped := make(chan string, 4)
	s.ipcDropped = func(h string) { dropped <- h }
	s.olderRegions = len(older) > 0 && older[0]
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, exp, dropped
}

func ipcPinRemote(t *testing.T, s *Server) (*Conn, *Remote) {
	t.Helper()
	conn, err := Dial(context.Background(), s.Addr().String(), Config{Name: "cli", Key: testKey, IOTimeout: 10 * time.Second, Host: "host-a"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := OpenRemote(context.Background(), conn, "g")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if r.Info().IPC == nil {
		t.Fatal("no CUDA IPC handle for a same-host client that announces its mappings")
	}
	return conn, r
}

// heldBy is the one holder's count, failing when several hold.
func heldBy(t *testing.T, exp *ipcExports) (string, int64) {
	t.Helper()
	h := exp.held()
	if len(h) > 1 {
		t.Fatalf("held by %v, want at most one session", h)
	}
	for k, v := range h {
		return k, v
	}
	return "", 0
}

func TestIPCMapHeldUntilUnmap(t *testing.T) {
	s, exp, _ := ipcPinServer(t, time.Hour)
	_, r := ipcPinRemote(t, s)
	epoch := r.Info().Epoch
	var unmaps []func()
	for range 2 { // two local devices: two mappings
		u, err := r.AnnounceIPC(context.Background(), epoch)
		if err != nil {
			t.Fatal(err)
		}
		unmaps = append(unmaps, u)
	}
	holder, n := heldBy(t, exp)
	if n != 2 || !strings.HasPrefix(holder, "cli (epoch ") {
		t.Fatalf("held by %q %d times, want cli's session twice", holder, n)
	}
	unmaps[0]()
	unmaps[0]() // once only
	if _, n := heldBy(t, exp); n != 1 {
		t.Fatalf("%d held after one unmap, want 1", n)
	}
	unmaps[1]()
	if h := exp.held(); len(h) != 0 {
		t.Fatalf("held after every unmap: %v", h)
	}
	if _, err := r.AnnounceIPC(context.Background(), epoch+1); err == nil {
		t.Fatal("a mapping announced for another epoch was acknowledged")
	}
	if h := exp.held(); len(h) != 0 {
		t.Fatalf("held after a refused announcement: %v", h)
	}
}

// TestIPCMapReleasedAfterConnectionEnds: the session's mappings outlive
// its connection by the grace (a copy it queued may still run), then go.
func TestIPCMapReleasedAfterConnectionEnds(t *testing.T) {
	const grace = 300 * time.Millisecond
	s, exp, dropped := ipcPinServer(t, grace)
	conn, r := ipcPinRemote(t, s)
	if _, err := r.AnnounceIPC(context.Background(), r.Info().Epoch); err != nil {
		t.Fatal(err)
	}
	holder, _ := heldBy(t, exp)
	closed := time.Now()
	conn.Close() // as a crashed client's kernel closes its sockets
	select {
	case h := <-dropped:
		if h != holder {
			t.Fatalf("released %q, want %q", h, holder)
		}
		if d := time.Since(closed); d < grace {
			t.Fatalf("released %v after the connection ended, before the %v grace", d, grace)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the mappings of a closed session are still held: %v", exp.held())
	}
	if h := exp.held(); len(h) != 0 {
		t.Fatalf("held after the grace: %v", h)
	}
}

// TestIPCHandleOnlyForAnnouncingClients: a same-host client that does
// not announce its mappings (one from before the announcements) gets no
// handle and reaches the region over TCP; so does every client of an
// export that cannot record holds.
func TestIPCHandleOnlyForAnnouncingClients(t *testing.T) {
	s, exp, _ := ipcPinServer(t, time.Hour)
	for _, c := range []struct {
		name string
		caps wire.Caps
		want bool
	}{{"announces", wire.CapIPCMap, true}, {"older client", 0, false}} {
		rs := s.regions("host-a", "cli", c.caps)
		if got := len(rs.List) == 1 && rs.List[0].IPC != nil; got != c.want {
			t.Errorf("%s: handle sent %v, want %v", c.name, got, c.want)
		}
	}
	// The server's dispatch of a raw older query: host only.
	var q wire.RegionsQuery
	old := append(binary.LittleEndian.AppendUint16(nil, 6), "host-a"...)
	if err := q.Unmarshal(old); err != nil || q.Caps != 0 {
		t.Fatalf("an older query: %+v %v", q, err)
	}
	noHold := &memExports{}
	noHold.add(1, "g", 4096, wire.PermReadWrite).d.Location = "cuda:0"
	s2 := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: time.Second, MaxSlice: DefaultMaxSlice, Host: "host-a"},
		&handleOnly{noHold, exp.handle})
	if rs := s2.regions("host-a", "cli", wire.CapIPCMap); rs.List[0].IPC != nil {
		t.Fatal("a handle sent for an export that cannot record who maps it")
	}
}

// handleOnly has handles but no holds.
type handleOnly struct {
	*memExports
	h []byte
}

func (x *handleOnly) Exports() []Export {
	out := x.memExports.Exports()
	for i := range out {
		out[i].IPCHandle = func() ([]byte, error) { return x.h, nil }
	}
	return out
}

// TestIPCMapRefused: a map of a region that is not exported (gone, or a
// stale id) is refused with nothing held and the connection kept.
func TestIPCMapRefused(t *testing.T) {
	s, exp, _ := ipcPinServer(t, time.Hour)
	conn, r := ipcPinRemote(t, s)
	err := conn.request(context.Background(), "ipc map", wire.TypeIPCMap, (&wire.IPCMap{Region: 99}).Marshal(), wire.TypeIPCAck, noMeta{})
	if !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("map of region 99: %v, want not found", err)
	}
	err = conn.request(context.Background(), "ipc unmap", wire.TypeIPCUnmap, (&wire.IPCMap{Region: 1}).Marshal(), wire.TypeIPCAck, noMeta{})
	if err == nil {
		t.Fatal("an unmap without its map was acknowledged")
	}
	if h := exp.held(); len(h) != 0 {
		t.Fatalf("held after refusals: %v", h)
	}
	if _, err := r.AnnounceIPC(context.Background(), r.Info().Epoch); err != nil {
		t.Fatalf("the connection did not survive the refusals: %v", err)
	}
}

// TestIPCOlderServer: a server from before the capabilities refuses a
// query naming them; the client dials it again without them and reaches
// its regions over TCP, with no handle.
func TestIPCOlderServer(t *testing.T) {
	s, _, _ := ipcPinServer(t, time.Hour, true)
	conn, err := Dial(context.Background(), s.Addr().String(), Config{Name: "cli", Key: testKey, IOTimeout: 10 * time.Second, Host: "host-a"})
	if err != nil {
		t.Fatalf("dialing an older server: %v", err)
	}
	defer conn.Close()
	r, err := OpenRemote(context.Background(), conn, "g")
	if err != nil {
		t.Fatal(err)
	}
	if r.Info().IPC != nil {
		t.Fatal("a CUDA IPC handle from a server that cannot record who maps it")
	}
	if _, err := r.WriteAt(context.Background(), []byte("tcp"), 0); err != nil {
		t.Fatalf("WRITE over TCP to the older server: %v", err)
	}
}

// TestIPCMapOnlyWhatWasOffered: a client that was sent no handle (it is
// on another host) cannot hold the region with a map request.
func TestIPCMapOnlyWhatWasOffered(t *testing.T) {
	s, exp, _ := ipcPinServer(t, time.Hour)
	conn, err := Dial(context.Background(), s.Addr().String(), Config{Name: "far", Key: testKey, IOTimeout: 10 * time.Second, Host: "host-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.request(context.Background(), "ipc map", wire.TypeIPCMap, (&wire.IPCMap{Region: 1}).Marshal(), wire.TypeIPCAck, noMeta{})
	if !errors.Is(err, engine.ErrPermission) {
		t.Fatalf("map without the handle: %v, want denied", err)
	}
	if h := exp.held(); len(h) != 0 {
		t.Fatalf("held by a client that was sent no handle: %v", h)
	}
}
