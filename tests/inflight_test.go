// inflight_test.go owns behaviour that needs a batch to stay in flight:
// interruptible wait, batches that do not serialize behind each other,
// EBUSY for free/rmdir while busy, the segment close timeout, and
// cancellation.
//
// A long batch without a slow device: 4096 reads of 256 MiB each from a
// sparse tmpfs file (holes read as zeros at memory speed) into one 256
// MiB region, with io_uring.queue_depth = 1 so only one request is in the
// kernel at a time. That is 1 TiB, minutes of work, yet cancel_all ends it
// within one request (tens of milliseconds). slowConfig raises the limits
// that would otherwise refuse such a batch.

package tests

import (
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

const slowConfig = `
[mount]
default_batch_capacity = 4096
close_timeout = "500ms"
shutdown_timeout = "2s"

[engine]
max_inflight_bytes = "4TiB"
default_timeout = "10m"

[engine.io_uring]
queue_depth = 1
`

// slowBatch is a sealed batch that keeps running until cancelled.
type slowBatch struct {
	n, region, seg string
}

// startSlowBatch submits the long batch (about 300 KiB of JSON, so the
// document also spans several writes), seals it, and checks that it is
// running. Cleanup cancels it and waits for the end.
func (m *mount) startSlowBatch(t *testing.T) slowBatch {
	t.Helper()
	b := m.submitSlowBatch(t, "")
	if st := m.state(t, b.n); st != "open" {
		t.Fatalf("the long batch is already %s", st)
	}
	// Loans are taken when the worker dispatches the group, not at
	// submit: wait until its first task left pending (seen still pending
	// under load otherwise).
	for end := time.Now().Add(30 * time.Second); m.taskState(t, b.n, 0) == "pending"; {
		if time.Now().After(end) {
			t.Fatal("the long batch was never dispatched: task 0 is still pending")
		}
	}
	return b
}

// submitSlowBatch submits and seals the long batch; extra is jq object
// text placed before "requests" (e.g. a qos member). Cleanup cancels it
// and waits for the end.
func (m *mount) submitSlowBatch(t *testing.T, extra string) slowBatch {
	t.Helper()
	_, S := m.scratchDirs(t)
	m.ok(t, `truncate -s 256M "$S/sparse"`)
	b := slowBatch{region: m.register(t, "slow", "256MiB")}
	b.seg = m.openSegment(t, "slow", S+"/sparse", "read")
	b.n = m.clone(t)
	t.Cleanup(func() {
		// Registered after clone's cleanup, so it runs first: cancel and
		// wait, so the region and segment cleanups find them idle.
		m.sh(t, fmt.Sprintf(`B="$M/ctl/batches/%s"; [ -d "$B" ] || exit 0; echo cancel_all > "$B/ctl"; timeout 10 cat "$B/wait"`, b.n))
	})
	m.ok(t, fmt.Sprintf(`jq -nc --arg r %s --arg s %s '{op:"read",target:$s,%srequests:[range(4096)|{memory:$r,offset:0,target_offset:0,length:268435456}]}' > "$T/slow.json"
cat "$T/slow.json" > "$M/ctl/batches/%s/submit"
echo seal > "$M/ctl/batches/%s/ctl"`, b.region, b.seg, extra, b.n, b.n))
	return b
}

// taskState reads the state of task i of batch n.
func (m *mount) taskState(t *testing.T, n string, i int) string {
	t.Helper()
	return m.line(t, fmt.Sprintf(`jq -r .state "$M/ctl/batches/%s/tasks/%d"`, n, i))
}

var inflight = map[string]func(t *testing.T, m *mount){
	"WaitInterruptible":   testWaitInterruptible,
	"BatchesIndependent":  testBatchesIndependent,
	"FreeWhileBusy":       testFreeWhileBusy,
	"RmdirMemoryInUse":    testRmdirMemoryInUse,
	"SegmentCloseTimeout": testSegmentCloseTimeout,
	"CancelOne":           testCancelOne,
	"StatusProgresses":    testStatusProgresses,
	"ShortReadAtEOF":      testShortReadAtEOF,
}

func TestInFlight(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: slowConfig})
	names := make([]string, 0, len(inflight))
	for name := range inflight {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { inflight[name](t, m) })
	}
}

// testWaitInterruptible: a blocked read of wait ends promptly on a
// signal, and changes nothing.
func testWaitInterruptible(t *testing.T, m *mount) {
	b := m.startSlowBatch(t)
	before := m.taskState(t, b.n, 4095)
	r := m.run(t, `timeout 1 cat "$M/ctl/batches/`+b.n+`/wait"`)
	if r.code != 124 {
		t.Errorf("timeout 1 cat wait: %s\nwant exit 124 (killed by timeout while blocked)", r)
	}
	if r.took > 2*time.Second {
		t.Errorf("timeout 1 cat wait returned after %s, want < 2s", r.took)
	}
	if st := m.state(t, b.n); st != "open" {
		t.Errorf("after the interrupted wait: state %s, want open", st)
	}
	if st := m.taskState(t, b.n, 4095); st != before || st != "pending" {
		t.Errorf("after the interrupted wait: last task %s (was %s), want pending", st, before)
	}

	// SIGINT to a backgrounded reader, as ^C would send.
	p := m.start(t, `exec cat "$M/ctl/batches/`+b.n+`/wait"`)
	p.blockedInRead(t)
	start := time.Now()
	p.signal(syscall.SIGINT)
	if r, done := p.wait(2 * time.Second); !done {
		t.Errorf("cat wait still blocked 2s after SIGINT")
	} else if r.code == 0 {
		t.Errorf("cat wait after SIGINT exited 0: %s", r)
	} else {
		t.Logf("SIGINT ended cat wait after %s: %s", since(start), r)
	}
	if st := m.state(t, b.n); st != "open" {
		t.Errorf("after SIGINT: state %s, want open", st)
	}

	// A wait still blocked when the batch is cancelled returns the state.
	p = m.start(t, `exec cat "$M/ctl/batches/`+b.n+`/wait"`)
	p.blockedInRead(t)
	start = time.Now()
	m.ctl(t, b.n, "cancel_all")
	r, done := p.wait(5 * time.Second)
	if !done {
		t.Fatalf("cat wait still blocked 5s after cancel_all")
	}
	if r.code != 0 || strings.TrimSpace(r.stdout) != "cancelled" {
		t.Errorf("cat wait after cancel_all: %s\nwant \"cancelled\"", r)
	}
	t.Logf("cancel_all ended the batch in %s", since(start))
	if st := m.state(t, b.n); st != "cancelled" {
		t.Errorf("state after cancel_all: %s", st)
	}
	if st := m.taskState(t, b.n, 4095); st != "cancelled" {
		t.Errorf("last task after cancel_all: %s", st)
	}
}

// testBatchesIndependent: while one shell blocks in wait on batch A,
// another shell runs a whole cycle on batch B.
func testBatchesIndependent(t *testing.T, m *mount) {
	a := m.startSlowBatch(t)
	waiter := m.start(t, `exec cat "$M/ctl/batches/`+a.n+`/wait"`)
	waiter.blockedInRead(t)
	statusReader := m.start(t, `for i in $(seq 50); do cat "$M/ctl/batches/`+a.n+`/status" > /dev/null || exit 1; done`)
	start := time.Now()
	out := m.ok(t, `
head -c 1M /dev/urandom > "$T/b.bin"
echo '{"name":"indep_b","location":"cpu","bytes":"1MiB"}' > "$M/memory/register"
echo '{"name":"indep_b","uri":"file://'"$T"'/b.bin","permission":"read_write"}' > "$M/segments/open"
N=$(cat "$M/ctl/batches/clone")
echo '{"op":"read","target":"indep_b","requests":[{"memory":"indep_b","offset":0,"target_offset":0,"length":1048576}]}' > "$M/ctl/batches/$N/submit"
echo seal > "$M/ctl/batches/$N/ctl"
timeout 10 cat "$M/ctl/batches/$N/wait"
cmp "$M/memory/indep_b/data" "$T/b.bin" && echo same
rmdir "$M/ctl/batches/$N" "$M/segments/indep_b" "$M/memory/indep_b"`)
	took := time.Since(start)
	if out != "completed\nsame\n" {
		t.Errorf("batch B's cycle printed %q", out)
	}
	if took > 5*time.Second {
		t.Errorf("batch B's cycle took %s while A was in flight", took)
	}
	if r, done := statusReader.wait(10 * time.Second); !done || r.code != 0 {
		t.Errorf("50 reads of A's status while A runs: done=%v %s", done, r)
	}
	if r, done := waiter.wait(0); done {
		t.Errorf("A's wait returned while A runs: %s", r)
	}
	if st := m.state(t, a.n); st != "open" {
		t.Errorf("A is %s after B's cycle, want still open", st)
	}
	t.Logf("B's full cycle took %s with A in flight", took.Round(time.Millisecond))
	m.ctl(t, a.n, "cancel_all")
	if r, done := waiter.wait(5 * time.Second); !done || strings.TrimSpace(r.stdout) != "cancelled" {
		t.Errorf("A's wait after cancel_all: done=%v %s", done, r)
	}
}

// testFreeWhileBusy: free and rmdir of a running batch fail with EBUSY
// and leave it intact.
func testFreeWhileBusy(t *testing.T, m *mount) {
	b := m.startSlowBatch(t)
	r := m.run(t, `echo free > "$M/ctl/batches/`+b.n+`/ctl"`)
	if r.code == 0 || !strings.Contains(r.stderr, eBUSY) {
		t.Errorf("echo free while running: %s\nwant %s", r, eBUSY)
	}
	if e := m.ok(t, `cat "$M/ctl/batches/`+b.n+`/error"`); !strings.Contains(e, "busy") && !strings.Contains(e, "running") {
		t.Errorf("error file after free while busy: %q", e)
	}
	r = m.run(t, `rmdir "$M/ctl/batches/`+b.n+`"`)
	if r.code == 0 || !strings.Contains(r.stderr, eBUSY) {
		t.Errorf("rmdir while running: %s\nwant %s", r, eBUSY)
	}
	if !contains(m.ls(t, "ctl/batches"), b.n) {
		t.Errorf("the busy batch disappeared from ls")
	}
	if st := m.state(t, b.n); st != "open" {
		t.Errorf("state after refused free: %s", st)
	}
	m.ctl(t, b.n, "cancel_all")
	if st := m.waitBatch(t, b.n); st != "cancelled" {
		t.Errorf("wait after cancel_all: %s", st)
	}
	m.ok(t, `rmdir "$M/ctl/batches/`+b.n+`"`)
}

// testRmdirMemoryInUse: a region loaned to a running transfer cannot be
// unregistered.
func testRmdirMemoryInUse(t *testing.T, m *mount) {
	b := m.startSlowBatch(t)
	r := m.run(t, `rmdir "$M/memory/`+b.region+`"`)
	if r.code == 0 || !strings.Contains(r.stderr, eBUSY) {
		// Say why the batch was no longer running (seen once under load).
		st := m.run(t, `cat "$M/ctl/batches/`+b.n+`/status"; cat "$M/ctl/batches/`+b.n+`/tasks/0"`)
		t.Fatalf("rmdir memory in use: %s\nwant %s\nbatch: %s", r, eBUSY, st)
	}
	if !contains(m.ls(t, "memory"), b.region) {
		t.Errorf("the busy region disappeared from ls memory")
	}
	// Its bytes are being written by the transfer: reading them through
	// data is refused too (the daemon's choice: EBUSY while loaned).
	r = m.run(t, `head -c 16 "$M/memory/`+b.region+`/data" > /dev/null`)
	if r.code == 0 || !strings.Contains(r.stderr, eBUSY) {
		t.Errorf("reading data of a loaned region: %s\nwant %s", r, eBUSY)
	}
	m.ctl(t, b.n, "cancel_all")
	m.waitBatch(t, b.n)
	m.ok(t, `rmdir "$M/memory/`+b.region+`"`)
}

// testSegmentCloseTimeout: rmdir of a segment with a running transfer
// drains for close_timeout (500ms here), then fails with ETIMEDOUT; the
// segment takes no new work meanwhile; after the batch ends rmdir works.
func testSegmentCloseTimeout(t *testing.T, m *mount) {
	b := m.startSlowBatch(t)
	r := m.run(t, `rmdir "$M/segments/`+b.seg+`"`)
	if r.code == 0 || !strings.Contains(r.stderr, "Connection timed out") {
		t.Errorf("rmdir segment in use: %s\nwant ETIMEDOUT", r)
	}
	if r.took < 400*time.Millisecond || r.took > 3*time.Second {
		t.Errorf("rmdir segment in use took %s, want about close_timeout (500ms)", r.took)
	}
	// New work on the draining segment is refused.
	small := m.register(t, "drain", 4096)
	n := m.clone(t)
	r = m.run(t, fmt.Sprintf(`echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096}]}' > "$M/ctl/batches/%s/submit"`, b.seg, small, n))
	if r.code == 0 {
		t.Errorf("submit to a draining segment succeeded")
	} else {
		t.Logf("submit to the draining segment: %s", strings.TrimSpace(r.stderr))
	}
	m.ctl(t, b.n, "cancel_all")
	m.waitBatch(t, b.n)
	m.ok(t, `rmdir "$M/segments/`+b.seg+`" 2>/dev/null || [ ! -d "$M/segments/`+b.seg+`" ]`)
}

// testCancelOne: cancel I of a pending task cancels only it; cancel of a
// running one is EBUSY (at most one runs: queue depth 1).
func testCancelOne(t *testing.T, m *mount) {
	b := m.startSlowBatch(t)
	m.ctl(t, b.n, "cancel 4000")
	if st := m.taskState(t, b.n, 4000); st != "cancelled" {
		t.Errorf("task 4000 after cancel 4000: %s", st)
	}
	if st := m.taskState(t, b.n, 4001); st != "pending" {
		t.Errorf("task 4001 after cancel 4000: %s", st)
	}
	if st := m.state(t, b.n); st != "open" {
		t.Errorf("batch after cancel 4000: %s", st)
	}
	// Find the running task and try to cancel it: one jq reads the
	// tasks (41 shells and jq processes in a row took more than the
	// script's 30 s on a loaded machine while the batch copied).
	out := m.ok(t, fmt.Sprintf(`cd "$M/ctl/batches/%s/tasks" && jq -rn 'first(inputs | select(.state == "running") | .index) // empty' $(seq 0 40)`, b.n))
	if i := strings.TrimSpace(out); i != "" {
		r := m.run(t, fmt.Sprintf(`echo cancel %s > "$M/ctl/batches/%s/ctl"`, i, b.n))
		// It may have finished in between; then cancel is a no-op.
		if r.code != 0 && !strings.Contains(r.stderr, eBUSY) {
			t.Errorf("cancel of running task %s: %s", i, r)
		}
	}
	m.ctl(t, b.n, "cancel_all")
	if st := m.waitBatch(t, b.n); st != "cancelled" {
		t.Errorf("wait after cancel_all: %s", st)
	}
	if v := m.task(t, b.n, 0); v["state"] != "completed" || v["transferred_bytes"] != float64(256<<20) {
		t.Errorf("task 0 (ran before the cancel): %v", v)
	}
}

// testStatusProgresses: successive reads of status and tasks show the
// batch advancing (fresh on every read, no caching).
func testStatusProgresses(t *testing.T, m *mount) {
	b := m.startSlowBatch(t)
	first := m.ok(t, `cat "$M/ctl/batches/`+b.n+`/status"`)
	var last string
	eventually(t, 5*time.Second, "status changes while the batch runs", func() bool {
		last = m.ok(t, `cat "$M/ctl/batches/`+b.n+`/status"`)
		return last != first
	})
	t.Logf("status then: %.300s\nstatus now: %.300s", first, last)
	stats := m.readJSON(t, "stats")
	t.Logf("stats while in flight: %v", stats)
}

// testShortReadAtEOF: a file that shrinks after the submission was
// accepted (so the range check at submit passed) but before its read
// runs: the task fails with transferred_bytes = the bytes that remained.
//
// The engine checks ranges against the file's current size at submit
// (ERANGE), so the shrink must fall between submit and I/O: the read is
// queued in the same batch behind a group that uses the same memory (the
// engine fences overlapping groups), and the file is truncated while it
// waits.
func testShortReadAtEOF(t *testing.T, m *mount) {
	_, S := m.scratchDirs(t)
	m.ok(t, `truncate -s 256M "$S/sparse"; head -c 1M /dev/urandom > "$T/f"; cp "$T/f" "$T/orig"`)
	T, _ := m.scratchDirs(t)
	x := m.register(t, "shortx", "256MiB")
	sparse := m.openSegment(t, "shortsparse", S+"/sparse", "read")
	f := m.openSegment(t, "shortf", T+"/f", "read")
	n := m.clone(t)
	// Group A: 40 x 256 MiB at queue depth 1, about a second or more.
	// Group B (task 40): 1 MiB of f into the same memory, fenced behind A.
	out := m.ok(t, fmt.Sprintf(`B="$M/ctl/batches/%[1]s"
jq -nc --arg r %[2]s --arg s %[3]s '{op:"read",target:$s,requests:[range(40)|{memory:$r,offset:0,target_offset:0,length:268435456}]}' > "$T/a.json"
cat "$T/a.json" > "$B/submit"
echo '{"op":"read","target":"%[4]s","requests":[{"memory":"%[2]s","offset":0,"target_offset":0,"length":1048576}]}' > "$B/submit"
truncate -s 600000 "$T/f"
jq -r .state "$B/tasks/40"
echo seal > "$B/ctl"
timeout 60 cat "$B/wait"`, n, x, sparse, f))
	lines := strings.Fields(out)
	if len(lines) != 2 {
		t.Fatalf("unexpected output %q", out)
	}
	if lines[0] != "pending" {
		t.Skipf("the fenced read already ran (%s) before the truncate; the window was missed", lines[0])
	}
	if lines[1] != "failed" {
		t.Errorf("batch ended %s, want failed (short read at EOF)", lines[1])
	}
	if v := m.task(t, n, 39); v["state"] != "completed" {
		t.Errorf("task 39 (group A): %v", v)
	}
	v := m.task(t, n, 40)
	wantStr(t, "tasks/40", v, "state", "failed")
	wantNum(t, "tasks/40", v, "transferred_bytes", 600000)
	wantNum(t, "tasks/40", v, "length", 1048576)
	if e, _ := v["error"].(string); e == "" {
		t.Errorf("tasks/40: no error text for the short read: %v", v)
	} else {
		t.Logf("tasks/40 error: %s", e)
	}
	s := m.readJSON(t, "ctl/batches/"+n+"/status")
	t.Logf("status submissions: %v", s["submissions"])
	m.ok(t, fmt.Sprintf(`cmp -n 600000 "$M/memory/%s/data" "$T/orig"`, x))
}
