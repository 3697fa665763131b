package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClusterDefaultsOff(t *testing.T) {
	d, err := Parse("")
	if err != nil {
		t.Fatal(err)
	}
	c := d.Cluster
	if c.Enabled() || c.Prefix != "/orbitefs/" || c.LeaseTTL.String() != "10s" || c.DialTimeout.String() != "5s" || c.Advertise != "" {
		t.Fatalf("cluster defaults %+v", c)
	}
}

func TestClusterValidation(t *testing.T) {
	const peer = "[peer]\nlisten = \"127.0.0.1:7070\"\nkey_file = \"/k\"\n"
	const on = "[cluster]\netcd_endpoints = [\"http://127.0.0.1:2379\"]\n"
	for _, tc := range []struct{ toml, want string }{
		{peer + "[cluster]\netcd_endpoints = [\"127.0.0.1:2379\"]\n", `cluster.etcd_endpoints: "127.0.0.1:2379" is not an etcd client URL`},
		{peer + "[cluster]\netcd_endpoints = [\"http://127.0.0.1\"]\n", `"http://127.0.0.1" has no port`},
		{peer + on + "prefix = \"orbitefs\"\n", `cluster.prefix "orbitefs": want a key prefix that begins and ends with '/'`},
		{peer + on + "lease_ttl = \"1500ms\"\n", `cluster.lease_ttl (1.5s) must be whole seconds in [1s, 1h]`},
		{peer + on + "lease_ttl = \"0s\"\n", `cluster.lease_ttl (0s) must be whole seconds`},
		{peer + on + "dial_timeout = \"0s\"\n", `cluster.dial_timeout (0s) must be in [1ms, 5m]`},
		{peer + on + "advertise = \"10.0.0.7\"\n", `cluster.advertise "10.0.0.7": want host:port`},
		{peer + on + "advertise = \"10.0.0.7:0\"\n", `cluster.advertise "10.0.0.7:0": port "0" is not a number in [1, 65535]`},
		{peer + on + "advertise = \"[::]:7070\"\n", `cluster.advertise "[::]:7070": :: is a wildcard`},
		{peer + on + "cert_file = \"/c\"\n", `cluster.cert_file ("/c") and cluster.key_file ("") go together`},
		{peer + on + "ca_file = \"/nonexistent/ca.pem\"\n", `cluster.ca_file "/nonexistent/ca.pem"`},
		{peer + on + "endpoints = []\n", `endpoints`},
	} {
		_, err := Parse(tc.toml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.toml, err, tc.want)
		}
	}
	// Off: nothing of [cluster] is checked against [peer]; its values still are.
	if _, err := Parse("[cluster]\nprefix = \"/x/\"\n"); err != nil {
		t.Fatalf("cluster off: %v", err)
	}
	if _, err := Parse("[cluster]\nlease_ttl = \"0s\"\n"); err == nil || !strings.Contains(err.Error(), "cluster.lease_ttl (0s)") {
		t.Fatalf("a bad lease_ttl with the cluster off: %v", err)
	}
	for _, tc := range []struct{ toml, want string }{
		{on, `cluster.etcd_endpoints is set but peer.listen is empty`},
		{"[peer]\nlisten = \"0.0.0.0:7070\"\nkey_file = \"/k\"\n" + on, `cluster.advertise is empty and peer.listen "0.0.0.0:7070" listens on every address`},
		{"[peer]\nlisten = \":7070\"\nkey_file = \"/k\"\n" + on, `peer.listen ":7070" listens on every address`},
	} {
		d, err := Parse(tc.toml) // a valid client config ...
		if err != nil {
			t.Fatalf("%s: %v", tc.toml, err)
		}
		if err := d.CheckMember(); err == nil || !strings.Contains(err.Error(), tc.want) { // ... but no member
			t.Errorf("%s: %v, want %q", tc.toml, err, tc.want)
		}
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Parse("[peer]\nlisten = \"0.0.0.0:7070\"\nkey_file = \"/k\"\n" + on + "advertise = \"10.0.0.7:7070\"\nlease_ttl = \"2s\"\nca_file = \"" + ca + "\"\n")
	if err != nil || !d.Cluster.Enabled() || d.Cluster.AdvertiseAddr("0.0.0.0:7070") != "10.0.0.7:7070" {
		t.Fatalf("a valid [cluster]: %v %+v", err, d)
	}
	if err := d.CheckMember(); err != nil {
		t.Fatalf("a member with advertise: %v", err)
	}
	if d, err = Parse(peer + on); err != nil || d.CheckMember() != nil || d.Cluster.AdvertiseAddr("127.0.0.1:7070") != "127.0.0.1:7070" {
		t.Fatalf("advertise from peer.listen: %v", err)
	}
}
