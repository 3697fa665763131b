// errorfiles_test.go checks that each failure can be explained from the
// mount's files alone (ls and cat): a batch whose transfers failed after
// its submit returned, the tasks that never started, a reclaimed batch
// and a misused transaction file each leave a line saying what happened,
// in the error file a user would read, without repeated prefixes.

package tests

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTimedOutBatchExplained: a submission whose deadline passes before
// it is dispatched fails after the write returned. The batch's error
// file says what timed out; the first failed task has its own error and
// every other task says it was not started and where its submission
// stopped; the submission's error names the request once, without
// repeating "read batches/N: timed out".
func TestTimedOutBatchExplained(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	T, _ := m.scratchDirs(t)
	m.ok(t, `head -c 65536 /dev/urandom > "$T/f"`)
	R := m.register(t, "tob", "64KiB")
	F := m.openSegment(t, "tobf", T+"/f", "read")
	var reqs []string
	for i := 0; i < 4; i++ {
		reqs = append(reqs, fmt.Sprintf(`{"memory":"%s","offset":%d,"target_offset":%d,"length":4096}`, R, i*4096, i*4096))
	}
	// A 1 ns timeout has passed before the worker can dispatch anything.
	n, state := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","timeout":"1ns","requests":[%s]}`, F, strings.Join(reqs, ",")))
	if state != "failed" {
		t.Fatalf("state %q, want failed", state)
	}
	prefix := "read batches/" + n + ": timed out: "

	errFile := m.ok(t, `cat "$M/ctl/batches/`+n+`/error"`)
	line := regexp.MustCompile(`^[0-9-]{10}T[0-9:.]{12}Z read batches/` + n +
		`: timed out: submissions\[0\] requests\[0\] \(task 0\): deadline passed [^\n]+ \(4 of 4 tasks failed\)\n$`)
	if !line.MatchString(errFile) {
		t.Errorf("batch error file = %q, want one time-stamped line saying submissions[0] timed out at requests[0], 4 of 4 tasks failed", errFile)
	}

	sub := m.line(t, `jq -r '.submissions[0].error' "$M/ctl/batches/`+n+`/status"`)
	if !strings.HasPrefix(sub, prefix+"requests[0] (task 0): deadline passed") || strings.Count(sub, "batches/"+n) != 1 {
		t.Errorf("status submissions[0].error = %q, want %q once, then the request and the cause", sub, prefix)
	}

	first := m.task(t, n, 0)["error"]
	if s, _ := first.(string); !strings.HasPrefix(s, prefix+"deadline passed") || strings.Contains(s, "not started") {
		t.Errorf("tasks/0 error = %v, want its own timeout", first)
	}
	for i := 1; i < 4; i++ {
		got, _ := m.task(t, n, i)["error"].(string)
		want := prefix + "not started: its submission stopped at requests[0] (task 0): deadline passed"
		if !strings.HasPrefix(got, want) || strings.Count(got, "batches/"+n) != 1 {
			t.Errorf("tasks/%d error = %q, want it to start %q and name the batch once", i, got, want)
		}
	}
}

// TestReclaimedBatchExplained: a batch reclaimed as idle vanishes, so
// later operations answer ENOENT; /error says it was reclaimed and why,
// both when it happens and when a descriptor still open on its submit or
// ctl file writes to it.
func TestReclaimedBatchExplained(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: "[mount]\nidle_batch_timeout = \"1s\"\n"})
	T, _ := m.scratchDirs(t)
	m.ok(t, `head -c 4096 /dev/urandom > "$T/f"`)
	R := m.register(t, "rb", "4KiB")
	F := m.openSegment(t, "rbf", T+"/f", "read")
	doc := fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","length":4096}]}`, F, R)
	// Keep the submit file open while the batch is reclaimed, then write.
	r := m.run(t, `N=$(cat "$M/ctl/batches/clone"); echo "$N"
exec 3>"$M/ctl/batches/$N/submit" 4>"$M/ctl/batches/$N/ctl"
for i in $(seq 200); do [ -e "$M/ctl/batches/$N" ] || break; sleep 0.1; done
[ -e "$M/ctl/batches/$N" ] && { echo "batch $N was not reclaimed" >&2; exit 3; }
cat "$M/error" >&2
echo seal 2>&1 >&4 | sed 's/^/ctl-write: /' >&2
printf 'ctl-error: ' >&2; cat "$M/error" >&2
echo '`+doc+`' >&3`)
	n := strings.TrimSpace(strings.SplitN(r.stdout, "\n", 2)[0])
	if r.code == 0 || !strings.Contains(r.stderr, eNOENT) || !batchID.MatchString(n) {
		t.Fatalf("a write to a reclaimed batch's open submit file: %s\nwant ENOENT", r)
	}
	reason := "batch " + n + " was reclaimed: it had no submission and no write to its submit or ctl file for 1s (mount.idle_batch_timeout)"
	if want := "reclaim batches/" + n + ": not found: " + reason; !strings.Contains(r.stderr, want) {
		t.Errorf("/error after the reclaim (in stderr above) lacks %q", want)
	}
	if got, want := m.line(t, `cat "$M/error"`), "submit batches/"+n+": not found: "+reason; !strings.HasSuffix(got, want) {
		t.Errorf("/error after the write = %q, want it to end %q", got, want)
	}
	// The same through the ctl file, opened before the reclaim.
	if !regexp.MustCompile(`(?m)^ctl-write: .*` + eNOENT + `$`).MatchString(r.stderr) {
		t.Errorf("a seal written to the reclaimed batch's open ctl file: %s\nwant ENOENT", r)
	}
	if want := "seal batches/" + n + ": not found: " + reason; !regexp.MustCompile(`(?m)^ctl-error: \S+ ` + regexp.QuoteMeta(want) + `$`).MatchString(r.stderr) {
		t.Errorf("/error after the seal (the ctl-error line of stderr above) is not \"TIME %s\"", want)
	}
}

// TestTxnMisuseExplained: opening txn other than read-write fails with
// EACCES and /error says how to open it.
func TestTxnMisuseExplained(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	for _, c := range []struct{ script, how string }{
		{`echo '{}' > "$M/ctl/batches/txn"`, "write-only (echo > txn)"},
		{`cat "$M/ctl/batches/txn"`, "read-only (cat txn)"},
	} {
		before := time.Now()
		r := m.run(t, c.script)
		if r.code == 0 || !strings.Contains(r.stderr, eACCES) {
			t.Errorf("%s\nwant EACCES", r)
		}
		got := m.line(t, `cat "$M/error"`)
		want := "open batches/txn: permission denied: opened " + c.how + ": a transaction is written and read on one descriptor; open it read-write (exec 3<>txn)"
		if !strings.HasSuffix(got, want) {
			t.Errorf("/error = %q, want it to end %q", got, want)
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, strings.Fields(got)[0]); err != nil || at.Before(before.Add(-time.Second)) {
			t.Errorf("/error line %q is not from this open (%v)", got, err)
		}
	}
}
