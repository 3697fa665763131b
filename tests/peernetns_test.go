// peernetns_test.go: a daemon listening on one end of a veth pair, a
// client in a network namespace the test made on the other end
// (198.18.0.0/15 addresses, nothing else reached); only that namespace's
// address is an allowed network.

package tests

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// vethPair is a namespace and a veth pair: host side hostIP, namespace
// side nsIP, a /30 of 198.18.0.0/15.
type vethPair struct {
	ns, hostIP, nsIP string
	hostIf, nsIf     string // the pair's ends: here, and in ns
}

func makeVethPair(t *testing.T) vethPair {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "netns", "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		unavailable(t, "netns", "no ip command (iproute2)")
	}
	var b [3]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	v := vethPair{ns: "orbpeer-" + id}
	host, peer := "orbh"+id, "orbn"+id
	v.hostIf, v.nsIf = host, peer
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", v.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", v.ns).Run() })
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() })
	run("link", "set", peer, "netns", v.ns)
	p := claimBlock(t, 30, func(p netip.Prefix) { run("addr", "add", hostAt(p, 1)+"/30", "dev", host) })
	v.hostIP, v.nsIP = hostAt(p, 1), hostAt(p, 2)
	run("link", "set", host, "up")
	run("netns", "exec", v.ns, "ip", "addr", "add", v.nsIP+"/30", "dev", peer)
	run("netns", "exec", v.ns, "ip", "link", "set", peer, "up")
	run("netns", "exec", v.ns, "ip", "link", "set", "lo", "up")
	return v
}

func TestPeerAcrossNetns(t *testing.T) {
	v := makeVethPair(t)
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a := startDaemon(t, daemonOpts{config: fmt.Sprintf("[peer]\nlisten = %q\nkey_file = %q\nallowed_networks = [%q]\n",
		v.hostIP+":0", key, v.nsIP+"/32")})
	sub := peerAddrFor(v.hostIP).FindStringSubmatch(a.logText())
	if sub == nil {
		t.Fatalf("no peer address in the log:\n%s", a.logText())
	}
	addr := sub[1]
	client := filepath.Join(dir, "client.toml")
	os.WriteFile(client, []byte(fmt.Sprintf("[peer]\nkey_file = %q\nlanes = 4\npayload_checksum = true\n", key)), 0o644)
	out := a.ok(t, fmt.Sprintf(`echo '{"name":"kv","location":"cpu","bytes":"16MiB","export":"read_write"}' > $M/memory/register
head -c 16777216 /dev/urandom > $T/src
ip netns exec %[1]s $BIN peer write --config %[2]s --addr %[3]s --region kv --file $T/src
cmp $T/src $M/memory/kv/data
ip netns exec %[1]s $BIN peer read --config %[2]s --addr %[3]s --region kv --file $T/back
cmp $T/src $T/back`, v.ns, client, addr))
	if strings.Count(out, `"bytes":16777216`) != 2 {
		t.Fatalf("transfers printed %s", out)
	}
	// From the host's own address (not the allowed one) the same key gets nothing.
	r := a.run(t, fmt.Sprintf(`$BIN peer regions --config %s --addr %s`, client, addr))
	if r.code != 1 {
		t.Fatalf("a client outside the allowed networks: %s", r)
	}
	eventually(t, mountWait, "the refusal is logged", func() bool {
		return strings.Contains(a.logText(), "in none of the allowed networks")
	})
}
