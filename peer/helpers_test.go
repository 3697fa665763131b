package peer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

var testKey = []byte("a shared test key of enough bytes")

// memExports is an in-memory Exports: byte slices as regions.
type memExports struct {
	mu   sync.Mutex
	list map[uint64]*memRegion
}

type memRegion struct {
	d  wire.Descriptor
	mu sync.Mutex
	b  []byte
}

func (r *memRegion) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off+int64(len(p)) > int64(len(r.b)) {
		return 0, &engine.Error{Op: "read", Kind: engine.KindRange}
	}
	return copy(p, r.b[off:]), nil
}

func (r *memRegion) WriteAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if off+int64(len(p)) > int64(len(r.b)) {
		return 0, &engine.Error{Op: "write", Kind: engine.KindRange}
	}
	return copy(r.b[off:], p), nil
}

func (r *memRegion) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.b)
}

func (m *memExports) add(id uint64, name string, n int, perm wire.Perm) *memRegion {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.list == nil {
		m.list = map[uint64]*memRegion{}
	}
	r := &memRegion{d: wire.Descriptor{ID: id, Name: name, Location: "cpu", Bytes: uint64(n), Perm: perm}, b: make([]byte, n)}
	m.list[id] = r
	return r
}

func (m *memExports) Exports() []Export {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Export
	for _, r := range m.list {
		out = append(out, Export{Descriptor: r.d, Mem: r})
	}
	return out
}

func (m *memExports) Export(id uint64) (Export, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.list[id]
	if !ok {
		return Export{}, false
	}
	return Export{Descriptor: r.d, Mem: r}, true
}

// logBuf collects a server's log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startServer(t testing.TB, exp Exports, addr string, key []byte) (*Server, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	s := NewServer(ServerConfig{Name: "srv", Key: key, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice,
		Logger: slog.New(slog.NewTextHandler(lb, nil))}, exp)
	if err := s.Listen(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, lb
}

func dial(t testing.TB, addr string, key []byte, lanes int) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), addr, Config{Name: "cli", Key: key, Lanes: lanes, IOTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>12)
	}
	return b
}

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *peer.Error", err, err)
	}
	return e
}

// serverLanes counts the lanes open on the server.
func serverLanes(s *Server) int { return s.Stats().Lanes }

// closeServerLanes closes the server's side of every lane, as a peer's
// idle timeout or crash would.
func closeServerLanes(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ss := range s.mu.sessions {
		for l := range ss.lanes {
			l.Close()
			n++
		}
	}
	return n
}

func addrOf(s *Server) string { return s.Addr().String() }

// setHook installs a server hook under the server's lock: the accept
// loop takes that lock before it starts a connection's goroutine, so the
// hook is seen by every connection accepted after.
func setHook(s *Server, fn func(hookPoint, *wire.Header, net.Conn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = fn
}
