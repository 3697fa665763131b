package peer

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/peer/wire"
	"golang.org/x/sys/unix"
)

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		mode       os.FileMode
		want, err  string
	}{
		{"ok", "0123456789abcdef\n", 0o600, "0123456789abcdef", ""},
		{"group-readable", "0123456789abcdef", 0o640, "", "mode 0640 lets others read the key"},
		{"short", "  0123456789  \n", 0o600, "", "10 bytes of key, want at least 16"},
		{"missing", "", 0, "", "no such file"},
	} {
		p := filepath.Join(dir, tc.name)
		if tc.mode != 0 {
			os.WriteFile(p, []byte(tc.text), tc.mode)
			os.Chmod(p, tc.mode)
		}
		k, err := LoadKey(p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(k, []byte(tc.want)) {
			t.Errorf("%s: %q %v", tc.name, k, err)
		}
	}
}

// The listener is plain TCP, not Multipath TCP (Go's default for
// listeners), and so are the client's lanes.
func TestNoMultipathTCP(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 4096, wire.PermReadWrite)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	rc, err := s.ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var proto int
	var gerr error
	rc.Control(func(fd uintptr) { proto, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL) })
	if gerr != nil || proto != unix.IPPROTO_TCP {
		t.Fatalf("listener protocol %d (%v), want IPPROTO_TCP %d (not MPTCP %d)", proto, gerr, unix.IPPROTO_TCP, unix.IPPROTO_MPTCP)
	}
	c := dial(t, addrOf(s), testKey, 1)
	if mp, err := c.ctrl.c.(*net.TCPConn).MultipathTCP(); mp || err != nil {
		t.Fatalf("control connection uses MPTCP: %v %v", mp, err)
	}
}

// TestEpochExactInJSONDoubles: an epoch survives a round trip through a
// float64, as jq reads it from an info file.
func TestEpochExactInJSONDoubles(t *testing.T) {
	for i := 0; i < 10000; i++ {
		e := NewEpoch()
		if e == 0 || uint64(float64(e)) != e {
			t.Fatalf("epoch %d is not exact as a double", e)
		}
	}
}
