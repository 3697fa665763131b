package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestPeerArgs: `orbitefs peer` takes sizes in the one grammar
// (docs/peers.md reads with --length 4MiB), -h is help, and a bad size
// names the flag.
func TestPeerArgs(t *testing.T) {
	a, err := parsePeerArgs("read", strings.Fields("--addr 10.0.0.5:7070 --region kv --offset 1MiB --length 4MiB --file back.bin"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if a.offset != 1<<20 || a.length != 4<<20 || a.addr != "10.0.0.5:7070" || a.region != "kv" || a.file != "back.bin" {
		t.Fatalf("parsed %+v", a)
	}
	if a, err = parsePeerArgs("read", strings.Fields("--addr h:1 --region kv --length 4096 --file f"), io.Discard); err != nil || a.length != 4096 || a.offset != 0 {
		t.Fatalf("plain bytes: %+v, %v", a, err)
	}
	if _, err := parsePeerArgs("read", []string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	for _, bad := range []struct{ args, msg string }{
		{"--addr h:1 --region kv --length 4m --file f", "--length"},
		{"--addr h:1 --region kv --offset -1 --file f", "--offset"},
		{"--addr h:1 --file f", "required"},
		{"--addr h:1 --region kv --file f extra", `unexpected argument "extra"`},
	} {
		if _, err := parsePeerArgs("write", strings.Fields(bad.args), io.Discard); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%q: %v, want an error naming %s", bad.args, err, bad.msg)
		}
	}
	if rc := run([]string{"peer", "--help"}); rc != 0 {
		t.Errorf("orbitefs peer --help exits %d, want 0 (as bench --help)", rc)
	}
	if rc := run([]string{"peer", "read", "-h"}); rc != 0 {
		t.Errorf("orbitefs peer read -h exits %d, want 0", rc)
	}
}

func TestParsePeerTarget(t *testing.T) {
	for _, tc := range []struct {
		addr, region     string
		name, wantRegion string
		err              string
	}{
		{addr: "10.0.0.7:7070", region: "kv", wantRegion: "kv"},
		{addr: "peer://c/kv", name: "c", wantRegion: "kv"},
		{addr: "peer://c", region: "kv", name: "c", wantRegion: "kv"},
		{addr: "peer://c/kv", region: "kv", name: "c", wantRegion: "kv"},
		{addr: "peer://c", name: "c"},
		{addr: "peer://c/kv", region: "other", err: `names region "kv" but --region is "other"`},
		{addr: "peer:///kv", err: "want peer://NAME or peer://NAME/REGION"},
		{addr: "peer://c/kv/x", err: "want peer://NAME or peer://NAME/REGION"},
	} {
		got, err := parsePeerTarget(tc.addr, tc.region)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %q: %v, want %q", tc.addr, tc.region, err, tc.err)
			}
			continue
		}
		if err != nil || got.name != tc.name || got.region != tc.wantRegion {
			t.Errorf("%q %q: %+v %v", tc.addr, tc.region, got, err)
		}
	}
}
