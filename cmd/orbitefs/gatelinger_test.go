package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
)

// TestBulkGateLingerFromConfig: [peer] bulk_gate_linger is the linger
// of the daemon's one gate (newNotifications makes it; the listener and
// every Conn the daemon dials are given that gate), default 250ms,
// "0s" a gate that is never engaged.
func TestBulkGateLingerFromConfig(t *testing.T) {
	for _, tc := range []struct {
		toml string
		want time.Duration
	}{
		{"", 250 * time.Millisecond},
		{"[peer]\nbulk_gate_linger = \"1500ms\"\n", 1500 * time.Millisecond},
		{"[peer]\nbulk_gate_linger = \"0s\"\n", 0},
	} {
		d, err := config.Parse(tc.toml)
		if err != nil {
			t.Fatal(err)
		}
		n, err := newNotifications(d.Peer, d.Engine, &control.Options{}, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if got := n.gate.Linger(); got != tc.want {
			t.Errorf("%q: the daemon's gate lingers %s, want %s", tc.toml, got, tc.want)
		}
	}
}

// capture runs f with os.Stdout and os.Stderr going to buffers.
func capture(t *testing.T, f func() int) (rc int, stdout, stderr string) {
	t.Helper()
	var bufs [2]bytes.Buffer
	saved := [2]*os.File{os.Stdout, os.Stderr}
	done := make(chan struct{}, 2)
	var ws [2]*os.File
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
		go func() { io.Copy(&bufs[i], r); r.Close(); done <- struct{}{} }()
	}
	os.Stdout, os.Stderr = ws[0], ws[1]
	rc = f()
	os.Stdout, os.Stderr = saved[0], saved[1]
	ws[0].Close()
	ws[1].Close()
	<-done
	<-done
	return rc, bufs[0].String(), bufs[1].String()
}

// TestBenchPeerBulkGateLinger: `bench peer` runs its gate with [peer]
// bulk_gate_linger from --config, --bulk-gate-linger overrides it (the
// JSON names the linger the run had), and a bad value is refused
// naming it.
func TestBenchPeerBulkGateLinger(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(cfg, []byte("[peer]\nkey_file = \""+key+"\"\nbulk_gate_linger = \"700ms\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "700ms"},
		{[]string{"--bulk-gate-linger", "1500ms"}, "1.5s"},
		{[]string{"--bulk-gate-linger", "0s"}, "0s"},
	} {
		args := append([]string{"--config", cfg, "--op", "notify", "--count", "3", "--json"}, tc.flags...)
		rc, out, errOut := capture(t, func() int { return benchPeerMain(args) })
		if rc != 0 {
			t.Fatalf("%v: exit %d: %s", tc.flags, rc, errOut)
		}
		var res struct {
			Linger string `json:"bulk_gate_linger"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Linger != tc.want {
			t.Errorf("%v: bulk_gate_linger %q (%v) in %s, want %q", tc.flags, res.Linger, err, out, tc.want)
		}
	}
	for _, tc := range []struct{ value, msg string }{
		{"-5ms", `--bulk-gate-linger: duration "-5ms": must not be negative`},
		{"11s", "--bulk-gate-linger (11s) must be in [0, 10s]"},
		{"soon", `--bulk-gate-linger: duration "soon"`},
	} {
		rc, _, errOut := capture(t, func() int {
			return benchPeerMain([]string{"--config", cfg, "--op", "notify", "--count", "3", "--bulk-gate-linger", tc.value})
		})
		if rc != 2 || !strings.Contains(errOut, tc.msg) {
			t.Errorf("--bulk-gate-linger %s: exit %d, %q; want 2 and %q", tc.value, rc, errOut, tc.msg)
		}
	}
}

// TestBenchPeerFrameProtection: `bench peer` runs its receiver and client
// with [peer] frame_protection from --config, --frame-protection
// overrides it (the JSON names the protection the run had), and a bad
// value is refused naming it.
func TestBenchPeerFrameProtection(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(cfg, []byte("[peer]\nkey_file = \""+key+"\"\nframe_protection = \"aead\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "aead"},
		{[]string{"--frame-protection", "none"}, "none"},
	} {
		args := append([]string{"--config", cfg, "--op", "notify", "--count", "3", "--json"}, tc.flags...)
		rc, out, errOut := capture(t, func() int { return benchPeerMain(args) })
		if rc != 0 {
			t.Fatalf("%v: exit %d: %s", tc.flags, rc, errOut)
		}
		var res struct {
			Protection string `json:"frame_protection"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Protection != tc.want {
			t.Errorf("%v: frame_protection %q (%v) in %s, want %q", tc.flags, res.Protection, err, out, tc.want)
		}
	}
	rc, _, errOut := capture(t, func() int {
		return benchPeerMain([]string{"--config", cfg, "--op", "notify", "--count", "3", "--frame-protection", "tls"})
	})
	if want := `--frame-protection "tls": want "none"`; rc != 2 || !strings.Contains(errOut, want) {
		t.Errorf("--frame-protection tls: exit %d, %q; want 2 and %q", rc, errOut, want)
	}
}
