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
