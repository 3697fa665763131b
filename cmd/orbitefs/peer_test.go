package main

import (
	"strings"
	"testing"
)

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
