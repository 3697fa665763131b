package peer

// ipc_test.go: a device region's CUDA IPC handle reaches a client on the
// server's host only, through the region descriptor, and becomes the
// engine's RemoteInfo.IPC; a handle the exporter cannot make is left out.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// ipcExports serves memExports with a handle for "cuda:" regions, and
// records their CUDA IPC holds as engine.Region does.
type ipcExports struct {
	*memExports
	handle []byte
	err    error
	holds  sync.Map // holder -> *atomic.Int64
}

func (x *ipcExports) withIPC(e Export) Export {
	if strings.HasPrefix(e.Location, "cuda:") {
		e.IPCHandle = func() ([]byte, error) { return x.handle, x.err }
		e.HoldIPC = func(holder string) error {
			v, _ := x.holds.LoadOrStore(holder, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			return nil
		}
		e.ReleaseIPC = func(holder string, n int) {
			v, _ := x.holds.LoadOrStore(holder, new(atomic.Int64))
			if n <= 0 {
				v.(*atomic.Int64).Store(0)
				return
			}
			v.(*atomic.Int64).Add(-int64(n))
		}
	}
	return e
}

func (x *ipcExports) Exports() []Export {
	out := x.memExports.Exports()
	for i := range out {
		out[i] = x.withIPC(out[i])
	}
	return out
}

func (x *ipcExports) Export(id uint64) (Export, bool) {
	e, ok := x.memExports.Export(id)
	return x.withIPC(e), ok
}

// held is every holder's mappings, those at 0 left out.
func (x *ipcExports) held() map[string]int64 {
	out := map[string]int64{}
	x.holds.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n != 0 {
			out[k.(string)] = n
		}
		return true
	})
	return out
}

func TestIPCHandleSameHostOnly(t *testing.T) {
	handle := bytes.Repeat([]byte{0xab}, wire.IPCHandleLen)
	for _, c := range []struct {
		name       string
		clientHost string
		location   string
		perm       wire.Perm
		err        error
		want       bool
	}{
		{"same host, device region", "host-a", "cuda:1", wire.PermReadWrite, nil, true},
		{"other host", "host-b", "cuda:1", wire.PermReadWrite, nil, false},
		{"no host named", "", "cuda:1", wire.PermReadWrite, nil, false},
		{"host memory", "host-a", "cpu", wire.PermReadWrite, nil, false},
		{"exporter refuses", "host-a", "cuda:1", wire.PermReadWrite, errors.New("imported mapping"), false},
		// A mapping of the handle can read and write every byte: a
		// region exported read or write only never hands it out.
		{"exported read only", "host-a", "cuda:1", wire.PermRead, nil, false},
		{"exported write only", "host-a", "cuda:1", wire.PermWrite, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mx := &memExports{}
			mx.add(1, "kv", 4096, c.perm).d.Location = c.location
			exp := &ipcExports{memExports: mx, handle: handle, err: c.err}
			lb := &logBuf{}
			s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice,
				Host: "host-a", Logger: slog.New(slog.NewTextHandler(lb, nil))}, exp)
			if err := s.Listen("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			cfg := Config{Name: "cli", Key: testKey, IOTimeout: 10 * time.Second, Host: c.clientHost}
			if c.clientHost == "" {
				cfg.Host = "-" // HostID otherwise; a host no server has
			}
			conn, err := Dial(context.Background(), s.Addr().String(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := OpenRemote(context.Background(), conn, "kv")
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ipc := r.Info().IPC
			if got := ipc != nil; got != c.want {
				t.Fatalf("IPC %+v, want present %v", ipc, c.want)
			}
			if c.want && (ipc.Device != 1 || !bytes.Equal(ipc.Handle, handle)) {
				t.Fatalf("IPC device %d handle %x", ipc.Device, ipc.Handle[:8])
			}
			if c.err != nil && !strings.Contains(lb.String(), "cuda ipc handle not sent") {
				t.Fatalf("the refusal is not logged: %s", lb.String())
			}
			if err := r.Err(); err != nil {
				t.Fatalf("Err on a live connection: %v", err)
			}
			conn.Close()
			if r.Err() == nil {
				t.Fatal("Err is nil after the connection closed")
			}
		})
	}
}
