// etcd_test.go owns the tests' real etcd: an embedded single-member
// server in the test's temporary directory, on loopback only, that can be
// stopped and started again on the same directory and client port.

package discovery

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

type etcdServer struct {
	t      *testing.T
	dir    string
	log    string  // etcd's log file
	client url.URL // port 0 until the first start picked one
	e      *embed.Etcd
}

// startEtcd starts a server on 127.0.0.1 with kernel-chosen ports (embed
// listens on exactly the URLs given, so port 0 picks a free one; the
// listener's address tells which). The peer URL stays port 0 on every
// start: a single member never dials its peer port, and the member's
// stored peer URL must match what it is started with.
func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	s := &etcdServer{t: t, dir: t.TempDir(), log: filepath.Join(t.TempDir(), "etcd.log"), client: url.URL{Scheme: "http", Host: "127.0.0.1:0"}}
	s.start()
	t.Cleanup(func() {
		s.stop()
		// etcd logs its own shutdown as errors: show its log only when
		// the test failed.
		if b, err := os.ReadFile(s.log); t.Failed() && err == nil {
			t.Logf("etcd's log:\n%s", b)
		}
	})
	return s
}

func (s *etcdServer) start() {
	s.t.Helper()
	if s.e != nil {
		s.t.Fatal("etcd already running")
	}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.client}
	cfg.AdvertiseClientUrls = []url.URL{s.client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{s.log}
	// Fast ticks: a 1s lease is honoured (etcd's minimum TTL is 1.5
	// election timeouts) and a restarted member leads at once.
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		s.t.Fatalf("start etcd in %s: %v", s.dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		s.t.Fatal("etcd not ready after 30s")
	}
	s.e = e
	s.client.Host = e.Clients[0].Addr().String()
	if !strings.HasPrefix(s.client.Host, "127.0.0.1:") {
		s.t.Fatalf("etcd listens on %s, not loopback", s.client.Host)
	}
}

func (s *etcdServer) stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

func (s *etcdServer) endpoint() string { return s.client.String() }

// newClient returns a client closed at the end of the test (closing it
// earlier is fine).
func (s *etcdServer) newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	// gRPC's reconnect backoff grows to seconds while etcd is down; capped
	// here so a client finds a restarted etcd long before the TTL of the
	// leases that etcd restored.
	reconnect := grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
		MinConnectTimeout: time.Second,
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.endpoint()}, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{reconnect}})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// noLeak fails the test if a goroutine running this package's code is
// still alive once the test's cleanups ran (register it before anything
// it checks, so that its cleanup runs after theirs).
func noLeak(t *testing.T) {
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			stacks := ours()
			if len(stacks) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%d goroutines of discovery outlived Close:\n%s", len(stacks), strings.Join(stacks, "\n\n"))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// ours lists the goroutines running a Registrar's or a Watcher's code.
func ours() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "discovery.(*Registrar).run") || strings.Contains(g, "discovery.(*Watcher).run") {
			out = append(out, g)
		}
	}
	return out
}

// eventually polls cond every 10ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// rec is a valid record for name at epoch.
func rec(name string, epoch Epoch, regions ...Region) Record {
	return Record{Name: name, Epoch: epoch, Addr: fmt.Sprintf("127.0.0.1:%d", 7000+int(epoch%1000)), Regions: regions}
}

// names lists the names in a view.
func names(rs []Record) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name+"@"+r.Epoch.String())
	}
	return strings.Join(out, ",")
}

// nextEvent waits up to 10s for a subscription's next event.
func nextEvent(t *testing.T, s *Subscription) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	return ev
}
