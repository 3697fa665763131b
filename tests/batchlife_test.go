// batchlife_test.go owns the batch lifecycle rules as a script
// meets them: deferred free (engine.enable_progress_worker), the
// /ctl/engine file (close_requester, close) and the task fields of
// transport attempts.

package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// deferredConfig is slowConfig with deferred free turned on.
const deferredConfig = `
[mount]
default_batch_capacity = 4096
close_timeout = "500ms"
shutdown_timeout = "20s"

[engine]
max_inflight_bytes = "4TiB"
default_timeout = "10m"
enable_progress_worker = true

[engine.io_uring]
queue_depth = 1
`

// TestDeferredFree: with enable_progress_worker, rmdir of a busy batch
// returns at once; the batch answers ENOENT from then on, /stats counts
// it as deferred, and its directory disappears once its work drained.
func TestDeferredFree(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: deferredConfig})
	_, S := m.scratchDirs(t)
	m.ok(t, `truncate -s 256M "$S/sparse"`)
	region := m.register(t, "defer", "256MiB")
	seg := m.openSegment(t, "defer", S+"/sparse", "read")
	n := m.clone(t)
	// 64 reads of 256 MiB of holes, one at a time: seconds of work.
	m.ok(t, fmt.Sprintf(`jq -nc --arg r %s --arg s %s '{op:"read",target:$s,requests:[range(64)|{memory:$r,offset:0,target_offset:0,length:268435456}]}' > "$M/ctl/batches/%s/submit"
echo seal > "$M/ctl/batches/%s/ctl"`, region, seg, n, n))
	out := m.ok(t, fmt.Sprintf(`B="$M/ctl/batches/%s"
before=$(cat "$B/state")
rmdir "$B"
echo "$before $(jq .deferred_batches "$M/stats")"
cat "$B/status" 2>&1 && echo "status readable"
true`, n))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "open 1" && !strings.HasPrefix(lines[0], "completed") {
		t.Errorf("state before rmdir and deferred_batches after: %q, want \"open 1\"", lines[0])
	}
	if strings.Contains(out, "status readable") || !strings.Contains(out, eNOENT) {
		t.Errorf("status of a freed (deferred) batch: %q, want %s", out, eNOENT)
	}
	r := m.run(t, fmt.Sprintf(`timeout 25 sh -c 'while [ -d "$M/ctl/batches/%s" ]; do sleep 0.05; done'`, n))
	if r.code != 0 {
		t.Fatalf("the deferred batch is still listed 25s later: %s", r)
	}
	if d := m.line(t, `jq .deferred_batches "$M/stats"`); d != "0" {
		t.Errorf("deferred_batches after the drain: %s", d)
	}
	if v := m.line(t, `jq .reserved_requests "$M/stats"`); v != "0" {
		t.Errorf("reserved_requests after the drain: %s", v)
	}
	// The region it read into is free again.
	m.ok(t, `rmdir "$M/memory/`+region+`"`)
}

// TestEngineCtl: /ctl/engine closes the requester side (new submissions
// ESHUTDOWN, accepted ones waited for: ETIMEDOUT while they run, success
// once they ended) and then the engine.
func TestEngineCtl(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: slowConfig})
	for _, bad := range []string{"", "bogus", "close_requester x", "close_requester -1s", "close 1s 2s"} {
		r := m.run(t, fmt.Sprintf(`echo %s > "$M/ctl/engine"`, shq(bad)))
		if r.code == 0 || !strings.Contains(r.stderr, eINVAL) {
			t.Errorf("engine ctl %q: %s\nwant %s", bad, r, eINVAL)
		}
	}
	b := m.startSlowBatch(t)
	r := m.run(t, `echo "close_requester 200ms" > "$M/ctl/engine"`)
	if r.code == 0 || !strings.Contains(r.stderr, "Connection timed out") {
		t.Errorf("close_requester with a running batch: %s\nwant ETIMEDOUT", r)
	}
	if e := m.ok(t, `cat "$M/error"`); !strings.Contains(e, "close_requester again") {
		t.Errorf("/error after the timeout: %q", e)
	}
	if st := m.state(t, b.n); st != "open" {
		t.Errorf("the accepted batch after a timed-out close_requester: %s, want open (still running)", st)
	}
	small := m.register(t, "req", 4096)
	n := m.clone(t)
	r = m.run(t, fmt.Sprintf(`echo '{"op":"read","target":"%s","requests":[{"memory":"%s","length":4096}]}' > "$M/ctl/batches/%s/submit"`, b.seg, small, n))
	if r.code == 0 || !strings.Contains(r.stderr, "Cannot send after transport endpoint shutdown") {
		t.Errorf("submit after close_requester: %s\nwant ESHUTDOWN", r)
	}
	m.ctl(t, b.n, "cancel_all")
	start := time.Now()
	m.ok(t, `echo "close_requester 20s" > "$M/ctl/engine"`)
	t.Logf("close_requester returned %s after cancel_all", since(start))
	if st := m.waitBatch(t, b.n); st != "cancelled" {
		t.Errorf("slow batch: %s", st)
	}
	m.ok(t, `echo close > "$M/ctl/engine"`)
	r = m.run(t, `cat "$M/ctl/batches/clone"`)
	if r.code == 0 || !strings.Contains(r.stderr, "Cannot send after transport endpoint shutdown") {
		t.Errorf("clone after close: %s\nwant ESHUTDOWN", r)
	}
}
