// etcd_test.go owns the cluster tests' real etcd: an embedded
// single-member server run by the test process, on 127.0.0.1 with ports
// the kernel picks, in the test's temporary directory. The daemons under
// test are separate processes that reach it over loopback.

package tests

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd starts the server on loopback; t.Cleanup stops it (and
// shows its log when the test failed).
func startEtcd(t *testing.T) (endpoint string) { return startEtcdOn(t, "127.0.0.1") }

// startEtcdOn starts it on ip (loopback, or an address of a veth the
// test made).
func startEtcdOn(t *testing.T, ip string) (endpoint string) {
	t.Helper()
	dir := t.TempDir()
	logf := filepath.Join(t.TempDir(), "etcd.log")
	client := url.URL{Scheme: "http", Host: ip + ":0"}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{logf}
	// Fast ticks: a short lease is honoured (etcd's minimum TTL is 1.5
	// election timeouts).
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd in %s: %v", dir, err)
	}
	t.Cleanup(func() {
		e.Close()
		if b, err := os.ReadFile(logf); t.Failed() && err == nil {
			t.Logf("etcd's log:\n%s", tail(string(b), 16<<10))
		}
	})
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready after 30s")
	}
	host := e.Clients[0].Addr().String()
	if !strings.HasPrefix(host, ip+":") {
		t.Fatalf("etcd listens on %s, not %s", host, ip)
	}
	return "http://" + host
}

// etcdClient is the test's own client, closed at the end of the test.
func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
