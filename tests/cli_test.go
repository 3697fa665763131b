// cli_test.go checks the command line a newcomer meets first: --help
// names every command, bench --help its subcommands, and a bench run on a
// missing file says so.

package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runBin runs the daemon binary with args and returns stdout, stderr and
// the exit status.
func runBin(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(daemonBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("orbitefs %s: %v", strings.Join(args, " "), err)
	return "", "", 0
}

func TestCLIHelp(t *testing.T) {
	benchSubs := []string{"bench file --file PATH", "bench load --file PATH", "bench kvswap --dir DIR", "bench ctl"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, append([]string{"mount [--config FILE]", "--engine-json FILE", "--qos FILE", "--debug", "MOUNTPOINT", "\n  version\n"}, benchSubs...)},
		{[]string{"help"}, benchSubs},
		{[]string{"bench", "--help"}, benchSubs},
	} {
		out, stderr, code := runBin(t, c.args...)
		if code != 0 || stderr != "" {
			t.Errorf("orbitefs %s: exit %d, stderr %q; want 0 and help on stdout", strings.Join(c.args, " "), code, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("orbitefs %s does not mention %q:\n%s", strings.Join(c.args, " "), w, out)
			}
		}
	}
	// Without a command, or with an unknown one: the help on stderr, exit 2.
	for _, args := range [][]string{nil, {"mountt"}, {"bench"}, {"bench", "files"}} {
		out, stderr, code := runBin(t, args...)
		if code != 2 || out != "" || !strings.Contains(stderr, "bench kvswap --dir DIR") {
			t.Errorf("orbitefs %s: exit %d, stdout %q, stderr %q; want 2 and the help on stderr", strings.Join(args, " "), code, out, stderr)
		}
	}
}

func TestCLIBenchMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.bin")
	for _, args := range [][]string{
		{"bench", "file", "--file", missing},
		{"bench", "file", "--file", missing, "--size", "8MiB", "--runtime", "100ms"},
	} {
		_, stderr, code := runBin(t, args...)
		want := "--file " + missing + ": no such file (--create --size N makes one of random data)"
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("orbitefs %s: exit %d, stderr %q; want 2 and %q", strings.Join(args, " "), code, stderr, want)
		}
	}
}

// TestCLIKVSwapEngineJSON: bench kvswap --engine-json runs on the
// configuration in the file and refuses a bad one before any I/O,
// naming the file and the key.
func TestCLIKVSwapEngineJSON(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(bad, []byte(`{"staging_chunk_count": 0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte(`{"staging_chunk_count": 8, "staging_chunk_size": "1MiB"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	kv := []string{"bench", "kvswap", "--dir", dir, "--layers", "1", "--groups", "8", "--group-bytes", "64KiB", "--batch", "4", "--runtime", "100ms"}
	_, stderr, code := runBin(t, append(kv, "--engine-json", bad)...)
	if code != 2 || !strings.Contains(stderr, bad) || !strings.Contains(stderr, "staging_chunk_count") {
		t.Errorf("a bad --engine-json: exit %d, stderr %q; want 2 naming %s and staging_chunk_count", code, stderr, bad)
	}
	if _, err := os.Stat(filepath.Join(dir, "layer-000.kv")); err == nil {
		t.Error("a refused configuration still created a layer file")
	}
	out, stderr, code := runBin(t, append(kv, "--create", "--json", "--engine-json", good)...)
	if code != 0 || !strings.Contains(out, `"gb_per_sec"`) {
		t.Errorf("a good --engine-json: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
