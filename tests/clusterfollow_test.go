// clusterfollow_test.go: a peer://NAME segment follows its engine to a
// new address. Two real daemons in a real etcd (the embedded server): a
// opens b's region as peer://b/kv; b stops and comes back under the same
// name on another port (a new epoch); the segment, never opened again,
// fails while the cluster lists no b (nothing sent) and then writes into
// the new b, its info showing the new address and epoch.

package tests

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestClusterPeerSegmentFollowsNewAddress(t *testing.T) {
	etcd := startEtcd(t)
	key := writeKey(t, t.TempDir(), "peer.key", "the shared key of the cluster follow test")
	a := startDaemon(t, daemonOpts{config: memberConfig("a", freeLoopbackPort(t), key, etcd)})
	startB := func(port int) *mount {
		b := startDaemon(t, daemonOpts{config: memberConfig("b", port, key, etcd)})
		b.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"4MiB","export":"read_write"}' > $M/memory/register`)
		return b
	}
	port := freeLoopbackPort(t)
	b := startB(port)
	eventually(t, 5*time.Second, "a lists b with its region", func() bool {
		p, ok := clusterPeer(a, "b")
		return ok && len(p.Regions) == 1
	})
	old, _ := clusterPeer(a, "b")
	a.ok(t, `echo '{"name":"buf","location":"cpu","bytes":"4MiB"}' > $M/memory/register
echo '{"name":"r","uri":"peer://b/kv","permission":"read_write"}' > $M/segments/open`)
	write := fmt.Sprintf("head -c 4194304 /dev/urandom > $M/memory/buf/data\n"+batchScript,
		`{"op":"write","target":"r","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"4MiB"}]}`)
	out := a.ok(t, write)
	if !strings.HasPrefix(out, "completed") || !strings.Contains(out, `"remote_effect": "applied"`) {
		t.Fatalf("WRITE by name:\n%s", out)
	}
	a.ok(t, fmt.Sprintf(`cmp $M/memory/buf/data %s/memory/kv/data`, b.dir))

	// b leaves (its key is revoked at once): while the cluster lists no
	// b, the segment's next WRITE sends nothing and says why.
	b.signal(t, syscall.SIGTERM)
	if _, err := b.waitExit(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a drops b", func() bool { _, ok := clusterPeer(a, "b"); return !ok })
	out = a.ok(t, write)
	if strings.HasPrefix(out, "completed") || !strings.Contains(out, `"remote_effect": "none"`) || !strings.Contains(out, `peer://b: no engine of that name in the cluster`) {
		t.Fatalf("WRITE while b is not in the cluster:\n%s", out)
	}

	// b is back under its name on another port: the same segment follows.
	port2 := freeLoopbackPort(t)
	for port2 == port {
		port2 = freeLoopbackPort(t)
	}
	b2 := startB(port2)
	eventually(t, 5*time.Second, "a lists b's new epoch", func() bool {
		p, ok := clusterPeer(a, "b")
		return ok && p.Epoch != old.Epoch
	})
	now, _ := clusterPeer(a, "b")
	if now.Addr != fmt.Sprintf("127.0.0.1:%d", port2) || old.Addr != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Fatalf("the cluster lists b at %s, then at %s; want ports %d, then %d", old.Addr, now.Addr, port, port2)
	}
	out = a.ok(t, write)
	if !strings.HasPrefix(out, "completed") || !strings.Contains(out, `"remote_effect": "applied"`) {
		t.Fatalf("WRITE after b came back at %s (was %s):\n%s", now.Addr, old.Addr, out)
	}
	a.ok(t, fmt.Sprintf(`cmp $M/memory/buf/data %s/memory/kv/data`, b2.dir))
	info := a.ok(t, `cat $M/segments/r/info`)
	m := regexp.MustCompile(`"epoch": (\d+)`).FindStringSubmatch(info)
	var epoch uint64
	if m != nil {
		fmt.Sscan(m[1], &epoch)
	}
	if !strings.Contains(info, `"address": "`+now.Addr+`"`) || fmt.Sprintf("%016x", epoch) != now.Epoch {
		t.Fatalf("segment info after the move, want address %s and epoch %s:\n%s", now.Addr, now.Epoch, info)
	}
	if !regexp.MustCompile(`msg="peer redialed".* peer=` + regexp.QuoteMeta(now.Addr) + ` old_peer=` + regexp.QuoteMeta(old.Addr)).MatchString(a.logText()) {
		t.Fatalf("no redial from %s to %s logged:\n%s", old.Addr, now.Addr, a.logText())
	}
}
