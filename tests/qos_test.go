// qos_test.go owns admission through the mount: a submission's "qos"
// context against a tenant's byte cap, in reject mode (EAGAIN at the
// write) and in delay mode (the submission waits at its batch head and
// completes once capacity frees), the /qos files, and a bad --qos
// document stopping the daemon before it mounts.
//
// The cap is held by the long batch of inflight_test.go (4096 reads of
// 256 MiB: exactly 1 TiB of payload) submitted as tenant-a, whose cap is
// 1 TiB; one more 4 KiB of tenant-a is over it.

package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const qosCapDoc = `{"qos":{"version":1,"tenants":[{"name":"Tenant-A","defaults":{"max_inflight_bytes":"1TiB"%s}}]}}`

// startTenantBatch is the long batch submitted as tenant-a (not waited
// for: under a delay contract it may stay queued).
func (m *mount) startTenantBatch(t *testing.T) slowBatch {
	t.Helper()
	return m.submitSlowBatch(t, `qos:{tenant:"tenant-a"},`)
}

// smallTenantSubmit is a 4 KiB read document as tenant.
func smallTenantSubmit(m *mount, t *testing.T, tenant string) string {
	t.Helper()
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 4096 /dev/urandom > "$S/small"`)
	r := m.register(t, "small", 4096)
	s := m.openSegment(t, "small", S+"/small", "read")
	return fmt.Sprintf(`{"op":"read","target":"%s","qos":{"tenant":"%s","priority":"low"},"requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096}]}`, s, tenant, r)
}

func TestQoSRejectOverTenantByteCap(t *testing.T) {
	cfg := strings.Replace(slowConfig, `default_timeout = "10m"`, `default_timeout = "10m"`+"\nqos_json = '"+fmt.Sprintf(qosCapDoc, "")+"'", 1)
	m := startDaemon(t, daemonOpts{config: cfg})
	b := m.startTenantBatch(t)
	if st := m.state(t, b.n); st != "open" {
		t.Fatalf("the tenant's long batch is already %s", st)
	}
	sub := smallTenantSubmit(m, t, " TENANT-A ")
	n := m.clone(t)
	r := m.run(t, fmt.Sprintf(`echo '%s' > "$M/ctl/batches/%s/submit"`, sub, n))
	if r.code == 0 || !strings.Contains(r.stderr, "Resource temporarily unavailable") {
		t.Fatalf("submit over tenant-a's byte cap: %s\nwant EAGAIN (Resource temporarily unavailable)", r)
	}
	if e := m.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/error"`, n)); !strings.Contains(e, `qos contract "tenant-a"`) {
		t.Errorf("error file: %q, want it to name the contract", e)
	}
	if c := m.taskCount(t, n); c != 0 {
		t.Errorf("%d tasks after the refused submit, want 0", c)
	}
	// Another tenant is not capped.
	n2, st := m.run1(t, smallTenantSubmit(m, t, "tenant-b"))
	if st != "completed" {
		t.Errorf("tenant-b: batch %s %s", n2, st)
	}
	usage := m.line(t, `jq -c '.[1]' "$M/qos/usage"`)
	if usage != `{"contract":"tenant-a","owners":4096,"bytes":1099511627776,"waiting":0}` {
		t.Errorf("/qos/usage: %s", usage)
	}
	if s := m.readJSON(t, "stats")["qos"].(map[string]any); s["rejected"].(float64) != 1 {
		t.Errorf("stats qos: %v", s)
	}
}

const delayConfig = slowConfig + `
[engine.runtime_queue]
enabled = true
max_outstanding_owners = 8192
max_outstanding_bytes = "2TiB"
max_dispatch_bytes = "512MiB"
`

func TestQoSDelayCompletesWhenCapacityFrees(t *testing.T) {
	qos := filepath.Join(t.TempDir(), "qos.json")
	if err := os.WriteFile(qos, []byte(fmt.Sprintf(qosCapDoc, `,"allowed_degraded_actions":["delay"]`)), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startDaemon(t, daemonOpts{config: delayConfig, args: []string{"--qos", qos}})
	b := m.startTenantBatch(t)
	sub := smallTenantSubmit(m, t, "tenant-a")
	n := m.clone(t)
	m.ok(t, fmt.Sprintf(`echo '%s' > "$M/ctl/batches/%s/submit"; echo seal > "$M/ctl/batches/%s/ctl"`, sub, n, n))
	// It waits at its batch head: not dispatched while the cap is full.
	waiting := func() float64 { return m.readJSON(t, "stats")["runtime_queue"].(map[string]any)["waiting"].(float64) }
	deadline := time.Now().Add(10 * time.Second)
	for waiting() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the small batch never waited: stats %v", m.readJSON(t, "stats")["runtime_queue"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := m.taskState(t, n, 0); st != "pending" {
		t.Fatalf("the delayed task is %s, want pending", st)
	}
	if st := m.state(t, n); st != "open" {
		t.Fatalf("the delayed batch is %s, want open", st)
	}
	m.ok(t, fmt.Sprintf(`echo cancel_all > "$M/ctl/batches/%s/ctl"; timeout 10 cat "$M/ctl/batches/%s/wait"`, b.n, b.n))
	if st := m.line(t, fmt.Sprintf(`timeout 10 cat "$M/ctl/batches/%s/wait"`, n)); st != "completed" {
		t.Fatalf("after capacity freed: %s, want completed", st)
	}
	if s := m.readJSON(t, "stats")["qos"].(map[string]any); s["delayed"].(float64) < 1 || s["rejected"].(float64) != 0 {
		t.Errorf("stats qos: %v", s)
	}
	if !strings.Contains(m.ok(t, `cat "$M/metrics"`), "orbitefs_qos_delayed_total 1\n") {
		t.Errorf("metrics lack orbitefs_qos_delayed_total 1")
	}
}

func TestQoSFiles(t *testing.T) {
	qos := filepath.Join(t.TempDir(), "qos.json")
	spec := `{"qos":{"version":1,"defaults":{"priority":"medium","max_inflight_bytes":"64MiB","max_inflight_requests":128},
"tenants":[{"name":"tenant-a","defaults":{"max_inflight_bytes":"128MiB"},
"intents":{"foreground_get":{"priority":"high"},"background_prefetch":{"priority":"low","max_inflight_requests":16}}}]}}`
	if err := os.WriteFile(qos, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startDaemon(t, daemonOpts{args: []string{"--qos", qos}})
	var contracts []map[string]any
	if err := json.Unmarshal([]byte(m.ok(t, `cat "$M/qos/contracts"`)), &contracts); err != nil || len(contracts) != 4 {
		t.Fatalf("/qos/contracts: %v %v", contracts, err)
	}
	// The startup log says which file was loaded and how many contracts.
	if want := fmt.Sprintf(`msg="qos contracts loaded" op=mount source=%s contracts=4 tenants=1`, qos); !strings.Contains(m.logText(), want) {
		t.Errorf("the daemon log lacks %q:\n%s", want, m.logText())
	}
	out := m.ok(t, `exec 3<>"$M/qos/resolve"
echo '{"tenant":" Tenant-A ","intent":"foreground_get","priority":"low"}' >&3
cat <&3`)
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("/qos/resolve answered %q: %v", out, err)
	}
	if res["matched_contract"] != "tenant-a/foreground_get" || res["effective_priority"] != "high" {
		t.Fatalf("/qos/resolve: %v", res)
	}
	if f := res["fields"].(map[string]any); f["max_inflight_bytes"].(float64) != 128<<20 || f["max_inflight_requests"].(float64) != 128 {
		t.Errorf("resolved fields %v: want 128MiB inherited from the tenant, 128 requests from the defaults", f)
	}
	// The one-shot form: one command, one open file.
	one := m.line(t, `(echo '{"tenant":"nobody"}' >&3; cat <&3) 3<>"$M/qos/resolve" | jq -r '.matched_contract + " " + .effective_priority'`)
	if one != "default medium" {
		t.Errorf("one-shot resolve: %q, want \"default medium\"", one)
	}
	r := m.run(t, `exec 3<>"$M/qos/resolve"; echo '{"tenant":"a","bogus":1}' >&3`)
	if r.code == 0 || !strings.Contains(r.stderr, "Invalid argument") {
		t.Errorf("bad resolve document: %s", r)
	}
}

func TestQoSBadDocumentStopsDaemon(t *testing.T) {
	for name, doc := range map[string]string{
		"action": `{"qos":{"defaults":{"allowed_degraded_actions":["compress"]}}}`,
		"delay":  `{"qos":{"defaults":{"max_inflight_bytes":"1MiB","allowed_degraded_actions":["delay"]}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			qos := filepath.Join(t.TempDir(), "qos.json")
			if err := os.WriteFile(qos, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			m := startDaemon(t, daemonOpts{noWait: true, args: []string{"--qos", qos}})
			code, err := m.waitExit(10 * time.Second)
			if err != nil || code == 0 {
				t.Fatalf("daemon with a bad --qos: exit %d, %v", code, err)
			}
			want := map[string]string{"action": `action "compress" is not supported`, "delay": "requires runtime_queue.enabled"}[name]
			if log := m.logText(); !strings.Contains(log, want) {
				t.Errorf("daemon output lacks %q:\n%s", want, log)
			}
		})
	}
}

// --engine-json loads a complete engine document (runtime queue and QoS
// included); a bad one stops the daemon before it mounts.
func TestEngineJSONFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "engine.json")
	doc := `{"max_inflight_batches":128,"max_inflight_bytes":"256MiB","max_transfer_bytes":"64MiB",
"runtime_queue":{"enabled":true,"max_dispatch_owners":8,"max_dispatch_bytes":"32MiB","deadline_aware":true},
"qos":{"defaults":{"max_inflight_bytes":"64MiB","max_inflight_requests":128,"allowed_degraded_actions":["delay","reject"]}}}`
	if err := os.WriteFile(good, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startDaemon(t, daemonOpts{args: []string{"--engine-json", good}})
	q := m.readJSON(t, "stats")["runtime_queue"].(map[string]any)
	if q["enabled"] != true || q["deadline_aware"] != true {
		t.Errorf("stats runtime_queue: %v", q)
	}
	if c := m.line(t, `jq -c '.[0] | [.max_inflight_bytes, .max_inflight_requests, .allowed_degraded_actions]' "$M/qos/contracts"`); c != `[67108864,128,["delay","reject"]]` {
		t.Errorf("/qos/contracts default: %s", c)
	}
	// A submission still runs end to end through the queue.
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 65536 /dev/urandom > "$S/f"`)
	r := m.register(t, "ej", 65536)
	s := m.openSegment(t, "ej", S+"/f", "read")
	if n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","deadline":"5s","requests":[{"memory":"%s","length":65536}]}`, s, r)); st != "completed" {
		t.Errorf("batch %s: %s", n, st)
	}
	m.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" "$S/f"`, r))

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"runtime_queue":{"enabled":true,"max_dispatch_ownerz":8}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	b := startDaemon(t, daemonOpts{noWait: true, args: []string{"--engine-json", bad}})
	code, err := b.waitExit(10 * time.Second)
	if err != nil || code == 0 {
		t.Fatalf("daemon with a bad --engine-json: exit %d, %v", code, err)
	}
	if log := b.logText(); !strings.Contains(log, `unknown field "max_dispatch_ownerz"`) {
		t.Errorf("daemon output lacks the unknown field:\n%s", log)
	}
}

// writeQoS writes a --qos document to a temporary file.
func writeQoS(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qos.json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// resolveAnswer writes doc to a fresh open of /qos/resolve and returns
// the run (the answer on stdout).
func (m *mount) resolveAnswer(t *testing.T, doc string) shResult {
	t.Helper()
	return m.run(t, fmt.Sprintf(`exec 3<>"$M/qos/resolve"; echo %s >&3; cat <&3`, shq(doc)))
}

// The starvation table: tenant-a's delay contract is full (the long
// batch) and 8 more of its submissions wait at their batch heads;
// tenant-b has its own contract, empty. Each of tenant-b's 4 low-priority
// reads, with a 2 s deadline, completes at once: a waiter on a full
// contract holds back only its own contract's waiters.
func TestQoSFullTenantDoesNotStarveAnother(t *testing.T) {
	qos := writeQoS(t, `{"qos":{"version":1,"tenants":[
{"name":"tenant-a","defaults":{"max_inflight_bytes":"1TiB","allowed_degraded_actions":["delay"]}},
{"name":"tenant-b","defaults":{"max_inflight_bytes":"8MiB","allowed_degraded_actions":["delay"]}}]}}`)
	// A window as large as the outstanding budget: only the contracts
	// decide who waits.
	cfg := strings.Replace(delayConfig, `max_dispatch_bytes = "512MiB"`, "max_dispatch_owners = 8192\nmax_dispatch_bytes = \"2TiB\"", 1)
	m := startDaemon(t, daemonOpts{config: cfg, args: []string{"--qos", qos}})
	m.startTenantBatch(t)
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 65536 /dev/urandom > "$S/small"`)
	r := m.register(t, "small", 65536)
	s := m.openSegment(t, "small", S+"/small", "read")
	read := func(tenant, extra string, i int) string {
		return fmt.Sprintf(`{"op":"read","target":"%s",%s"qos":{"tenant":"%s"},"requests":[{"memory":"%s","offset":%d,"target_offset":%d,"length":4096}]}`, s, extra, tenant, r, i*4096, i*4096)
	}
	for i := 0; i < 8; i++ {
		n := m.clone(t)
		m.submit(t, n, read("tenant-a", "", i))
		m.ctl(t, n, "seal")
	}
	waitingA := func() string { return m.line(t, `jq -c '.[1] | [.contract, .waiting]' "$M/qos/usage"`) }
	deadline := time.Now().Add(10 * time.Second)
	for waitingA() != `["tenant-a",8]` {
		if time.Now().After(deadline) {
			t.Fatalf("tenant-a's 8 submissions never all waited: %s", m.ok(t, `cat "$M/qos/usage"`))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 4; i++ {
		doc := strings.Replace(read("tenant-b", `"deadline":"2s",`, 8+i), `"tenant":"tenant-b"`, `"tenant":"tenant-b","priority":"low"`, 1)
		if n, st := m.run1(t, doc); st != "completed" {
			t.Fatalf("tenant-b's read %d behind tenant-a's full contract: batch %s %s, want completed (task: %s)", i, n, st, m.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/tasks/0"`, n)))
		}
	}
	if w := waitingA(); w != `["tenant-a",8]` {
		t.Errorf("tenant-a after tenant-b's reads: %s, want its 8 still waiting", w)
	}
}

// Asking for a priority above the default (medium) needs the contract's
// max_priority: otherwise the submission's write fails with EACCES,
// queues nothing, and the error file says which contract allows what.
func TestQoSPriorityNeedsContractPermission(t *testing.T) {
	qos := writeQoS(t, `{"qos":{"version":1,"tenants":[{"name":"plain"},{"name":"vip","defaults":{"max_priority":"high"}}]}}`)
	m := startDaemon(t, daemonOpts{args: []string{"--qos", qos}})
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 4096 /dev/urandom > "$S/f"`)
	r := m.register(t, "p", 4096)
	s := m.openSegment(t, "p", S+"/f", "read")
	doc := func(tenant, prio string) string {
		return fmt.Sprintf(`{"op":"read","target":"%s","qos":{"tenant":"%s","priority":"%s"},"requests":[{"memory":"%s","length":4096}]}`, s, tenant, prio, r)
	}
	n := m.clone(t)
	res := m.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(doc("plain", "high")), n))
	if res.code == 0 || !strings.Contains(res.stderr, "Permission denied") {
		t.Fatalf("plain asking high: %s\nwant EACCES (Permission denied)", res)
	}
	want := `priority high: qos contract "plain" allows requests at most priority medium (its max_priority)`
	if e := m.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/error"`, n)); !strings.Contains(e, want) {
		t.Errorf("error file %q lacks %q", e, want)
	}
	if c := m.taskCount(t, n); c != 0 {
		t.Errorf("%d tasks after the refused submit, want 0", c)
	}
	res = m.resolveAnswer(t, `{"tenant":"plain","priority":"high"}`)
	if res.code == 0 || !strings.Contains(res.stderr, "Permission denied") {
		t.Errorf("resolve plain asking high: %s\nwant EACCES", res)
	}
	if e := m.ok(t, `cat "$M/error"`); !strings.Contains(e, want) {
		t.Errorf("/error %q lacks %q", e, want)
	}
	for _, c := range []struct{ tenant, prio string }{{"plain", "low"}, {"plain", "medium"}, {"vip", "high"}} {
		if n, st := m.run1(t, doc(c.tenant, c.prio)); st != "completed" {
			t.Errorf("%s asking %s: batch %s %s", c.tenant, c.prio, n, st)
		}
	}
	if p := m.line(t, `(echo '{"tenant":"vip","priority":"high"}' >&3; jq -r .effective_priority <&3) 3<>"$M/qos/resolve"`); p != "high" {
		t.Errorf("vip resolved to %q, want high", p)
	}
	if c := m.line(t, `jq -c '[.[] | .max_priority]' "$M/qos/contracts"`); c != `["medium","medium","high"]` {
		t.Errorf("/qos/contracts max_priority: %s", c)
	}
}

// QoS names compare exactly (ASCII case aside) and refuse control
// characters; a priority is exactly a documented value. The document
// itself may end with echo's newline, as everywhere on the mount.
func TestQoSNamesAndPriorityExact(t *testing.T) {
	qos := writeQoS(t, `{"qos":{"version":1,"defaults":{"max_priority":"high"},"tenants":[{"name":"key"}]}}`)
	m := startDaemon(t, daemonOpts{args: []string{"--qos", qos}})
	matched := func(doc string) string {
		t.Helper()
		res := m.resolveAnswer(t, doc)
		if res.code != 0 {
			t.Fatalf("resolve %s: %s", doc, res)
		}
		var a map[string]any
		if err := json.Unmarshal([]byte(res.stdout), &a); err != nil {
			t.Fatalf("resolve %s answered %q", doc, res.stdout)
		}
		return fmt.Sprint(a["matched_contract"], " ", a["effective_priority"])
	}
	for doc, want := range map[string]string{
		`{"tenant":" KEY "}`:                 "key medium",
		`{"tenant":"\u212aey"}`:              "default medium", // KELVIN SIGN is not k
		`{"tenant":"key","priority":"HiGh"}`: "key high",
		`{"tenant":"key","priority":0}`:      "key high",
	} {
		if got := matched(doc); got != want {
			t.Errorf("resolve %s: %q, want %q", doc, got, want)
		}
	}
	for doc, want := range map[string]string{
		`{"tenant":"k\u0000ey"}`:                  `contains control character U+0000`,
		`{"intent":"get\u0000"}`:                  `contains control character U+0000`,
		`{"tenant":"key","priority":" HiGh\n"}`:   `priority " HiGh\n": want 0/1/2 or high/medium/low`,
		`{"tenant":"key","priority":"H\u0130GH"}`: `want 0/1/2 or high/medium/low`,
	} {
		res := m.resolveAnswer(t, doc)
		if res.code == 0 || !strings.Contains(res.stderr, "Invalid argument") {
			t.Errorf("resolve %s: %s\nwant EINVAL", doc, res)
			continue
		}
		if e := m.ok(t, `cat "$M/error"`); !strings.Contains(e, want) {
			t.Errorf("resolve %s: /error %q lacks %q", doc, e, want)
		}
	}
	// A submission with such a name is refused at its write too.
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 4096 /dev/urandom > "$S/f"`)
	r := m.register(t, "n", 4096)
	s := m.openSegment(t, "n", S+"/f", "read")
	n := m.clone(t)
	res := m.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(fmt.Sprintf(`{"op":"read","target":"%s","qos":{"tenant":"k\u0000ey"},"requests":[{"memory":"%s","length":4096}]}`, s, r)), n))
	if res.code == 0 || !strings.Contains(res.stderr, "Invalid argument") {
		t.Errorf("submission with a NUL in its tenant: %s\nwant EINVAL", res)
	}
	if e := m.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/error"`, n)); !strings.Contains(e, "control character U+0000") {
		t.Errorf("batch error %q lacks the control character", e)
	}
}
