// memseg_test.go: memory segments (mem://MEMORY) and physical owners as a
// script sees them: adjacent requests merge and share physical_owner,
// each task keeps its own length and bytes.

package tests

import (
	"fmt"
	"strings"
	"testing"
)

func TestMemorySegment(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	src := m.register(t, "src", 65536)
	dst := m.register(t, "dst", 65536)
	m.ok(t, fmt.Sprintf(`head -c 65536 /dev/urandom > "$T/src.bin"
dd if="$T/src.bin" of="$M/memory/%s/data" bs=65536 conv=notrunc status=none`, src))
	r := m.run(t, `echo '{"name":"nomem","uri":"mem://missing","permission":"read"}' > "$M/segments/open"`)
	if r.code == 0 || !strings.Contains(r.stderr, eNOENT) {
		t.Errorf("open mem://missing: %s\nwant %s", r, eNOENT)
	}
	if e := m.ok(t, `cat "$M/error"`); !strings.Contains(e, `"missing"`) {
		t.Errorf("/error after mem://missing: %q", e)
	}
	name := uniq("memseg")
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","uri":"mem://%s","permission":"read"}' > "$M/segments/open"`, name, src))
	t.Cleanup(func() { m.sh(t, `rmdir "$M/segments/`+name+`" 2>/dev/null`) })
	info := m.readJSON(t, "segments/"+name+"/info")
	wantStr(t, "info", info, "memory", src)
	wantStr(t, "info", info, "location", "cpu")
	wantNum(t, "info", info, "size", 65536)

	// Three adjacent requests (one owner), then one apart (its own).
	doc := fmt.Sprintf(`{"op":"read","target":"%s","requests":[
{"memory":"%s","offset":0,"target_offset":4096,"length":4096},
{"memory":"%s","offset":4096,"target_offset":8192,"length":4096},
{"memory":"%s","offset":8192,"target_offset":12288,"length":100},
{"memory":"%s","offset":32768,"target_offset":0,"length":4096}]}`, name, dst, dst, dst, dst)
	n, st := m.run1(t, strings.ReplaceAll(doc, "\n", ""))
	if st != "completed" {
		t.Fatalf("state %s", st)
	}
	for i, want := range []float64{0, 0, 0, 3} {
		v := m.task(t, n, i)
		wantNum(t, "task", v, "physical_owner", want)
		wantStr(t, "task", v, "transport", "memory")
		wantStr(t, "task", v, "state", "completed")
	}
	wantNum(t, "task", m.task(t, n, 2), "transferred_bytes", 100)
	// The bytes: dst[0:8292) = src[4096:12388), dst[32768:36864) = src[0:4096).
	m.ok(t, fmt.Sprintf(`cmp <(head -c 8292 "$M/memory/%s/data") <(tail -c +4097 "$T/src.bin" | head -c 8292)
cmp <(tail -c +32769 "$M/memory/%s/data" | head -c 4096) <(head -c 4096 "$T/src.bin")`, dst, dst))

	// A read-only memory segment refuses writes.
	r = m.run(t, fmt.Sprintf(`echo '{"op":"write","target":"%s","requests":[{"memory":"%s","length":4096}]}' > "$M/ctl/batches/%s/submit"`, name, dst, m.clone(t)))
	if r.code == 0 || !strings.Contains(r.stderr, eACCES) {
		t.Errorf("write to a read-only memory segment: %s\nwant %s", r, eACCES)
	}
}

// TestMemoryAliasCancel: a memory submission queued behind a running
// file submission that fills the same region; cancelling the second task
// of a merged pair cancels its physical owner (the first) too, and
// cancel_all ends the rest.
func TestMemoryAliasCancel(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: slowConfig})
	_, S := m.scratchDirs(t)
	m.ok(t, `truncate -s 256M "$S/sparse"`)
	region := m.register(t, "alias", "256MiB")
	src := m.register(t, "aliassrc", 65536)
	file := m.openSegment(t, "alias", S+"/sparse", "read")
	name := uniq("aliasmem")
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","uri":"mem://%s","permission":"read"}' > "$M/segments/open"`, name, src))
	t.Cleanup(func() { m.sh(t, `rmdir "$M/segments/`+name+`" 2>/dev/null`) })
	n := m.clone(t)
	// 1024 reads of 256 MiB, one at a time: the memory submission after
	// it overlaps the same region, so it waits (fenced) for all of them.
	m.ok(t, fmt.Sprintf(`jq -nc --arg r %s --arg s %s '{op:"read",target:$s,requests:[range(1024)|{memory:$r,offset:0,target_offset:0,length:268435456}]}' > "$M/ctl/batches/%s/submit"
echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096},{"memory":"%s","offset":4096,"target_offset":4096,"length":4096}]}' > "$M/ctl/batches/%s/submit"
echo "cancel 1025" > "$M/ctl/batches/%s/ctl"`, region, file, n, name, region, region, n, n))
	for _, i := range []int{1024, 1025} {
		v := m.task(t, n, i)
		wantStr(t, "task", v, "state", "cancelled")
		wantNum(t, "task", v, "physical_owner", 1024)
	}
	m.ctl(t, n, "cancel_all")
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "cancelled" {
		t.Errorf("state %s", st)
	}
	s := m.readJSON(t, "ctl/batches/"+n+"/status")
	subs := s["submissions"].([]any)
	mem := subs[1].(map[string]any)
	wantNum(t, "memory submission", mem, "completed_requests", 0)
	wantNum(t, "memory submission", mem, "request_index", 0)
	wantNum(t, "memory submission", mem, "affected_requests", 0)
}

// TestMemorySegmentQoS: a memory-segment submission is held to its "qos"
// contract like a file submission. A hard-zero contract (max_inflight_requests
// 0) used to be ignored for memory segments: the copy ran. Now the write
// to submit fails with EAGAIN, changes nothing, and the batch's error
// file names the contract; an uncapped tenant's submission runs.
func TestMemorySegmentQoS(t *testing.T) {
	cfg := "[engine]\nqos_json = '" + `{"qos":{"version":1,"tenants":[{"name":"zero","defaults":{"max_inflight_requests":0}},{"name":"free","defaults":{}}]}}` + "'\n"
	m := startDaemon(t, daemonOpts{config: cfg})
	src := m.register(t, "src", 65536)
	dst := m.register(t, "dst", 65536)
	m.ok(t, fmt.Sprintf(`head -c 65536 /dev/urandom > "$M/memory/%s/data"`, src))
	name := uniq("memseg")
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","uri":"mem://%s","permission":"read"}' > "$M/segments/open"`, name, src))
	t.Cleanup(func() { m.sh(t, `rmdir "$M/segments/`+name+`" 2>/dev/null`) })
	doc := func(tenant string) string {
		return fmt.Sprintf(`{"op":"read","target":"%s","qos":{"tenant":"%s"},"requests":[{"memory":"%s","length":4096}]}`, name, tenant, dst)
	}
	n := m.clone(t)
	r := m.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(doc("zero")), n))
	if r.code == 0 || !strings.Contains(r.stderr, eAGAIN) {
		t.Fatalf("memory-segment submission under a hard-zero contract: %s\nwant %s", r, eAGAIN)
	}
	if e := m.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/error"`, n)); !strings.Contains(e, `qos contract "zero" allows no requests`) {
		t.Fatalf("error file %q does not name the contract", e)
	}
	if c := m.taskCount(t, n); c != 0 {
		t.Fatalf("%d tasks after a refused submission", c)
	}
	m.ok(t, fmt.Sprintf(`! cmp -s <(head -c 4096 "$M/memory/%s/data") <(head -c 4096 "$M/memory/%s/data")`, dst, src))
	if _, st := m.run1(t, doc("free")); st != "completed" {
		t.Fatalf("uncapped tenant: %s", st)
	}
	m.ok(t, fmt.Sprintf(`cmp <(head -c 4096 "$M/memory/%s/data") <(head -c 4096 "$M/memory/%s/data")`, dst, src))
}
