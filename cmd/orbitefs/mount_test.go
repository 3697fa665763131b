package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/config"
)

// TestEngineJSONKeepsDaemonBounds: an engine document given with
// --engine-json replaces [engine] after the TOML was validated, so the
// keys of other sections bounded by engine keys are checked again
// against it; one that no longer fits stops the mount, naming both.
func TestEngineJSONKeepsDaemonBounds(t *testing.T) {
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct{ doc, want string }{
		{`{"max_batch_requests": 16}`, "mount.default_batch_capacity (1024) must be in [1, 16]"},
		{`{"max_pending_notification_bytes": "1KiB"}`, "engine.max_pending_notification_bytes (1KiB) must be >= peer.max_notification_bytes (64KiB)"},
	} {
		path := filepath.Join(dir, "engine.json")
		if err := os.WriteFile(path, []byte(c.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := engineConfig(cfg, path, "")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "--engine-json "+path+": ") {
			t.Errorf("--engine-json %s: got %v, want an error naming the file and %q", c.doc, err, c.want)
		}
	}
	path := filepath.Join(dir, "ok.json")
	if err := os.WriteFile(path, []byte(`{"max_batch_requests": 1024}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := engineConfig(cfg, path, ""); err != nil {
		t.Errorf("an engine document within the daemon's bounds is refused: %v", err)
	}
}
