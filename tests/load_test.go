// load_test.go owns loading a file larger than the engine's in-flight
// budget through the mount: the recipe docs/mount.md gives ("Loading a
// file of any size") is taken from the doc and run as written, so the
// documented loop is the tested one.

package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallBudgetConfig makes a file of a few MiB larger than
// max_inflight_bytes.
const smallBudgetConfig = `
[engine]
max_inflight_bytes = "1MiB"
max_transfer_bytes = "256KiB"
`

// loadRecipe returns the first sh block of docs/mount.md's "Loading a
// file of any size" section without its example call.
func loadRecipe(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "mount.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## Loading a file of any size\n")
	if i < 0 {
		t.Fatal(`docs/mount.md has no "## Loading a file of any size" section`)
	}
	sec := doc[i:]
	start := strings.Index(sec, "```sh\n")
	end := strings.Index(sec[start+6:], "```\n")
	if start < 0 || end < 0 {
		t.Fatal("the section has no sh block")
	}
	var keep []string
	for _, l := range strings.Split(sec[start+6:start+6+end], "\n") {
		if !strings.HasPrefix(l, "load /") { // the example call
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestLoadFileOverBudget: a file 5 KiB past five times max_inflight_bytes,
// on ext4 (O_DIRECT) and on tmpfs, refused as one submission, loads whole
// with the documented loop, byte for byte, and leaves no batch behind.
// A piece over the budget is reported by the loop, not lost. `bench
// load` under the same limits loads it too.
func TestLoadFileOverBudget(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: smallBudgetConfig})
	recipe := loadRecipe(t)
	const size = 5<<20 + 5<<10
	T, S := m.scratchDirs(t)
	for _, c := range []struct{ name, dir string }{{"tempdir", T}, {"shm", S}} {
		t.Run(c.name, func(t *testing.T) {
			file := c.dir + "/model.safetensors"
			m.ok(t, fmt.Sprintf(`head -c %d /dev/urandom > %q`, size, file))
			region := m.register(t, "load", size)
			seg := m.openSegment(t, "load", file, "read")

			// The whole file as one submission (of 256 KiB requests) is
			// over the budget.
			r := m.run(t, fmt.Sprintf(`(jq -nc --arg s %s --arg r %s '{op:"read",target:$s,requests:[range(0;%d;262144)|{memory:$r,offset:.,target_offset:.,length:([262144,%d-.]|min)}]}' >&3) 3<>"$M/ctl/batches/txn"`, seg, region, size, size))
			if r.code == 0 || !strings.Contains(r.stderr, "Resource temporarily unavailable") {
				t.Fatalf("one %d-byte submission under a 1 MiB budget: %s", size, r)
			}
			if e := m.line(t, `cat "$M/error"`); !strings.Contains(e, "exceed max_inflight_bytes (1048576) on their own") {
				t.Errorf("error file: %q", e)
			}

			out := m.ok(t, fmt.Sprintf("CHUNK=$((256 << 10)) DEPTH=3\n%s\nload %q %s %s", recipe, file, seg, region))
			if out != "" {
				t.Fatalf("the loop reported failures:\n%s", out)
			}
			if got := m.line(t, fmt.Sprintf(`cmp "$M/memory/%s/data" %q && echo same`, region, file)); got != "same" {
				t.Fatalf("cmp: %q", got)
			}
			m.noBatches(t, "after the loop")

			// Pieces the engine refuses (over max_transfer_bytes): every
			// one reported.
			out = m.ok(t, fmt.Sprintf("CHUNK=$((2 << 20)) DEPTH=1\n%s\nload %q %s %s", recipe, file, seg, region))
			if n := strings.Count(out, "refused"); n != 3 {
				t.Errorf("2 MiB pieces under a 1 MiB budget: %d refusals reported, want 3:\n%s", n, out)
			}
			m.noBatches(t, "after the refused pieces")

			// bench load, on an engine with the daemon's limits, cuts the
			// same file into submissions that fit.
			got := m.line(t, fmt.Sprintf(`"$BIN" bench load --file %q --max-inflight-bytes 1MiB --max-transfer-bytes 256KiB --runs 1 --verify --json | jq -c '[.verified, .bytes, .plan.submissions, .plan.submissions_in_flight]'`, file))
			if got != fmt.Sprintf("[true,%d,11,2]", size) {
				t.Errorf("bench load [verified, bytes, submissions, in flight] = %s", got)
			}
		})
	}
}
