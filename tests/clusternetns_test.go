// clusternetns_test.go: the cluster test across network namespaces. Each
// daemon runs in its own namespace, linked by a veth pair to a bridge in
// a "switch" namespace the test made (its own empty firewall); the test
// process's etcd listens on one more veth, in the root namespace. All
// addresses are one /29 of 198.18.0.0/15; nothing else is reached. A
// daemon killed with SIGKILL leaves every other view within TTL + 1 s; a
// daemon cut off from the network (its link down) loses its lease, is
// dropped by the others, and registers again by itself when the link
// comes back; a restarted one is reached by name.

package tests

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// switchNet is a bridge in its own namespace with n+1 ports: the root
// namespace's (rootIP, where etcd listens) and one namespace per member.
type switchNet struct {
	rootIP string
	ns     []string // member namespaces
	ips    []string // their addresses
	links  []string // the switch-side end of each member's veth
	sw     string   // the switch namespace
}

func makeSwitch(t *testing.T, n int) switchNet {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "netns", "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		unavailable(t, "netns", "no ip command (iproute2)")
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		unavailable(t, "netns", "no nsenter (util-linux): the daemons enter their namespaces with it")
	}
	var b [3]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	// A /29 of 198.18.0.0/15: .1 the root's, .2 to .(n+1) the members'.
	block := int(b[0]&1)<<8 | int(b[1])
	base := fmt.Sprintf("198.%d.%d.", 18+block>>8, block&0xff)
	first := int(b[2]&0x1f) * 8
	ip := func(i int) string { return fmt.Sprintf("%s%d", base, first+i) }
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	s := switchNet{sw: "orbsw-" + id, rootIP: ip(1)}
	run("netns", "add", s.sw)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", s.sw).Run() })
	run("-n", s.sw, "link", "add", "br0", "type", "bridge")
	run("-n", s.sw, "link", "set", "br0", "up")
	// port links a veth's switch end (swEnd, created in the root
	// namespace and moved) to the bridge.
	port := func(swEnd string) {
		run("link", "set", swEnd, "netns", s.sw)
		run("-n", s.sw, "link", "set", swEnd, "master", "br0")
		run("-n", s.sw, "link", "set", swEnd, "up")
	}
	root, rootSw := "orbr"+id, "orbs"+id
	run("link", "add", root, "type", "veth", "peer", "name", rootSw)
	t.Cleanup(func() { exec.Command("ip", "link", "del", root).Run() })
	port(rootSw)
	run("addr", "add", s.rootIP+"/29", "dev", root)
	run("link", "set", root, "up")
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("orbm%d-%s", i, id)
		end, swEnd := fmt.Sprintf("orbm%d%s", i, id), fmt.Sprintf("orbp%d%s", i, id)
		run("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run("link", "add", end, "type", "veth", "peer", "name", swEnd)
		port(swEnd)
		run("link", "set", end, "netns", ns)
		run("-n", ns, "addr", "add", ip(2+i)+"/29", "dev", end)
		run("-n", ns, "link", "set", end, "up")
		run("-n", ns, "link", "set", "lo", "up")
		s.ns, s.ips, s.links = append(s.ns, ns), append(s.ips, ip(2+i)), append(s.links, swEnd)
	}
	return s
}

// setLink takes member i's switch port down or up (a partition).
func (s switchNet) setLink(t *testing.T, i int, state string) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", s.sw, "link", "set", s.links[i], state).CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s %s: %v\n%s", s.links[i], state, err, out)
	}
}

func netnsMemberConfig(name, listen, key, etcd string) string {
	return fmt.Sprintf(`[peer]
listen = %q
name = %q
key_file = %q
[cluster]
etcd_endpoints = [%q]
prefix = %q
lease_ttl = "%ds"
dial_timeout = "5s"
`, listen, name, key, etcd, clusterPrefix, int(clusterTTL/time.Second))
}

func TestClusterAcrossNetns(t *testing.T) {
	s := makeSwitch(t, 3)
	etcd := startEtcdOn(t, s.rootIP)
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of the cluster test")
	names := []string{"a", "b", "c"}
	daemons := map[string]*mount{}
	start := func(i int) *mount {
		return startDaemon(t, daemonOpts{netns: s.ns[i], config: netnsMemberConfig(names[i], s.ips[i]+":7070", key, etcd)})
	}
	for i, n := range names {
		daemons[n] = start(i)
		daemons[n].ok(t, `echo '{"name":"kv","location":"cpu","bytes":"1MiB","export":"read_write"}' > $M/memory/register`)
	}
	for _, n := range names {
		eventually(t, 5*time.Second, n+" sees a b c", func() bool {
			p, ok := clusterPeer(daemons[n], "c")
			return clusterPeers(daemons[n]) == "a b c" && ok && p.Addr == s.ips[2]+":7070" && len(p.Regions) == 1
		})
	}
	oldC, _ := clusterPeer(daemons["a"], "c")

	// Partition c (its switch port down): its lease lapses, the others
	// drop it; the link back, it registers again by itself (same epoch).
	s.setLink(t, 2, "down")
	cut := time.Now()
	for _, n := range []string{"a", "b"} {
		eventually(t, clusterTTL+time.Second-time.Since(cut), n+" drops the partitioned c", func() bool { return clusterPeers(daemons[n]) == "a b" })
	}
	t.Logf("a and b dropped the partitioned c %s after the cut", time.Since(cut).Round(10*time.Millisecond))
	s.setLink(t, 2, "up")
	healed := time.Now()
	for _, n := range []string{"a", "b"} {
		eventually(t, 10*time.Second, n+" sees c back with the same epoch", func() bool {
			p, ok := clusterPeer(daemons[n], "c")
			return ok && p.Epoch == oldC.Epoch && len(p.Regions) == 1
		})
	}
	t.Logf("c registered again %s after the link came back", time.Since(healed).Round(10*time.Millisecond))

	// kill -9 c: every view drops it within TTL + 1 s.
	daemons["c"].signal(t, syscall.SIGKILL)
	killed := time.Now()
	if _, err := daemons["c"].waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		eventually(t, clusterTTL+time.Second-time.Since(killed), n+" drops c", func() bool { return clusterPeers(daemons[n]) == "a b" })
	}
	t.Logf("a and b dropped the killed c %s after the kill", time.Since(killed).Round(10*time.Millisecond))

	// c again: the others list its new epoch, and a write by name from
	// a's namespace reaches it.
	c := start(2)
	c.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"1MiB","export":"read_write"}' > $M/memory/register`)
	for _, n := range []string{"a", "b"} {
		eventually(t, 5*time.Second, n+" lists c's new epoch", func() bool {
			p, ok := clusterPeer(daemons[n], "c")
			return ok && p.Epoch != oldC.Epoch && len(p.Regions) == 1
		})
	}
	client := dir + "/client.toml"
	if err := os.WriteFile(client, []byte(fmt.Sprintf("[peer]\nkey_file = %q\n[cluster]\netcd_endpoints = [%q]\nprefix = %q\n",
		key, etcd, clusterPrefix)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := c.ok(t, fmt.Sprintf(`head -c 1048576 /dev/urandom > $T/src
ip netns exec %s $BIN peer write --config %s --addr peer://c/kv --file $T/src
cmp $T/src $M/memory/kv/data`, s.ns[0], client))
	if !strings.Contains(out, `"effect":"applied"`) || !strings.Contains(out, s.ips[2]+":7070") {
		t.Fatalf("peer write by name from a's namespace: %s", out)
	}
}
