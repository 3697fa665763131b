package discovery

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestLookup: a client resolving a name once reads the live record, the
// new epoch after a restart, nothing once the engine left, and an error
// (not a record) for a key that does not decode.
func TestLookup(t *testing.T) {
	s := startEtcd(t)
	cli := s.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, ok, err := Lookup(ctx, cli, prefix, "a"); ok || err != nil {
		t.Fatalf("lookup before registering: ok %v, %v", ok, err)
	}
	a := startEngine(t, s, rec("a", 0xa1, Region{Name: "kv", Bytes: 4096, Location: "cpu", Permission: "read_write"}))
	got, ok, err := Lookup(ctx, cli, prefix, "a")
	if err != nil || !ok || got.Epoch != 0xa1 || got.Addr != "127.0.0.1:7161" || len(got.Regions) != 1 {
		t.Fatalf("lookup of a: %+v ok %v %v", got, ok, err)
	}
	a.reg.Close()
	if _, ok, err := Lookup(ctx, cli, prefix, "a"); ok || err != nil {
		t.Fatalf("lookup after close: ok %v, %v", ok, err)
	}
	startEngine(t, s, rec("a", 0xa2))
	if got, ok, err := Lookup(ctx, cli, prefix, "a"); !ok || err != nil || got.Epoch != 0xa2 {
		t.Fatalf("lookup after restart: %+v ok %v %v", got, ok, err)
	}
	if _, err := cli.Put(ctx, prefix+"engines/bad", `{"v":1,"name":"other"}`); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := Lookup(ctx, cli, prefix, "bad"); ok || err == nil || !strings.Contains(err.Error(), `name "other" under the key of "bad"`) {
		t.Fatalf("lookup of an undecodable record: ok %v, %v", ok, err)
	}
	if _, _, err := Lookup(ctx, cli, prefix, "a/b"); err == nil {
		t.Fatal("a name with '/' was looked up")
	}
}
