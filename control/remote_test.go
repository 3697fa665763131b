package control

import (
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

func TestParseRemoteURI(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		ok   bool
		want RemoteURI
		err  string // "" when valid
	}{
		{"tcp://10.0.0.5:7070/kv", true, RemoteURI{Scheme: "tcp", Addr: "10.0.0.5:7070", Region: "kv"}, ""},
		{"hp_tcp://[::1]:7070/kv", true, RemoteURI{Scheme: "hp_tcp", Addr: "[::1]:7070", Region: "kv"}, ""},
		{"tcp://host.example:1/a.b-c", true, RemoteURI{Scheme: "tcp", Addr: "host.example:1", Region: "a.b-c"}, ""},
		{"file:///tmp/x", false, RemoteURI{}, ""},
		{"mem://kv", false, RemoteURI{}, ""},
		{"tcp://10.0.0.5:7070", true, RemoteURI{}, "no region: want tcp://HOST:PORT/REGION"},
		{"tcp://10.0.0.5:7070/", true, RemoteURI{}, "no region"},
		{"tcp://10.0.0.5/kv", true, RemoteURI{}, `address "10.0.0.5": want HOST:PORT`},
		{"tcp://:7070/kv", true, RemoteURI{}, "want HOST:PORT"},
		{"hp_tcp://h:0/kv", true, RemoteURI{}, `port "0": want 1 to 65535`},
		{"tcp://h:70000/kv", true, RemoteURI{}, `port "70000": want 1 to 65535`},
		{"tcp://h:1/a/b", true, RemoteURI{}, "region name"},
		{"peer://decode-3/kv", true, RemoteURI{Scheme: "peer", Name: "decode-3", Region: "kv"}, ""},
		{"peer://decode-3", true, RemoteURI{}, "no region: want peer://NAME/REGION"},
		{"peer:///kv", true, RemoteURI{}, "engine name of 0 bytes"},
		{"peer://a b/kv", true, RemoteURI{}, `' ' is not allowed`},
		{"peer://" + strings.Repeat("n", 256) + "/kv", true, RemoteURI{}, "engine name of 256 bytes: want 1 to 255"},
		{"peer://a/b/c", true, RemoteURI{}, "region name"},
	} {
		u, ok, err := ParseRemoteURI(tc.uri)
		if ok != tc.ok {
			t.Errorf("%s: ok %v", tc.uri, ok)
			continue
		}
		if tc.err == "" {
			if err != nil || (ok && u != tc.want) {
				t.Errorf("%s: %+v, %v; want %+v", tc.uri, u, err, tc.want)
			}
			continue
		}
		if err == nil || engine.KindOf(err) != engine.KindInvalid || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v; want invalid argument saying %q", tc.uri, err, tc.err)
		}
	}
}
