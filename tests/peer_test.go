// peer_test.go: two real daemons listening for peers on loopback; bytes
// move between a local file and their exported regions with `orbitefs
// peer`, and between the two daemons, checked with cmp through each
// daemon's mount. Strangers and unexported regions get nothing.

package tests

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var peerAddrRE = peerAddrFor("127.0.0.1")

// peerAddrFor finds the address a daemon logs it listens on for peers.
func peerAddrFor(ip string) *regexp.Regexp {
	return regexp.MustCompile(`msg="peer listening".* addr=(` + regexp.QuoteMeta(ip) + `:\d+)`)
}

// startPeerDaemon starts a daemon listening for peers on a free loopback
// port and returns it with that address.
func startPeerDaemon(t *testing.T, name, keyFile string) (*mount, string) {
	t.Helper()
	m := startDaemon(t, daemonOpts{config: fmt.Sprintf("[peer]\nlisten = \"127.0.0.1:0\"\nname = %q\nkey_file = %q\n", name, keyFile)})
	sub := peerAddrRE.FindStringSubmatch(m.logText())
	if sub == nil {
		t.Fatalf("daemon %s did not log its peer address:\n%s", name, m.logText())
	}
	return m, sub[1]
}

func writeKey(t *testing.T, dir, name, key string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPeerTransfersBetweenDaemons(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, addrA := startPeerDaemon(t, "alpha", key)
	b, addrB := startPeerDaemon(t, "beta", key)
	client := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(client, []byte(fmt.Sprintf("[peer]\nkey_file = %q\nlanes = 4\n", key)), 0o644); err != nil {
		t.Fatal(err)
	}
	a.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"8MiB","export":"read_write"}' > $M/memory/register
echo '{"name":"ro","location":"cpu","bytes":4096,"export":"read"}' > $M/memory/register
echo '{"name":"private","location":"cpu","bytes":4096}' > $M/memory/register
grep -q '"export": "read_write"' $M/memory/kv/info`)
	b.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"8MiB","export":"write"}' > $M/memory/register`)

	// A file into A's region over 4 lanes (striped), checked through A's mount.
	out := a.ok(t, fmt.Sprintf(`head -c 8388608 /dev/urandom > $T/src
$BIN peer write --config %s --addr %s --region kv --file $T/src
cmp $T/src $M/memory/kv/data`, client, addrA))
	if !strings.Contains(out, `"effect":"applied"`) || !strings.Contains(out, `"bytes":8388608`) || !strings.Contains(out, `"peer_name":"alpha"`) {
		t.Fatalf("peer write printed %s", out)
	}
	// A's region back into a file, whole and a slice given in sizes as
	// docs/peers.md writes them; then A's bytes into B's region, over one
	// lane, checked through B's mount.
	tmp := a.ok(t, `echo $T`)
	b.ok(t, fmt.Sprintf(`$BIN peer read --config %[1]s --addr %[2]s --region kv --file %[4]s/back
cmp %[4]s/src %[4]s/back
$BIN peer read --config %[1]s --addr %[2]s --region kv --offset 1MiB --length 4MiB --file %[4]s/mid
cmp <(tail -c +1048577 %[4]s/src | head -c 4194304) %[4]s/mid
$BIN peer write --config %[1]s --lanes 1 --addr %[3]s --region kv --offset 0 --file %[4]s/back
cmp %[4]s/src $M/memory/kv/data`, client, addrA, addrB, strings.TrimSpace(tmp)))

	// Only exported regions, with their permission.
	regs := a.ok(t, fmt.Sprintf(`$BIN peer regions --config %s --addr %s`, client, addrA))
	if !strings.Contains(regs, `"name":"kv"`) || !strings.Contains(regs, `"export":"read"`) || strings.Contains(regs, "private") {
		t.Fatalf("peer regions: %s", regs)
	}
	r := a.run(t, fmt.Sprintf(`printf 'hello' > $T/small
$BIN peer write --config %[1]s --addr %[2]s --region ro --file $T/small; echo "exit $?"
$BIN peer write --config %[1]s --addr %[2]s --region private --file $T/small; echo "exit $?"
$BIN peer read --config %[1]s --addr %[3]s --region kv --length 5 --file $T/x; echo "exit $?"
cmp <(head -c 4096 /dev/zero) $M/memory/ro/data && cmp <(head -c 4096 /dev/zero) $M/memory/private/data && echo untouched`, client, addrA, addrB))
	for _, want := range []string{`region "ro" is exported read, not write`, `"effect":"none"`,
		`exports no region "private"`, `region "kv" is exported write, not read`, "untouched"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("refusals: no %q in\n%s", want, r)
		}
	}
	if strings.Count(r.stdout, "exit 1") != 3 {
		t.Errorf("refusals did not each exit 1:\n%s", r)
	}

	// A stranger with another key reaches nothing, and A logs why.
	other := writeKey(t, dir, "other.key", "another key, not the shared one")
	stranger := filepath.Join(dir, "stranger.toml")
	os.WriteFile(stranger, []byte(fmt.Sprintf("[peer]\nkey_file = %q\n", other)), 0o644)
	r = a.run(t, fmt.Sprintf(`$BIN peer write --config %s --addr %s --region kv --file /dev/null`, stranger, addrA))
	if r.code != 1 || !strings.Contains(r.stderr, "did not prove the shared key") {
		t.Fatalf("a stranger's write: %s", r)
	}
	eventually(t, mountWait, "A logs the refused stranger", func() bool { return strings.Contains(a.logText(), `msg="peer refused"`) })
	a.ok(t, `cmp $T/src $M/memory/kv/data`)
	// The listener's totals show the refusal, which no connection entry can.
	if st := a.ok(t, `grep -A14 '"peer_listener"' $M/stats`); !regexp.MustCompile(`"refused": [1-9]`).MatchString(st) {
		t.Errorf("/stats peer_listener after a stranger: %s", st)
	}
	if m := a.ok(t, `grep '^orbitefs_peer_listener_refused_total' $M/metrics`); !regexp.MustCompile(`total [1-9]`).MatchString(m) {
		t.Errorf("/metrics after a stranger: %s", m)
	}
}

// A daemon told to listen for peers refuses to start, before mounting,
// without a usable key: no key_file, one others can read, one too short,
// an address already taken. It never serves peers unauthenticated.
func TestPeerListenerNeedsKey(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open.key")
	os.WriteFile(open, []byte("a key others can read, long enough"), 0o644)
	short := writeKey(t, dir, "short.key", "short")
	good := writeKey(t, dir, "good.key", "a good key that is long enough")
	_, taken := startPeerDaemon(t, "first", good)
	for _, tc := range []struct{ conf, want string }{
		{"listen = \"127.0.0.1:0\"\n", `peer.key_file is empty but peer.listen is "127.0.0.1:0"`},
		{fmt.Sprintf("listen = \"127.0.0.1:0\"\nkey_file = %q\n", open), "lets others read the key; chmod 600 it"},
		{fmt.Sprintf("listen = \"127.0.0.1:0\"\nkey_file = %q\n", short), "5 bytes of key, want at least 16"},
		{fmt.Sprintf("listen = %q\nkey_file = %q\n", taken, good), "address already in use"},
	} {
		m := startDaemon(t, daemonOpts{noWait: true, config: "[peer]\n" + tc.conf})
		code, err := m.waitExit(10 * time.Second)
		if err != nil || code != 1 || !strings.Contains(m.logText(), tc.want) || strings.Contains(m.logText(), "msg=mounted") {
			t.Errorf("%s: exit %d, %v; want exit 1 before mounting, saying %q:\n%s", tc.conf, code, err, tc.want, m.logText())
		}
	}
}

// relay forwards TCP connections to target and counts the bytes sent
// toward it; once limit bytes have gone through, it forwards no more and
// calls cut (which kills the receiving daemon). A connection ends on both
// sides as soon as either side ends, as it would without the relay.
type relay struct {
	ln       net.Listener
	target   string
	limit    int64
	cut      func()
	mu       sync.Mutex
	sent     int64
	accepted int
	once     sync.Once
}

func startRelay(t *testing.T, target string, limit int64, cut func()) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, limit: limit, cut: cut}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.accepted++
			r.mu.Unlock()
			go r.serve(c)
		}
	}()
	return r
}

func (r *relay) serve(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(c, up); done <- struct{}{} }()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			r.mu.Lock()
			room := r.limit - r.sent
			if int64(n) > room {
				n = int(max(room, 0))
			}
			r.sent += int64(n)
			over := r.sent >= r.limit
			r.mu.Unlock()
			if n > 0 {
				if _, werr := up.Write(buf[:n]); werr != nil {
					break
				}
			}
			if over {
				r.once.Do(r.cut)
				io.Copy(io.Discard, c) // hold the rest: it never arrives
				break
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}

// kill -9 of the receiving daemon in the middle of a WRITE frame: the
// client ends with remote effect unknown, exit 1, no hang and no second
// attempt.
func TestPeerKilledMidWriteIsUnknown(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, addrA := startPeerDaemon(t, "alpha", key)
	client := filepath.Join(dir, "client.toml")
	os.WriteFile(client, []byte(fmt.Sprintf("[peer]\nkey_file = %q\nlanes = 1\n", key)), 0o644)
	a.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"64MiB","export":"write"}' > $M/memory/register
head -c 67108864 /dev/urandom > $T/src`)
	// 16 MiB into the one 64 MiB frame, the daemon dies.
	rl := startRelay(t, addrA, 16<<20, func() { a.signal(t, syscall.SIGKILL) })
	r := a.run(t, fmt.Sprintf(`$BIN peer write --config %s --addr %s --region kv --file $T/src`, client, rl.ln.Addr()))
	if r.code != 1 || !strings.Contains(r.stdout, `"effect":"unknown"`) || !strings.Contains(r.stderr, "remote effect unknown") {
		t.Fatalf("write to a daemon killed mid-frame: %s", r)
	}
	if code, err := a.waitExit(5 * time.Second); err != nil || code != -1 {
		t.Fatalf("the daemon was not killed: exit %d, %v", code, err)
	}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.accepted != 2 || rl.sent != 16<<20 {
		t.Fatalf("relay: %d connections (want control and one lane: no retry), %d bytes", rl.accepted, rl.sent)
	}
}
