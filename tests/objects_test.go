// objects_test.go owns the shell-level helpers that create and tear down
// mount objects (memory regions, segments, batches) for the tests. Every
// helper goes through the mount with bash (echo, cat, rmdir), never
// through Go file calls, so the helpers exercise the contract too.

package tests

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var nameSeq atomic.Int64

// uniq returns a fresh object name with prefix p, so subtests sharing a
// daemon never collide.
func uniq(p string) string {
	return fmt.Sprintf("%s%d", p, nameSeq.Add(1))
}

// register registers a cpu region of size bytes (an integer or a size
// string) and returns its name. rmdir at cleanup unless keep.
func (m *mount) register(t *testing.T, prefix string, size any) string {
	t.Helper()
	name := uniq(prefix)
	sz := fmt.Sprint(size)
	if _, err := strconv.ParseUint(sz, 10, 64); err != nil {
		sz = strconv.Quote(sz)
	}
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","location":"cpu","bytes":%s}' > "$M/memory/register"`, name, sz))
	t.Cleanup(func() { m.sh(t, fmt.Sprintf(`[ -d "$M/memory/%s" ] && rmdir "$M/memory/%s"`, name, name)) })
	return name
}

// openSegment opens path as a file segment with perm and returns its
// name; closed (rmdir) at cleanup.
func (m *mount) openSegment(t *testing.T, prefix, path, perm string) string {
	t.Helper()
	name := uniq(prefix)
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","uri":"file://%s","permission":"%s"}' > "$M/segments/open"`, name, path, perm))
	t.Cleanup(func() { m.sh(t, fmt.Sprintf(`[ -d "$M/segments/%s" ] && rmdir "$M/segments/%s"`, name, name)) })
	return name
}

var batchID = regexp.MustCompile(`^[0-9]+$`)

// clone allocates a batch and returns its number; the batch is cancelled
// and freed at cleanup if it still exists.
func (m *mount) clone(t *testing.T) string {
	t.Helper()
	n := m.line(t, `cat "$M/ctl/batches/clone"`)
	if !batchID.MatchString(n) {
		t.Fatalf("clone returned %q, want a batch number", n)
	}
	t.Cleanup(func() {
		m.sh(t, fmt.Sprintf(`B="$M/ctl/batches/%s"; [ -d "$B" ] || exit 0
			echo cancel_all > "$B/ctl"; echo seal > "$B/ctl"; timeout 10 cat "$B/wait" >/dev/null; rmdir "$B"`, n))
	})
	return n
}

// submit writes doc to batch n's submit file with bash's builtin echo.
func (m *mount) submit(t *testing.T, n, doc string) {
	t.Helper()
	m.ok(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(doc), n))
}

// ctl writes cmd to batch n's ctl file.
func (m *mount) ctl(t *testing.T, n, cmd string) {
	t.Helper()
	m.ok(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/ctl"`, shq(cmd), n))
}

// waitBatch reads batch n's wait file (bounded by 20 s) and returns the
// state word.
func (m *mount) waitBatch(t *testing.T, n string) string {
	t.Helper()
	return m.line(t, fmt.Sprintf(`timeout 20 cat "$M/ctl/batches/%s/wait"`, n))
}

// state reads batch n's state file.
func (m *mount) state(t *testing.T, n string) string {
	t.Helper()
	return m.line(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/state"`, n))
}

// task reads tasks/<i> of batch n.
func (m *mount) task(t *testing.T, n string, i int) map[string]any {
	t.Helper()
	return m.readJSON(t, fmt.Sprintf("ctl/batches/%s/tasks/%d", n, i))
}

// run1 submits doc to a fresh batch, seals it and returns the batch and
// its terminal state.
func (m *mount) run1(t *testing.T, doc string) (n, state string) {
	t.Helper()
	n = m.clone(t)
	m.submit(t, n, doc)
	m.ctl(t, n, "seal")
	return n, m.waitBatch(t, n)
}

// taskCount counts the entries of batch n's tasks directory.
func (m *mount) taskCount(t *testing.T, n string) int {
	t.Helper()
	out := m.line(t, fmt.Sprintf(`ls "$M/ctl/batches/%s/tasks" | wc -l`, n))
	c, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("ls tasks | wc -l: %q", out)
	}
	return c
}

// ls lists dir (relative to the mount) as a sorted slice.
func (m *mount) ls(t *testing.T, rel string) []string {
	t.Helper()
	out := m.ok(t, `ls -1 "$M/`+rel+`"`)
	return strings.Fields(out)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// shq quotes s for bash as one word.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// num reads a JSON number field (0 and false when missing).
func num(v map[string]any, key string) (float64, bool) {
	f, ok := v[key].(float64)
	return f, ok
}

// wantNum fails unless v[key] is the number want.
func wantNum(t *testing.T, what string, v map[string]any, key string, want float64) {
	t.Helper()
	got, ok := num(v, key)
	if !ok || got != want {
		t.Errorf("%s: %s = %v, want %v (in %v)", what, key, v[key], want, v)
	}
}

// wantStr fails unless v[key] is the string want.
func wantStr(t *testing.T, what string, v map[string]any, key, want string) {
	t.Helper()
	if got, _ := v[key].(string); got != want {
		t.Errorf("%s: %s = %v, want %q (in %v)", what, key, v[key], want, v)
	}
}

// since reports the time since start, for bounds on "promptly".
func since(start time.Time) time.Duration { return time.Since(start).Round(time.Millisecond) }
