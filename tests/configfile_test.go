// configfile_test.go checks config files as docs/config.md writes them:
// a file that names only a sub-table's heading.

package tests

import "testing"

// TestConfigSubTableOnly: a --config file holding only
// [engine.runtime_queue] (no [engine] heading; TOML defines it
// implicitly) mounts, and its keys take effect.
func TestConfigSubTableOnly(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: "[engine.runtime_queue]\nenabled = true\ndeadline_aware = true\n"})
	q := m.readJSON(t, "stats")["runtime_queue"].(map[string]any)
	if q["enabled"] != true || q["deadline_aware"] != true {
		t.Errorf("stats runtime_queue: %v, want enabled and deadline_aware", q)
	}
}
