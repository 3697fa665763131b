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
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer"
)

// switchNet is a bridge in its own namespace with n+1 ports: the root
// namespace's (rootIP, where etcd listens) and one namespace per member.
type switchNet struct {
	rootIP string
	ns     []string // member namespaces
	ips    []string // their addresses
	links  []string // the switch-side end of each member's veth
	sw     string   // the switch namespace
	id     string   // in every name the test made
	boots  []int    // how many times each member's namespace was made
}

// ipCmd runs ip with args.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func makeSwitch(t *testing.T, n int) *switchNet {
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
	s := &switchNet{sw: "orbsw-" + id, id: id}
	ipCmd(t, "netns", "add", s.sw)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", s.sw).Run() })
	ipCmd(t, "-n", s.sw, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", s.sw, "link", "set", "br0", "up")
	root, rootSw := "orbr"+id, "orbs"+id
	ipCmd(t, "link", "add", root, "type", "veth", "peer", "name", rootSw)
	t.Cleanup(func() { exec.Command("ip", "link", "del", root).Run() })
	s.port(t, rootSw)
	// A /29 of 198.18.0.0/15: .1 the root's, .2 to .(n+1) the members'.
	block := claimBlock(t, 29, func(p netip.Prefix) { ipCmd(t, "addr", "add", hostAt(p, 1)+"/29", "dev", root) })
	s.rootIP = hostAt(block, 1)
	ipCmd(t, "link", "set", root, "up")
	for i := 0; i < n; i++ {
		s.ns, s.ips, s.links, s.boots = append(s.ns, ""), append(s.ips, hostAt(block, 2+i)), append(s.links, ""), append(s.boots, 0)
		s.boot(t, i)
	}
	return s
}

// port links a veth's switch end (swEnd, created in the root namespace
// and moved) to the bridge.
func (s *switchNet) port(t *testing.T, swEnd string) {
	t.Helper()
	ipCmd(t, "link", "set", swEnd, "netns", s.sw)
	ipCmd(t, "-n", s.sw, "link", "set", swEnd, "master", "br0")
	ipCmd(t, "-n", s.sw, "link", "set", swEnd, "up")
}

// boot makes member i's namespace, with its address on a new veth to the
// switch.
func (s *switchNet) boot(t *testing.T, i int) {
	t.Helper()
	g := s.boots[i]
	s.boots[i]++
	ns := fmt.Sprintf("orbm%d-%s", i, s.id)
	end, swEnd := fmt.Sprintf("orbm%d%s%d", i, s.id, g), fmt.Sprintf("orbp%d%s%d", i, s.id, g)
	ipCmd(t, "netns", "add", ns)
	if g == 0 {
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ipCmd(t, "link", "add", end, "type", "veth", "peer", "name", swEnd)
	s.port(t, swEnd)
	ipCmd(t, "link", "set", end, "netns", ns)
	ipCmd(t, "-n", ns, "addr", "add", s.ips[i]+"/29", "dev", end)
	ipCmd(t, "-n", ns, "link", "set", end, "up")
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	s.ns[i], s.links[i] = ns, swEnd
}

// reboot models member i's host crashing and coming back: its veth is
// deleted (whatever its dead sockets still had to send is lost, as with
// a host that lost power) and its namespace made afresh, same address.
// Its daemon must have exited.
func (s *switchNet) reboot(t *testing.T, i int) {
	t.Helper()
	ipCmd(t, "-n", s.sw, "link", "del", s.links[i])
	ipCmd(t, "netns", "del", s.ns[i])
	s.boot(t, i)
}

// setLink takes member i's switch port down or up (a partition).
func (s *switchNet) setLink(t *testing.T, i int, state string) {
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
	cli := etcdClient(t, etcd)
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of the cluster test")
	names := []string{"a", "b", "c"}
	daemons := map[string]*mount{}
	start := func(i int) *mount {
		conf := netnsMemberConfig(names[i], s.ips[i]+":7070", key, etcd)
		if names[i] == "b" {
			// No pings: b's connection to c learns of c's death only
			// from the cluster's view, or from a reply that never comes.
			conf = strings.Replace(conf, "[peer]\n", "[peer]\nkeepalive_interval = \"0s\"\n", 1)
		}
		m := startDaemon(t, daemonOpts{netns: s.ns[i], config: conf})
		m.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"1MiB","export":"read_write"}' > $M/memory/register`)
		daemons[names[i]] = m
		return m
	}
	for i := range names {
		start(i)
	}
	for _, n := range names {
		eventually(t, 5*time.Second, n+" sees a b c", func() bool {
			p, ok := clusterPeer(daemons[n], "c")
			return clusterPeers(daemons[n]) == "a b c" && ok && p.Addr == s.ips[2]+":7070" && len(p.Regions) == 1
		})
	}
	oldC, _ := clusterPeer(daemons["a"], "c")
	a, b := daemons["a"], daemons["b"]

	// b opens c's region by name now; the one segment serves every
	// transfer below, across c's partition, kills and restarts.
	b.ok(t, `echo '{"name":"buf","location":"cpu","bytes":4096}' > $M/memory/register
echo '{"name":"r","uri":"peer://c/kv","permission":"read_write"}' > $M/segments/open`)
	writeC := func(what string) {
		t.Helper()
		out := b.ok(t, "head -c 4096 /dev/urandom > $M/memory/buf/data\n"+
			fmt.Sprintf(batchScript, `{"op":"write","target":"r","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":4096}]}`)+
			fmt.Sprintf("cmp -n 4096 $M/memory/buf/data %s/memory/kv/data", daemons["c"].dir))
		if !strings.Contains(out, `"remote_effect": "applied"`) {
			t.Fatalf("%s: b's write through peer://c/kv:\n%s", what, out)
		}
	}
	writeC("c's first incarnation")
	status := func(m *mount) map[string]any {
		t.Helper()
		var st map[string]any
		if err := json.Unmarshal([]byte(m.ok(t, `cat $M/cluster/status`)), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}

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
	eventually(t, 5*time.Second, "c's own status counts its lost lease", func() bool {
		st := status(daemons["c"])
		return st["lease_lost"] == float64(1) && st["reregistered"] == float64(1) && st["registered"] == true
	})
	writeC("c back from its partition")

	// kill -9 c: its key goes within TTL + 1 s, every view drops it.
	daemons["c"].signal(t, syscall.SIGKILL)
	killed := time.Now()
	if _, err := daemons["c"].waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eventually(t, clusterTTL+time.Second, "c's key gone from etcd", func() bool {
		resp, err := cli.Get(ctx, clusterPrefix+"engines/c")
		return err == nil && len(resp.Kvs) == 0
	})
	for _, n := range []string{"a", "b"} {
		eventually(t, clusterTTL+time.Second-time.Since(killed), n+" drops c", func() bool { return clusterPeers(daemons[n]) == "a b" })
	}
	t.Logf("c's key gone, and a and b dropped the killed c, %s after the kill", time.Since(killed).Round(10*time.Millisecond))

	// c again: the others list its new epoch, and b's segment, opened
	// before the kill, reaches it without anyone restarting.
	start(2)
	var midC peerFile
	for _, n := range []string{"a", "b"} {
		eventually(t, 5*time.Second, n+" lists c's new epoch", func() bool {
			p, ok := clusterPeer(daemons[n], "c")
			midC = p
			return ok && p.Epoch != oldC.Epoch && len(p.Regions) == 1
		})
	}
	writeC("c restarted after a kill")

	// The old epoch's frames are refused: a handshake as c's first
	// incarnation (the shared key, its name and epoch) is turned away by
	// a, which saw it superseded; and a counts it.
	pkey, err := peer.LoadKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var epoch uint64
	fmt.Sscanf(oldC.Epoch, "%x", &epoch)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if c, err := peer.Dial(dctx, s.ips[0]+":7070", peer.Config{Name: "c", Epoch: epoch, Key: pkey, IOTimeout: 5 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a accepted a handshake from c's superseded epoch")
	} else if !strings.Contains(err.Error(), "superseded") {
		t.Fatalf("handshake from c's superseded epoch: %v", err)
	}
	if st := status(a); st["epochs_refused"] != float64(1) || st["restarted"] != float64(1) || st["left"] != float64(2) || st["members"] != float64(3) {
		t.Fatalf("a's /cluster/status: %v", st)
	}

	// A death the socket never tells: c's host crashes (cut off, its
	// daemon killed, its NIC gone with whatever FIN it still had to
	// send) and comes back at the same address. b's connection to the
	// dead epoch looks open; only the view's events drop it, so the next
	// transfer dials the new epoch instead of sending into a socket that
	// no longer exists on the other side.
	//
	// Beforehand, a session on a as c's current epoch (this process
	// holds the shared key): once a sees that epoch superseded, it
	// closes the session, and nothing more is served on it.
	fmt.Sscanf(midC.Epoch, "%x", &epoch)
	ghost, err := peer.Dial(dctx, s.ips[0]+":7070", peer.Config{Name: "c", Epoch: epoch, Key: pkey, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("a session as c's live epoch: %v", err)
	}
	defer ghost.Close()
	if err := ghost.Read(dctx, "kv", 0, make([]byte, 16)); err != nil {
		t.Fatalf("a read as c's live epoch: %v", err)
	}
	s.setLink(t, 2, "down")
	daemons["c"].signal(t, syscall.SIGKILL)
	if _, err := daemons["c"].waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, clusterTTL+time.Second, "b drops the crashed c", func() bool { return clusterPeers(b) == "a b" })
	s.reboot(t, 2)
	start(2)
	eventually(t, 5*time.Second, "b lists c's third epoch", func() bool {
		p, ok := clusterPeer(b, "c")
		return ok && p.Epoch != midC.Epoch && p.Epoch != oldC.Epoch && len(p.Regions) == 1
	})
	writeC("c restarted after a crash")
	eventually(t, 5*time.Second, "a closes the session of c's superseded epoch", func() bool {
		return ghost.Read(dctx, "kv", 0, make([]byte, 16)) != nil
	})
	st := status(b)
	if st["conns_dropped"].(float64) < 3 || st["restarted"] != float64(2) {
		t.Fatalf("b's /cluster/status: %v", st)
	}
	// The same counts in /metrics, in the exposition format.
	met := b.ok(t, `grep -E '^orbitefs_cluster_(members|restarted_total|left_total|lease_renewals_total|registered|conns_dropped_total) ' $M/metrics`)
	for _, want := range []string{"orbitefs_cluster_members 3\n", "orbitefs_cluster_restarted_total 2\n", "orbitefs_cluster_left_total 3\n", "orbitefs_cluster_registered 1\n",
		fmt.Sprintf("orbitefs_cluster_conns_dropped_total %v\n", st["conns_dropped"])} {
		if !strings.Contains(met, want) {
			t.Errorf("b's /metrics lacks %q:\n%s", want, met)
		}
	}
	if !strings.Contains(met, "orbitefs_cluster_lease_renewals_total ") || strings.Contains(met, "orbitefs_cluster_lease_renewals_total 0\n") {
		t.Errorf("b's /metrics counts no lease renewal:\n%s", met)
	}

	// A write by name from a's namespace with the CLI reaches the third c.
	client := dir + "/client.toml"
	if err := os.WriteFile(client, []byte(fmt.Sprintf("[peer]\nkey_file = %q\n[cluster]\netcd_endpoints = [%q]\nprefix = %q\n",
		key, etcd, clusterPrefix)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := daemons["c"].ok(t, fmt.Sprintf(`head -c 1048576 /dev/urandom > $T/src
ip netns exec %s $BIN peer write --config %s --addr peer://c/kv --file $T/src
cmp $T/src $M/memory/kv/data`, s.ns[0], client))
	if !strings.Contains(out, `"effect":"applied"`) || !strings.Contains(out, s.ips[2]+":7070") {
		t.Fatalf("peer write by name from a's namespace: %s", out)
	}
}
