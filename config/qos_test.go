package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

const specQoSDoc = `{
  "qos": {
    "version": 1,
    "defaults": {"priority": "medium", "max_inflight_bytes": "64MiB", "max_inflight_requests": 128},
    "tenants": [
      {
        "name": "tenant-a",
        "defaults": {"max_inflight_bytes": "128MiB"},
        "intents": {
          "foreground_get": {"priority": "high"},
          "background_prefetch": {"priority": "low", "max_inflight_requests": 16}
        }
      }
    ]
  }
}`

func TestQoSSpecExample(t *testing.T) {
	q, err := ParseQoSJSON([]byte(specQoSDoc))
	if err != nil {
		t.Fatal(err)
	}
	if *q.Defaults.Priority != PriorityMedium || *q.Defaults.MaxInflightBytes != 64<<20 || *q.Defaults.MaxInflightRequests != 128 {
		t.Fatalf("defaults: %+v", q.Defaults)
	}
	ten := q.Tenants[0]
	bg := q.Defaults.Overlay(ten.Defaults).Overlay(ten.Intents["background_prefetch"])
	if *bg.Priority != PriorityLow || *bg.MaxInflightBytes != 128<<20 || *bg.MaxInflightRequests != 16 {
		t.Fatalf("background_prefetch effective: %+v", bg)
	}
}

func TestQoSDisabledForms(t *testing.T) {
	for _, doc := range []string{`{}`, `{"qos":null}`, `{"qos":{}}`, `{"qos":{"version":1}}`} {
		q, err := ParseQoSJSON([]byte(doc))
		if err != nil || q != nil {
			t.Errorf("%s: %v, %v; want disabled (nil, nil)", doc, q, err)
		}
	}
}

func TestQoSValues(t *testing.T) {
	q, err := ParseQoSJSON([]byte(`{"qos":{"defaults":{"priority":2,"max_inflight_bytes":4096,"allowed_degraded_actions":[]},
		"tenants":[{"name":" T1 ","defaults":{"priority":"HIGH","max_inflight_bytes":"1GB","max_inflight_requests":0}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if *q.Defaults.Priority != PriorityLow || *q.Defaults.MaxInflightBytes != 4096 || q.Defaults.AllowedDegradedActions == nil || len(*q.Defaults.AllowedDegradedActions) != 0 {
		t.Fatalf("defaults: %+v", q.Defaults)
	}
	d := q.Tenants[0].Defaults
	if q.Tenants[0].Name != "t1" || *d.Priority != PriorityHigh || *d.MaxInflightBytes != 1<<30 || *d.MaxInflightRequests != 0 {
		t.Fatalf("tenant: %+v %+v", q.Tenants[0], d)
	}
	// An explicit empty list replaces an inherited one.
	del := []string{"delay"}
	if got := (QoSFields{AllowedDegradedActions: &del}).Overlay(q.Defaults); got.Delay() {
		t.Fatalf("explicit [] did not replace [delay]: %+v", got)
	}
}

func TestQoSInvalidDocuments(t *testing.T) {
	long := strings.Repeat("x", 257)
	for _, c := range []struct{ doc, want string }{
		{`{"qos":{"version":2}}`, "qos.version 2: only version 1 is accepted"},
		{`{"qos":{},"extra":1}`, `unknown field "extra"`},
		{`{"qos":{"defaults":{"prio":1}}}`, `unknown field "prio"`},
		{`{"qos":{"defaults":{"priority":1,"priority":2}}}`, `duplicate field "priority"`},
		{`{"qos":{"defaults":{"priority":"urgent"}}}`, `priority "urgent": want 0/1/2 or high/medium/low`},
		{`{"qos":{"defaults":{"priority":3}}}`, `priority "3"`},
		{`{"qos":{"defaults":{"max_inflight_bytes":"64mb"}}}`, `size "64mb"`},
		{`{"qos":{"defaults":{"max_inflight_requests":-1}}}`, "max_inflight_requests"},
		{`{"qos":{"defaults":{"allowed_degraded_actions":["fallback_transport"]}}}`, `action "fallback_transport" is not supported`},
		{`{"qos":{"defaults":{"allowed_degraded_actions":["local_recompute"]}}}`, `action "local_recompute" is not supported`},
		{`{"qos":{"defaults":{"allowed_degraded_actions":["compress"]}}}`, `action "compress" is not supported`},
		{`{"qos":{"defaults":{"allowed_degraded_actions":["wait"]}}}`, `unknown action "wait"`},
		{`{"qos":{"tenants":[{"name":"a"},{"name":" A "}]}}`, `qos.tenants[1].name "a": duplicate tenant after normalization`},
		{`{"qos":{"tenants":[{"name":"a","intents":{"x":{},"X":{}}}]}}`, `duplicate intent "x" after normalization`},
		{`{"qos":{"tenants":[{"name":"  "}]}}`, "qos.tenants[0].name: empty name"},
		{`{"qos":{"tenants":[{"name":"` + long + `"}]}}`, "257 bytes, more than 256"},
		{`{"qos":{"tenants":[{"name":"a","bogus":1}]}}`, `unknown field "bogus"`},
		{`[]`, "want a JSON object"},
		{`{"qos":{"defaults":{}}} x`, "invalid JSON"},
	} {
		_, err := ParseQoSJSON([]byte(c.doc))
		if err == nil || !errors.Is(err, ErrInvalidQoS) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60s: got %v, want an ErrInvalidQoS containing %q", c.doc, err, c.want)
		}
	}
	big := `{"qos":{"defaults":{}},"pad":"` + strings.Repeat(" ", MaxQoSDocumentBytes) + `"}`
	if _, err := ParseQoSJSON([]byte(big)); err == nil || !strings.Contains(err.Error(), "exceeds the 1MiB limit") {
		t.Errorf("oversized document: %v", err)
	}
	var tenants []string
	for i := 0; i < MaxQoSContracts; i++ {
		tenants = append(tenants, `{"name":"t`+strconv.Itoa(i)+`"}`)
	}
	doc := `{"qos":{"tenants":[` + strings.Join(tenants, ",") + `]}}`
	if _, err := ParseQoSJSON([]byte(doc)); err == nil || !strings.Contains(err.Error(), "4097 contracts exceed the limit of 4096") {
		t.Errorf("too many contracts: %v", err)
	}
}

// The TOML's qos_file, its inline qos_json and a complete engine JSON
// document load the same contracts and settings.
func TestQoSConfigForms(t *testing.T) {
	dir := t.TempDir()
	qf := filepath.Join(dir, "qos.json")
	if err := os.WriteFile(qf, []byte(specQoSDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _ := ParseQoSJSON([]byte(specQoSDoc))
	fromFile, err := Parse("[engine]\nqos_file = '" + qf + "'\n[engine.runtime_queue]\nenabled = true\nmax_dispatch_owners = 8\n")
	if err != nil {
		t.Fatal(err)
	}
	inline, err := Parse("[engine]\nqos_json = '''" + specQoSDoc + "'''\n")
	if err != nil {
		t.Fatal(err)
	}
	ej, err := EngineFromJSON([]byte(`{"max_inflight_batches":128,"max_inflight_bytes":"256MiB","max_transfer_bytes":"64MiB",
		"runtime_queue":{"enabled":true,"max_dispatch_owners":8,"max_dispatch_bytes":"32MiB","deadline_aware":true},` + strings.TrimPrefix(specQoSDoc, "{")))
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]*QoS{"qos_file": fromFile.Engine.QoS, "qos_json": inline.Engine.QoS, "engine json": ej.QoS} {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if ej.MaxInflightBatches != 128 || ej.MaxInflightBytes != 256<<20 || !ej.RuntimeQueue.Enabled || ej.RuntimeQueue.MaxDispatchOwners != 8 ||
		ej.RuntimeQueue.MaxDispatchBytes != 32<<20 || !ej.RuntimeQueue.DeadlineAware || ej.RuntimeQueue.MaxOutstandingOwners != 1024 {
		t.Errorf("engine json settings: %+v", ej.RuntimeQueue)
	}
	if fromFile.Engine.RuntimeQueue.MaxDispatchOwners != 8 {
		t.Errorf("toml runtime_queue: %+v", fromFile.Engine.RuntimeQueue)
	}
	for _, c := range []struct{ doc, want string }{
		{`{"max_inflight_batchez":1}`, `unknown field "max_inflight_batchez"`},
		{`{"runtime_queue":{"enabled":true,"max_dispatch_owners":0}}`, "runtime_queue.max_dispatch_owners (0)"},
		{`{"qos":{"defaults":{"allowed_degraded_actions":["delay"]}}}`, "requires runtime_queue.enabled"},
		{`{"qos":{"version":3}}`, "only version 1"},
	} {
		if _, err := EngineFromJSON([]byte(c.doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.doc, err, c.want)
		}
	}
	if _, err := Parse("[engine]\nqos_json = '{\"qos\":{\"version\":2}}'\n"); err == nil || !strings.Contains(err.Error(), "engine.qos_json") {
		t.Errorf("bad qos_json: %v", err)
	}
}

// FuzzParseQoSJSON: any input either fails with ErrInvalidQoS or yields
// a disabled (nil) or valid set, never a panic.
func FuzzParseQoSJSON(f *testing.F) {
	f.Add([]byte(specQoSDoc))
	f.Add([]byte(`{"qos":{"defaults":{"allowed_degraded_actions":["delay"]}}}`))
	f.Add([]byte(`{"qos":{"tenants":[{"name":"A","intents":{"x":{"priority":0}}}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := ParseQoSJSON(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidQoS) {
				t.Fatalf("error %v does not wrap ErrInvalidQoS", err)
			}
			return
		}
		if q != nil {
			if err := q.Validate(); err != nil {
				t.Fatalf("parsed set fails Validate: %v", err)
			}
		}
	})
}

// Names are exact apart from ASCII trimming and ASCII case: no control
// characters, no Unicode folding (U+212A KELVIN SIGN stays distinct from
// 'k'), valid UTF-8 only.
func TestQoSNames(t *testing.T) {
	q, err := ParseQoSJSON([]byte(`{"qos":{"tenants":[{"name":" KEY\t"},{"name":"\u212aEY"},{"name":"caf\u00c9","intents":{" Get ":{}}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{q.Tenants[0].Name, q.Tenants[1].Name, q.Tenants[2].Name}; !reflect.DeepEqual(got, []string{"key", "\u212aey", "caf\u00c9"}) {
		t.Errorf("names %q: want ASCII folded only", got)
	}
	if _, ok := q.Tenants[2].Intents["get"]; !ok {
		t.Errorf("intents %v: want \"get\"", q.Tenants[2].Intents)
	}
	for _, c := range []struct{ doc, want string }{
		{`{"qos":{"tenants":[{"name":"a\u0000b"}]}}`, `qos.tenants[0].name: name "a\x00b" contains control character U+0000`},
		{`{"qos":{"tenants":[{"name":"a\u0085"}]}}`, "control character U+0085"},
		{`{"qos":{"tenants":[{"name":"a\u2028b"}]}}`, "control character U+2028"},
		{`{"qos":{"tenants":[{"name":"a","intents":{"x\u001fy":{}}}]}}`, `qos.tenants[0] ("a").intents: name "x\x1fy" contains control character U+001F`},
	} {
		_, err := ParseQoSJSON([]byte(c.doc))
		if err == nil || !errors.Is(err, ErrInvalidQoS) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an ErrInvalidQoS containing %q", c.doc, err, c.want)
		}
	}
	// A programmatic config is checked as strictly.
	for name, want := range map[string]string{"a\x00": "control character U+0000", "a\xff": "not valid UTF-8"} {
		bad := &QoS{Version: 1, Tenants: []QoSTenant{{Name: name}}}
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate of name %q: %v, want %q", name, err, want)
		}
	}
}

// A priority is exactly one of the documented values, the words in any
// ASCII case; nothing around it, no Unicode folding.
func TestQoSPriorityWords(t *testing.T) {
	for s, want := range map[string]Priority{"0": PriorityHigh, "high": PriorityHigh, "HiGh": PriorityHigh, "1": PriorityMedium, "MEDIUM": PriorityMedium, "2": PriorityLow, "low": PriorityLow} {
		if p, err := ParsePriority(s); err != nil || p != want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", s, p, err, want)
		}
	}
	for _, s := range []string{" HiGh\n", "high\n", " low", "H\u0130GH", "hi\u0261h", "", "00", "high\x00", "3"} {
		if p, err := ParsePriority(s); err == nil {
			t.Errorf("ParsePriority(%q) = %v, want an error", s, p)
		}
	}
	if _, err := ParseQoSJSON([]byte(`{"qos":{"defaults":{"priority":" HiGh\n"}}}`)); err == nil || !strings.Contains(err.Error(), `priority " HiGh\n"`) {
		t.Errorf("priority \" HiGh\\n\" in a document: %v", err)
	}
}

// max_priority parses like priority and overlays like every field.
func TestQoSMaxPriorityField(t *testing.T) {
	q, err := ParseQoSJSON([]byte(`{"qos":{"defaults":{"max_priority":"high"},"tenants":[{"name":"t","defaults":{"max_priority":2}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if *q.Defaults.MaxPriority != PriorityHigh {
		t.Errorf("defaults max_priority %v", *q.Defaults.MaxPriority)
	}
	if got := q.Defaults.Overlay(q.Tenants[0].Defaults); *got.MaxPriority != PriorityLow {
		t.Errorf("tenant overlay max_priority %v, want low", *got.MaxPriority)
	}
	if got := q.Defaults.Overlay(QoSFields{}); *got.MaxPriority != PriorityHigh {
		t.Errorf("unset max_priority did not inherit: %v", *got.MaxPriority)
	}
	if _, err := ParseQoSJSON([]byte(`{"qos":{"defaults":{"max_priority":"top"}}}`)); err == nil || !strings.Contains(err.Error(), `priority "top"`) {
		t.Errorf("bad max_priority: %v", err)
	}
}

func TestPriorityAgingConfig(t *testing.T) {
	if d := DefaultEngine().RuntimeQueue.PriorityAging; d != Duration(time.Second) {
		t.Errorf("default priority_aging %v, want 1s", d)
	}
	e := DefaultEngine()
	e.RuntimeQueue.PriorityAging = Duration(-time.Millisecond)
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "engine.runtime_queue.priority_aging (-1ms) must be >= 0") {
		t.Errorf("negative priority_aging: %v", err)
	}
	e.RuntimeQueue.PriorityAging = 0
	if err := e.Validate(); err != nil {
		t.Errorf("priority_aging 0 (off): %v", err)
	}
	d, err := Parse("[engine]\n[engine.runtime_queue]\npriority_aging = \"250ms\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if d.Engine.RuntimeQueue.PriorityAging != Duration(250*time.Millisecond) {
		t.Errorf("toml priority_aging: %v", d.Engine.RuntimeQueue.PriorityAging)
	}
	ej, err := EngineFromJSON([]byte(`{"runtime_queue":{"priority_aging":"2s"}}`))
	if err != nil || ej.RuntimeQueue.PriorityAging != Duration(2*time.Second) {
		t.Errorf("engine json priority_aging: %v %v", ej.RuntimeQueue.PriorityAging, err)
	}
}

// A programmatic config cannot carry a priority ParsePriority would refuse.
func TestQoSValidatePriorityRange(t *testing.T) {
	bad := Priority(3)
	for name, q := range map[string]*QoS{
		"qos.defaults.priority":                 {Version: 1, Defaults: QoSFields{Priority: &bad}},
		"qos.tenants[0].defaults.max_priority":  {Version: 1, Tenants: []QoSTenant{{Name: "t", Defaults: QoSFields{MaxPriority: &bad}}}},
		"qos.tenants[0].intents.x.max_priority": {Version: 1, Tenants: []QoSTenant{{Name: "t", Intents: map[string]QoSFields{"x": {MaxPriority: &bad}}}}},
	} {
		if err := q.Validate(); err == nil || !strings.Contains(err.Error(), name+" 3: want 0/1/2") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
