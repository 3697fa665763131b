// cluster_test.go: three real daemons registered in a real etcd (the
// embedded server, run by this test process on loopback). One is killed
// with SIGKILL: its key is gone within the lease TTL + 1 s and every other
// daemon's /cluster/peers drops it; restarted on the same address, the
// others list its new epoch, a transfer by name (peer://NAME/REGION)
// reaches the new incarnation, and a Conn still holding the old epoch is
// refused with effect none.

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orbitefs/orbitefs/peer"
)

const (
	clusterPrefix = "/orbitefs-e2e/"
	clusterTTL    = 2 * time.Second
)

// freeLoopbackPort returns a port free on 127.0.0.1 now: a restarted
// daemon listens on the same address as its previous incarnation.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func memberConfig(name string, port int, key, etcd string) string {
	return fmt.Sprintf(`[peer]
listen = "127.0.0.1:%d"
name = %q
key_file = %q
[cluster]
etcd_endpoints = [%q]
prefix = %q
lease_ttl = "%ds"
dial_timeout = "5s"
`, port, name, key, etcd, clusterPrefix, int(clusterTTL/time.Second))
}

// clusterPeers lists m's /cluster/peers, read by this process through
// the mount.
func clusterPeers(m *mount) string {
	ents, err := os.ReadDir(filepath.Join(m.dir, "cluster", "peers"))
	if err != nil {
		return "error: " + err.Error()
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

type peerFile struct {
	Name    string `json:"name"`
	Epoch   string `json:"epoch"`
	Addr    string `json:"addr"`
	State   string `json:"state"`
	Self    bool   `json:"self"`
	Regions []struct {
		Name       string `json:"name"`
		Bytes      uint64 `json:"bytes"`
		Permission string `json:"permission"`
	} `json:"regions"`
}

// clusterPeer reads m's /cluster/peers/NAME; ok is false if it is absent.
func clusterPeer(m *mount, name string) (peerFile, bool) {
	b, err := os.ReadFile(filepath.Join(m.dir, "cluster", "peers", name))
	if err != nil {
		return peerFile{}, false
	}
	var p peerFile
	if json.Unmarshal(b, &p) != nil {
		return peerFile{}, false
	}
	return p, true
}

func TestClusterKillRestart(t *testing.T) {
	etcd := startEtcd(t)
	cli := etcdClient(t, etcd)
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of the cluster test")
	names := []string{"a", "b", "c"}
	ports := map[string]int{}
	daemons := map[string]*mount{}
	for _, n := range names {
		ports[n] = freeLoopbackPort(t)
		daemons[n] = startDaemon(t, daemonOpts{config: memberConfig(n, ports[n], key, etcd)})
		daemons[n].ok(t, `echo '{"name":"kv","location":"cpu","bytes":"1MiB","export":"read_write"}' > $M/memory/register`)
	}
	// Every view lists the three, each with its exported region (the
	// record was republished after the registration).
	for _, n := range names {
		m := daemons[n]
		eventually(t, 5*time.Second, n+" sees a b c with their regions", func() bool {
			if clusterPeers(m) != "a b c" {
				return false
			}
			for _, o := range names {
				p, ok := clusterPeer(m, o)
				if !ok || len(p.Regions) != 1 || p.Regions[0].Name != "kv" || p.Regions[0].Bytes != 1<<20 ||
					p.Addr != fmt.Sprintf("127.0.0.1:%d", ports[o]) || p.State != "live" || p.Self != (o == n) {
					return false
				}
			}
			return true
		})
	}
	// An exported region registered and removed on b shows in a's view
	// and goes again; a region without export never shows.
	regionsOf := func(p peerFile) string {
		var n []string
		for _, g := range p.Regions {
			n = append(n, g.Name+":"+g.Permission)
		}
		return strings.Join(n, " ")
	}
	daemons["b"].ok(t, `echo '{"name":"extra","location":"cpu","bytes":4096,"export":"read"}' > $M/memory/register
echo '{"name":"private","location":"cpu","bytes":4096}' > $M/memory/register`)
	eventually(t, 5*time.Second, "a sees b's extra region", func() bool {
		p, _ := clusterPeer(daemons["a"], "b")
		return regionsOf(p) == "extra:read kv:read_write"
	})
	daemons["b"].ok(t, `rmdir $M/memory/extra`)
	eventually(t, 5*time.Second, "a sees b's extra region gone", func() bool {
		p, _ := clusterPeer(daemons["a"], "b")
		return regionsOf(p) == "kv:read_write"
	})
	oldC, _ := clusterPeer(daemons["a"], "c")

	// A Conn to c's first incarnation, used once.
	pkey, err := peer.LoadKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := peer.Dial(ctx, oldC.Addr, peer.Config{Name: "tester", Key: pkey, Lanes: 1, IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Write(ctx, "kv", 0, []byte("first incarnation")); err != nil {
		t.Fatalf("write to c: %v", err)
	}

	// kill -9 c: its key goes within the TTL + 1 s, and every view drops it.
	daemons["c"].signal(t, syscall.SIGKILL)
	killed := time.Now()
	if _, err := daemons["c"].waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, clusterTTL+time.Second, "c's key gone from etcd", func() bool {
		resp, err := cli.Get(ctx, clusterPrefix+"engines/c")
		return err == nil && len(resp.Kvs) == 0
	})
	t.Logf("c's key gone %s after the kill (TTL %s)", time.Since(killed).Round(10*time.Millisecond), clusterTTL)
	for _, n := range []string{"a", "b"} {
		eventually(t, clusterTTL+time.Second-time.Since(killed), n+" drops c", func() bool { return clusterPeers(daemons[n]) == "a b" })
	}
	t.Logf("a and b dropped c %s after the kill", time.Since(killed).Round(10*time.Millisecond))

	// c again, on the same address: a new epoch that the others list.
	c := startDaemon(t, daemonOpts{config: memberConfig("c", ports["c"], key, etcd)})
	c.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"1MiB","export":"read_write"}' > $M/memory/register`)
	var newC peerFile
	for _, n := range []string{"a", "b"} {
		eventually(t, 5*time.Second, n+" lists c's new epoch with its region", func() bool {
			p, ok := clusterPeer(daemons[n], "c")
			newC = p
			return ok && p.Epoch != oldC.Epoch && len(p.Regions) == 1 && clusterPeers(daemons[n]) == "a b c"
		})
		st := daemons[n].readJSON(t, "stats")
		cl, _ := st["cluster"].(map[string]any)
		if cl["members"] != float64(3) || cl["restarted"].(float64) < 1 || cl["left"].(float64) < 1 || cl["registered"] != true {
			t.Errorf("%s's /stats cluster: %v", n, cl)
		}
	}
	if self, ok := clusterPeer(c, "c"); !ok || self.Epoch != newC.Epoch || !self.Self {
		t.Fatalf("c's own view of itself: %+v (others list epoch %s)", self, newC.Epoch)
	}

	// A transfer by name reaches the new incarnation.
	client := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(client, []byte(fmt.Sprintf("[peer]\nkey_file = %q\n[cluster]\netcd_endpoints = [%q]\nprefix = %q\n",
		key, etcd, clusterPrefix)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := c.ok(t, fmt.Sprintf(`head -c 1048576 /dev/urandom > $T/src
$BIN peer write --config %s --addr peer://c/kv --file $T/src
cmp $T/src $M/memory/kv/data`, client))
	if !strings.Contains(out, `"effect":"applied"`) || !strings.Contains(out, `"peer_name":"c"`) || !strings.Contains(out, newC.Addr) {
		t.Fatalf("peer write by name printed %s", out)
	}
	back := c.ok(t, fmt.Sprintf(`$BIN peer read --config %s --addr peer://c --region kv --file $T/back && cmp $T/src $T/back && echo same`, client))
	if !strings.Contains(back, "same") {
		t.Fatalf("peer read by name: %s", back)
	}

	// The Conn to the old epoch is refused, with effect none, and the new
	// incarnation's bytes are untouched.
	err = old.Write(ctx, "kv", 0, []byte("stale descriptor!"))
	if err == nil || peer.EffectOf(err) != peer.EffectNone || !strings.Contains(err.Error(), "new epoch") {
		t.Fatalf("write on the old epoch's Conn: %v (effect %v)", err, peer.EffectOf(err))
	}
	c.ok(t, `cmp $T/src $M/memory/kv/data`)

	// A record that lists an epoch other than the one answering at its
	// address (here c's key rewritten, on its own lease, to the old epoch)
	// sends nothing.
	stale := fmt.Sprintf(`{"v":1,"name":"c","epoch":%q,"addr":%q,"regions":[{"name":"kv","bytes":1048576,"location":"cpu","permission":"read_write"}]}`,
		oldC.Epoch, newC.Addr)
	cur, err := cli.Get(ctx, clusterPrefix+"engines/c")
	if err != nil || len(cur.Kvs) != 1 {
		t.Fatalf("c's key: %v %v", cur, err)
	}
	if _, err := cli.Put(ctx, clusterPrefix+"engines/c", stale, clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}
	r := c.run(t, fmt.Sprintf(`head -c 1048576 /dev/zero > $T/zeros
$BIN peer write --config %s --addr peer://c/kv --file $T/zeros`, client))
	if r.code != 1 || !strings.Contains(r.stderr, "but the cluster lists \"c\" epoch "+oldC.Epoch+"; nothing was sent (effect none)") {
		t.Fatalf("a write by name to a stale record: %s", r)
	}
	c.ok(t, `cmp $T/src $M/memory/kv/data`)
	if _, err := cli.Put(ctx, clusterPrefix+"engines/c", string(cur.Kvs[0].Value), clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}

	// Names resolve only to live engines.
	r = c.run(t, fmt.Sprintf(`$BIN peer write --config %s --addr peer://nobody/kv --file $T/src`, client))
	if r.code != 1 || !strings.Contains(r.stderr, `peer://nobody: no engine of that name is registered`) {
		t.Fatalf("a name nobody holds: %s", r)
	}
	if got := clusterPeers(daemons["a"]); !slices.Equal(strings.Fields(got), names) {
		t.Fatalf("a's view at the end: %s", got)
	}

	// SIGTERM: b leaves at once (its lease revoked), long before its TTL
	// would end (a renewal every TTL/3 keeps the key at least 2/3 TTL).
	daemons["b"].signal(t, syscall.SIGTERM)
	stopped := time.Now()
	eventually(t, clusterTTL/3, "a drops b at once after its SIGTERM", func() bool { return clusterPeers(daemons["a"]) == "a c" })
	t.Logf("a dropped b %s after its SIGTERM", time.Since(stopped).Round(time.Millisecond))
	if code, err := daemons["b"].waitExit(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("b after SIGTERM: exit %d, %v", code, err)
	}
}

// TestClusterNameHeld: a daemon restarted right after a kill -9 finds its
// name still held by its previous incarnation's lease; it waits for the
// key to expire and then joins with a new epoch. A second live daemon
// configured with a name in use waits at most lease_ttl + dial_timeout
// and refuses to start, naming the holder, before mounting.
func TestClusterNameHeld(t *testing.T) {
	etcd := startEtcd(t)
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of the cluster test")
	port := freeLoopbackPort(t)
	a := startDaemon(t, daemonOpts{config: memberConfig("a", port, key, etcd)})
	first, ok := clusterPeer(a, "a")
	if !ok {
		t.Fatalf("a does not list itself: %s", clusterPeers(a))
	}

	// A second live "a" (another port): refused, naming the holder.
	dup := startDaemon(t, daemonOpts{noWait: true, config: memberConfig("a", freeLoopbackPort(t), key, etcd)})
	code, err := dup.waitExit(clusterTTL + 5*time.Second + 5*time.Second)
	if err != nil || code != 1 || strings.Contains(dup.logText(), "msg=mounted") ||
		!strings.Contains(dup.logText(), fmt.Sprintf(`name "a" is held by epoch %s at 127.0.0.1:%d`, first.Epoch, port)) ||
		!strings.Contains(dup.logText(), "(cluster.lease_ttl + cluster.dial_timeout)") {
		t.Fatalf("a second live a: exit %d, %v:\n%s", code, err, dup.logText())
	}

	// kill -9 and start again at once: it waits out the old lease.
	a.signal(t, syscall.SIGKILL)
	killed := time.Now()
	if _, err := a.waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	b := startDaemon(t, daemonOpts{config: memberConfig("a", port, key, etcd)})
	took := time.Since(killed)
	if !strings.Contains(b.logText(), "name held by another epoch; waiting for its lease to expire") {
		t.Fatalf("the restarted daemon did not wait for its old lease:\n%s", b.logText())
	}
	again, ok := clusterPeer(b, "a")
	if !ok || again.Epoch == first.Epoch || !again.Self {
		t.Fatalf("after the restart: %+v (first epoch %s)", again, first.Epoch)
	}
	if took > clusterTTL+mountWait {
		t.Fatalf("the restart took %s", took)
	}
	t.Logf("restarted and registered %s after the kill (TTL %s)", took.Round(10*time.Millisecond), clusterTTL)
}

// TestClusterNeedsListen: a member needs a peer listener to advertise;
// the daemon refuses to start, naming both keys.
func TestClusterNeedsListen(t *testing.T) {
	for _, tc := range []struct{ conf, want string }{
		{"[cluster]\netcd_endpoints = [\"http://127.0.0.1:1\"]\n", "cluster.etcd_endpoints is set but peer.listen is empty"},
		{"[peer]\nlisten = \"0.0.0.0:0\"\nkey_file = \"/nonexistent\"\n[cluster]\netcd_endpoints = [\"http://127.0.0.1:1\"]\n",
			`cluster.advertise is empty and peer.listen "0.0.0.0:0" listens on every address`},
	} {
		m := startDaemon(t, daemonOpts{noWait: true, config: tc.conf})
		code, err := m.waitExit(10 * time.Second)
		if err != nil || code != 1 || !strings.Contains(m.logText(), tc.want) || strings.Contains(m.logText(), "msg=mounted") {
			t.Errorf("%s: exit %d, %v; want exit 1 before mounting, saying %q:\n%s", tc.conf, code, err, tc.want, m.logText())
		}
	}
}

// TestNoClusterNoDir: without [cluster] the mount has no /cluster and
// /stats no "cluster" object: a single daemon looks as it always did.
func TestNoClusterNoDir(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	out := m.ok(t, `ls $M; test ! -e $M/cluster && echo absent`)
	if !strings.Contains(out, "absent") {
		t.Fatalf("ls: %s", out)
	}
	if _, ok := m.readJSON(t, "stats")["cluster"]; ok {
		t.Fatal("/stats has a cluster object without [cluster]")
	}
}
