// clustername_test.go: peers addressed by their cluster name inside the
// daemon, through the mount: two real daemons in a real etcd (the
// embedded server), b opening a's exported region as `peer://a/kv` in
// segments/open and moving bytes with the batch API (checked with cmp
// through a's mount), and notifying `peer://a`. A name the cluster lists
// at an address where another engine answers (a stale record) sends
// nothing; once a left, its name is ENOENT at open and not_sent for a
// notification, both saying why.

package tests

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestClusterPeerByName(t *testing.T) {
	etcd := startEtcd(t)
	cli := etcdClient(t, etcd)
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of the cluster name test")
	a := startDaemon(t, daemonOpts{config: memberConfig("a", freeLoopbackPort(t), key, etcd)})
	b := startDaemon(t, daemonOpts{config: memberConfig("b", freeLoopbackPort(t), key, etcd)})
	a.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"4MiB","export":"read_write"}' > $M/memory/register`)
	eventually(t, 5*time.Second, "b lists a with its region", func() bool {
		p, ok := clusterPeer(b, "a")
		return ok && len(p.Regions) == 1 && p.Regions[0].Name == "kv"
	})
	pa, _ := clusterPeer(b, "a")

	// Bytes by name, both ways, over the configured lanes.
	b.ok(t, `echo '{"name":"buf","location":"cpu","bytes":"4MiB"}' > $M/memory/register
echo '{"name":"note","location":"cpu","bytes":4096}' > $M/memory/register
echo '{"name":"r","uri":"peer://a/kv","permission":"read_write"}' > $M/segments/open
echo '{"name":"m","uri":"mem://note","permission":"read_write"}' > $M/segments/open`)
	info := b.ok(t, `cat $M/segments/r/info`)
	for _, want := range []string{`"uri": "peer://a/kv"`, `"peer": "a"`, `"address": "` + pa.Addr + `"`, `"region": "kv"`, `"size": 4194304`} {
		if !strings.Contains(info, want) {
			t.Errorf("segment info lacks %s:\n%s", want, info)
		}
	}
	out := b.ok(t, "head -c 4194304 /dev/urandom > $M/memory/buf/data\n"+
		fmt.Sprintf(batchScript, `{"op":"write","target":"r","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"4MiB"}]}`)+
		fmt.Sprintf("cmp $M/memory/buf/data %s/memory/kv/data\nhead -c 4194304 /dev/zero > $M/memory/buf/data\n", a.dir)+
		fmt.Sprintf(batchScript, `{"op":"read","target":"r","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"4MiB"}]}`)+
		fmt.Sprintf("cmp $M/memory/buf/data %s/memory/kv/data", a.dir))
	if strings.Count(out, "completed") < 2 || !strings.Contains(out, `"remote_effect": "applied"`) {
		t.Fatalf("WRITE and READ by name:\n%s", out)
	}

	// A notification by name reaches a's inbox, from b.
	notify := func(to, msg string) string {
		return fmt.Sprintf(`{"op":"write","target":"m","requests":[{"memory":"buf","offset":0,"length":4096}],"notify":[{"peer":"peer://%s","message":"%s"}]}`, to, msg)
	}
	n, st := b.run1(t, notify("a", "kv by name"))
	if st != "completed" {
		t.Fatalf("notifying submission: %s", st)
	}
	if d := b.waitNotify(t, n, 0); d["state"] != "delivered" || d["peer"] != "peer://a" {
		t.Fatalf("notification by name: %v", d)
	}
	got := a.ok(t, `head -n 1 $M/peers/notifications`)
	if !strings.Contains(got, `"sender":"b"`) || !strings.Contains(got, `"message":"kv by name"`) {
		t.Fatalf("a's inbox: %s", got)
	}

	// A record naming "ghost" at a's address (ghost's epoch is not a's):
	// the open dials, meets a, and sends nothing; so does a notification.
	ctx := context.Background()
	ghost := fmt.Sprintf(`{"v":1,"name":"ghost","epoch":"00000000000000aa","addr":%q,"regions":[{"name":"kv","bytes":4194304,"location":"cpu","permission":"read_write"}]}`, pa.Addr)
	if _, err := cli.Put(ctx, clusterPrefix+"engines/ghost", ghost); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "b lists ghost", func() bool { _, ok := clusterPeer(b, "ghost"); return ok })
	r := b.run(t, `echo '{"name":"g","uri":"peer://ghost/kv","permission":"read_write"}' > $M/segments/open`)
	if r.code == 0 || !strings.Contains(r.stderr, "No such file or directory") {
		t.Fatalf("open of a stale name: %s; want ENOENT", r)
	}
	e := b.ok(t, `cat $M/error`)
	if !strings.Contains(e, `the engine at `+pa.Addr+` is "a" epoch `+pa.Epoch+`, but the cluster lists "ghost" epoch 00000000000000aa`) || !strings.Contains(e, "nothing was sent") {
		t.Fatalf("error of a stale name's open: %s", e)
	}
	// Nothing was posted: sent again until the submission's deadline.
	soon := func(doc string) string { return strings.Replace(doc, `"notify"`, `"timeout":"1s","notify"`, 1) }
	n, _ = b.run1(t, soon(notify("ghost", "to a ghost")))
	if d := b.waitNotify(t, n, 0); d["state"] != "not_sent" || !strings.Contains(fmt.Sprint(d["reason"]), "nothing was sent") ||
		!strings.Contains(fmt.Sprint(d["reason"]), "not sent again: the submission's deadline comes first") {
		t.Fatalf("notification to a stale name: %v", d)
	}
	if _, err := cli.Delete(ctx, clusterPrefix+"engines/ghost"); err != nil {
		t.Fatal(err)
	}

	// a leaves: its name is ENOENT at open and not_sent for a notification.
	a.signal(t, syscall.SIGTERM)
	eventually(t, 5*time.Second, "b drops a", func() bool { return clusterPeers(b) == "b" })
	r = b.run(t, `echo '{"name":"r2","uri":"peer://a/kv","permission":"read_write"}' > $M/segments/open`)
	if r.code == 0 || !strings.Contains(r.stderr, "No such file or directory") {
		t.Fatalf("open of a name that left: %s; want ENOENT", r)
	}
	if e := b.ok(t, `cat $M/error`); !strings.Contains(e, `no engine named "a" in the cluster: it left, or never joined`) {
		t.Fatalf("error of a left name's open: %s", e)
	}
	n, _ = b.run1(t, soon(notify("a", "too late")))
	if d := b.waitNotify(t, n, 0); d["state"] != "not_sent" || !strings.Contains(fmt.Sprint(d["reason"]), `peer://a: no engine of that name in the cluster`) {
		t.Fatalf("notification to a name that left: %v", d)
	}
	// The segment opened while a lived fails its next transfer, never
	// reaching anything.
	out = b.ok(t, fmt.Sprintf(batchScript, `{"op":"write","target":"r","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":4096}]}`))
	if strings.HasPrefix(out, "completed") || !strings.Contains(out, `"remote_effect": "none"`) {
		t.Fatalf("a write on the segment of a peer that left:\n%s", out)
	}
}
