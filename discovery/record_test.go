package discovery

import (
	"errors"
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

func TestRecordValidate(t *testing.T) {
	good := func() Record {
		return Record{Name: "decode-3", Epoch: 0xabc, Addr: "10.0.0.7:7070", Regions: []Region{
			{Name: "kv", Bytes: 1 << 20, Location: "cpu", Permission: "read_write"},
			{Name: "w", Bytes: 4096, Location: "cuda:1", Permission: "read"},
		}}
	}
	cases := []struct {
		name string
		edit func(*Record)
		want string // "" means valid
	}{
		{"valid", func(*Record) {}, ""},
		{"no regions", func(r *Record) { r.Regions = nil }, ""},
		{"ipv6", func(r *Record) { r.Addr = "[fd00::7]:7070" }, ""},
		{"empty name", func(r *Record) { r.Name = "" }, "name is empty"},
		{"slash", func(r *Record) { r.Name = "a/b" }, `name "a/b": '/' is not allowed`},
		{"space", func(r *Record) { r.Name = "a b" }, `' ' is not allowed`},
		{"long name", func(r *Record) { r.Name = strings.Repeat("x", 256) }, "256 bytes, at most 255"},
		{"epoch 0", func(r *Record) { r.Epoch = 0 }, "epoch 0"},
		{"no port", func(r *Record) { r.Addr = "10.0.0.7" }, `addr "10.0.0.7": want host:port`},
		{"no host", func(r *Record) { r.Addr = ":7070" }, `addr ":7070": want host:port`},
		{"port 0", func(r *Record) { r.Addr = "h:0" }, `port "0" is not a number in [1, 65535]`},
		{"version", func(r *Record) { r.Version = 2 }, "version 2: this engine reads version 1"},
		{"zero bytes", func(r *Record) { r.Regions[1].Bytes = 0 }, `regions[1]: "w": bytes 0`},
		{"location", func(r *Record) { r.Regions[0].Location = "gpu" }, `regions[0]: "kv": location "gpu"`},
		{"cuda no index", func(r *Record) { r.Regions[0].Location = "cuda:" }, `location "cuda:"`},
		{"permission", func(r *Record) { r.Regions[0].Permission = "none" }, `permission "none": want read, write or read_write`},
		{"region name", func(r *Record) { r.Regions[0].Name = "" }, "regions[0]: name is empty"},
		{"duplicate", func(r *Record) { r.Regions[1].Name = "kv" }, `regions[1]: name "kv" appears twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := good()
			c.edit(&r)
			err := r.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("valid record refused: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want invalid saying %q", err, c.want)
			}
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := Record{Name: "a", Epoch: 0x00f0, Addr: "h:1", Regions: []Region{{Name: "kv", Bytes: 1, Location: "pinned", Permission: "write"}}}
	b, err := r.encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"name":"a","epoch":"00000000000000f0","addr":"h:1","regions":[{"name":"kv","bytes":1,"location":"pinned","permission":"write"}]}`
	if string(b) != want {
		t.Fatalf("stored form\n%s\nwant\n%s", b, want)
	}
	got, err := decodeRecord("a", b)
	if err != nil || !got.equal(r) || got.Version != RecordVersion {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	// A newer writer's extra field is ignored; a record with no regions
	// is stored as an empty list.
	if _, err := decodeRecord("a", []byte(`{"v":1,"name":"a","epoch":"1","addr":"h:1","regions":[],"zone":"x"}`)); err != nil {
		t.Fatalf("extra field: %v", err)
	}
	if b, _ := (Record{Name: "a", Epoch: 1, Addr: "h:1"}).encode(); !strings.Contains(string(b), `"regions":[]`) {
		t.Fatalf("no regions stored as %s", b)
	}
	for _, c := range []struct{ key, val, want string }{
		{"a", `{"v":2,"name":"a","epoch":"1","addr":"h:1"}`, "version 2"},
		{"a", `{"name":"a","epoch":"1","addr":"h:1"}`, "version 0: this engine reads version 1"},
		{"a", `{"v":1,"name":"b","epoch":"1","addr":"h:1"}`, `name "b" under the key of "a"`},
		{"a", `{"v":1,"name":"a","epoch":"xyz","addr":"h:1"}`, `epoch "xyz": want hex digits`},
		{"a", `{"v":1,"name":"a","epoch":"11112222333344445","addr":"h:1"}`, "want 1 to 16 hex digits"},
		{"a", `not json`, "not a record"},
		{"a", `{"v":1,"name":"a","epoch":"1","addr":"h:1","regions":[{"name":"kv","bytes":0,"location":"cpu","permission":"read"}]}`, "bytes 0"},
	} {
		if _, err := decodeRecord(c.key, []byte(c.val)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("decode %s: %v, want %q", c.val, err, c.want)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Prefix: "orbitefs/", LeaseTTL: ttl}, `prefix "orbitefs/": want a key prefix that begins and ends with '/'`},
		{Config{Prefix: "/orbitefs", LeaseTTL: ttl}, `prefix "/orbitefs"`},
		{Config{Prefix: "/o/", LeaseTTL: 1500 * 1e6}, "lease TTL 1.5s: want whole seconds, at least 1s"},
		{Config{Prefix: "/o/", LeaseTTL: 0}, "lease TTL 0s"},
	} {
		// Validation happens before any use of the client.
		_, err := Register(t.Context(), nil, c.cfg, rec("a", 1))
		if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if _, err := NewWatcher(t.Context(), nil, Config{Prefix: "x"}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("watcher with prefix x: %v", err)
	}
}
