// hostcopy_test.go: a KV-cache style submission as a script sees it:
// several 128 KiB requests on a tmpfs file are copied by the host copy
// lanes (transport "copy", counted in host_copy_units) and move the
// right bytes both ways; with host_copy_min_bytes = 0 they keep the ring.

package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestHostCopyKVBatch(t *testing.T) {
	for _, c := range []struct {
		name   string
		config string
		want   string
	}{
		{"defaults", "", "copy"},
		{"host_copy_min_bytes 0", "[engine]\nhost_copy_min_bytes = 0\n", "io_uring"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := startDaemon(t, daemonOpts{config: c.config})
			_, S := m.scratchDirs(t)
			const group = 128 << 10
			m.ok(t, `head -c 4194304 /dev/urandom > "$S/layer.kv"`)
			mem := m.register(t, "kv", 4*group)
			seg := m.openSegment(t, "kv", S+"/layer.kv", "read_write")
			// Four groups from scattered places in the file, back to back
			// in memory: file groups 30, 2, 17 and 9.
			picks := []int{30, 2, 17, 9}
			reqs := make([]string, len(picks))
			pyPicks := ""
			for i, g := range picks {
				reqs[i] = fmt.Sprintf(`{"memory":"%s","offset":%d,"target_offset":%d,"length":%d}`, mem, i*group, g*group, group)
				pyPicks += fmt.Sprintf("%d,", g)
			}
			units := func() int {
				n, err := strconv.Atoi(m.line(t, `jq .host_copy_units "$M/stats"`))
				if err != nil {
					t.Fatalf("stats host_copy_units: %v", err)
				}
				return n
			}
			before := units()
			n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[%s]}`, seg, strings.Join(reqs, ",")))
			if st != "completed" {
				t.Fatalf("read: state %s", st)
			}
			for i := range picks {
				wantStr(t, fmt.Sprintf("task %d", i), m.task(t, n, i), "transport", c.want)
				m.ok(t, fmt.Sprintf(`cmp <(tail -c +%d "$M/memory/%s/data" | head -c %d) <(tail -c +%d "$S/layer.kv" | head -c %d)`,
					i*group+1, mem, group, picks[i]*group+1, group))
			}
			wantUnits := 0
			if c.want == "copy" {
				wantUnits = len(picks)
			}
			if got := units() - before; got != wantUnits {
				t.Fatalf("host_copy_units rose by %d, want %d", got, wantUnits)
			}

			// Swap out: the same groups written back over a zeroed file
			// land where they came from, and nowhere else.
			m.ok(t, `cp "$S/layer.kv" "$S/orig.kv" && head -c 4194304 /dev/zero > "$S/layer.kv"`)
			before = units()
			n, st = m.run1(t, fmt.Sprintf(`{"op":"write","target":"%s","requests":[%s]}`, seg, strings.Join(reqs, ",")))
			if st != "completed" {
				t.Fatalf("write: state %s", st)
			}
			for i := range picks {
				wantStr(t, fmt.Sprintf("write task %d", i), m.task(t, n, i), "transport", c.want)
			}
			if got := units() - before; got != wantUnits {
				t.Fatalf("the write: host_copy_units rose by %d, want %d", got, wantUnits)
			}
			m.ok(t, fmt.Sprintf(`python3 - "$S/orig.kv" "$S/layer.kv" <<'PY'
import sys
orig, got = open(sys.argv[1], 'rb').read(), open(sys.argv[2], 'rb').read()
want = bytearray(len(orig))
for g in (%s):
    want[g*%d:(g+1)*%d] = orig[g*%d:(g+1)*%d]
assert got == bytes(want), "the written file differs"
PY`, pyPicks, group, group, group, group))
		})
	}
}
