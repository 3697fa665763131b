package control

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

func roundJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(marshal(v), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRenderTask(t *testing.T) {
	for _, c := range []struct {
		name string
		in   engine.TaskStatus
		want string
	}{
		{"completed", engine.TaskStatus{Index: 0, State: engine.TaskCompleted, Length: 1 << 20, Transferred: 1 << 20, Transport: engine.TransportIOUring},
			`{"error":null,"failover_count":0,"index":0,"length":1048576,"physical_owner":0,"remote_effect":"none","state":"completed","transferred_bytes":1048576,"transport":"io_uring"}`},
		{"failed write", engine.TaskStatus{Index: 3, State: engine.TaskFailed, Length: 10, Transferred: 4, Transport: engine.TransportIOUring,
			PhysicalOwner: 3, Err: errors.New("pwrite: EIO"), RemoteEffect: engine.EffectUnknown},
			`{"error":"pwrite: EIO","failover_count":0,"index":3,"length":10,"physical_owner":3,"remote_effect":"unknown","state":"failed","transferred_bytes":4,"transport":"io_uring"}`},
		{"applied write", engine.TaskStatus{Index: 2, State: engine.TaskCompleted, Length: 4, Transferred: 4, Transport: engine.TransportGDS, RemoteEffect: engine.EffectApplied},
			`{"error":null,"failover_count":0,"index":2,"length":4,"physical_owner":0,"remote_effect":"applied","state":"completed","transferred_bytes":4,"transport":"gds"}`},
		{"pending", engine.TaskStatus{Index: 1, State: engine.TaskPending, Length: 8, FailoverCount: 1},
			`{"error":null,"failover_count":1,"index":1,"length":8,"physical_owner":0,"remote_effect":"none","state":"pending","transferred_bytes":0,"transport":"unspec"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _ := json.Marshal(roundJSON(t, RenderTask(c.in)))
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestRenderStatus(t *testing.T) {
	snap := BatchSnapshot{
		ID: 7, State: engine.StateFailed, Sealed: true, Capacity: 16,
		Tasks: []engine.TaskStatus{
			{Index: 0, State: engine.TaskCompleted}, {Index: 1, State: engine.TaskFailed},
			{Index: 2, State: engine.TaskCancelled}, {Index: 3, State: engine.TaskCompleted},
		},
		Reports: []engine.Report{
			{Tasks: engine.TaskRange{First: 0, Count: 3}, Op: engine.OpWrite, Target: "file:///tmp/a", Done: true,
				CompletedRequests: 1, CompletedBytes: 4096, RequestIndex: 1, AffectedRequests: 1, LocallyDrained: true,
				Err: errors.New("requests[1]: boom")},
			{Tasks: engine.TaskRange{First: 3, Count: 1}, Op: engine.OpRead, Target: "file:///tmp/b", Done: true,
				CompletedRequests: 1, CompletedBytes: 8, RequestIndex: -1, LocallyDrained: true},
		},
		Targets: map[int]string{0: "a", 3: "b"},
	}
	m := roundJSON(t, RenderStatus(snap))
	for k, want := range map[string]any{"id": 7.0, "state": "failed", "sealed": true, "capacity": 16.0} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	tasks := m["tasks"].(map[string]any)
	for k, want := range map[string]float64{"total": 4, "pending": 0, "running": 0, "completed": 2, "failed": 1, "cancelled": 1} {
		if tasks[k] != want {
			t.Errorf("tasks.%s = %v, want %v", k, tasks[k], want)
		}
	}
	subs := m["submissions"].([]any)
	s0, s1 := subs[0].(map[string]any), subs[1].(map[string]any)
	if s0["target"] != "a" || s0["uri"] != "file:///tmp/a" || s0["op"] != "write" || s0["request_index"] != 1.0 ||
		s0["affected_requests"] != 1.0 || s0["completed_bytes"] != 4096.0 || s0["error"] != "requests[1]: boom" ||
		s0["tasks"].(map[string]any)["count"] != 3.0 || s0["locally_drained"] != true || s0["done"] != true {
		t.Errorf("submission 0 = %v", s0)
	}
	if s1["target"] != "b" || s1["error"] != nil || s1["request_index"] != -1.0 || s1["index"] != 1.0 {
		t.Errorf("submission 1 = %v", s1)
	}
	// An empty batch renders an empty list, not null.
	if got := string(marshal(RenderStatus(BatchSnapshot{ID: 1}))); !strings.Contains(got, `"submissions": []`) {
		t.Errorf("empty batch: %s", got)
	}
}

func TestRenderSegmentInfo(t *testing.T) {
	m := roundJSON(t, RenderSegmentInfo("cache", engine.SegmentInfo{URI: "file:///tmp/c", Path: "/tmp/c", Size: 10, Permission: engine.PermReadWrite}))
	if m["name"] != "cache" || m["permission"] != "read_write" || m["uri"] != "file:///tmp/c" || m["size"] != 10.0 || m["offset"] != 0.0 {
		t.Errorf("segment info = %v", m)
	}
}

func TestMemoryInfoOmitsEmptyShm(t *testing.T) {
	if got := string(marshal(MemoryInfo{Name: "b", Location: "cpu", BaseAddress: 4096, Bytes: 8})); strings.Contains(got, "shm") {
		t.Errorf("private memory renders shm: %s", got)
	}
}

// TestMetricsCoverStats fails when engine.Stats gains a numeric field
// that /metrics does not export.
func TestMetricsCoverStats(t *testing.T) {
	out := string(RenderMetrics(engine.Stats{IOUring: &engine.FileStats{}, Staging: &engine.StagingStats{}}, "test"))
	count := func(typ reflect.Type) int {
		n := 0
		for i := 0; i < typ.NumField(); i++ {
			switch typ.Field(i).Type.Kind() {
			case reflect.Int, reflect.Int64, reflect.Uint64, reflect.Bool:
				n++
			}
		}
		return n
	}
	stats := count(reflect.TypeOf(engine.Stats{}))
	if len(engineMetrics) != stats {
		t.Errorf("engine.Stats has %d scalar fields, /metrics exports %d: update metrics.go", stats, len(engineMetrics))
	}
	if n := count(reflect.TypeOf(engine.QueueStats{})); len(queueMetrics) != n {
		t.Errorf("engine.QueueStats has %d scalar fields, /metrics exports %d: update qos.go", n, len(queueMetrics))
	}
	if n := count(reflect.TypeOf(engine.QoSStats{})); len(qosMetrics) != n {
		t.Errorf("engine.QoSStats has %d scalar fields, /metrics exports %d: update qos.go", n, len(qosMetrics))
	}
	if n := count(reflect.TypeOf(engine.FileStats{})); len(ioUringMetrics) != n {
		t.Errorf("engine.FileStats has %d scalar fields, /metrics exports %d: update metrics.go", n, len(ioUringMetrics))
	}
	if n := count(reflect.TypeOf(engine.StagingStats{})); len(stagingMetrics) != n {
		t.Errorf("engine.StagingStats has %d scalar fields, /metrics exports %d: update metrics.go", n, len(stagingMetrics))
	}
	if n := count(reflect.TypeOf(engine.MappedStats{})); len(mappedMetrics) != n {
		t.Errorf("engine.MappedStats has %d scalar fields, /metrics exports %d: update metrics.go", n, len(mappedMetrics))
	}
	if n := count(reflect.TypeOf(engine.GDSStats{})); len(gdsMetrics) != n {
		t.Errorf("engine.GDSStats has %d scalar fields, /metrics exports %d: update metrics.go", n, len(gdsMetrics))
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
			name := strings.Fields(line)[2]
			if !strings.HasPrefix(name, "orbitefs_") {
				t.Errorf("metric %s lacks the orbitefs_ prefix", name)
			}
			if strings.HasPrefix(line, "# TYPE ") {
				typ := strings.Fields(line)[3]
				if strings.HasSuffix(name, "_total") != (typ == "counter") {
					t.Errorf("%s is a %s: counters and only counters end in _total", name, typ)
				}
				if seen[name] {
					t.Errorf("%s declared twice", name)
				}
				seen[name] = true
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || strings.ContainsAny(f[1], "e+") {
			t.Errorf("sample line %q: want NAME VALUE with a plain number", line)
		}
	}
	if !strings.Contains(out, `orbitefs_build_info{version="test"} 1`) || !strings.Contains(out, `orbitefs_gds_info{mode=""} 1`) {
		t.Errorf("info metrics missing:\n%s", out)
	}
	big := string(RenderMetrics(engine.Stats{BytesRead: 1 << 40}, "t"))
	if !strings.Contains(big, "orbitefs_read_bytes_total 1099511627776\n") {
		t.Errorf("large counter not rendered as an integer:\n%s", big)
	}
	if strings.Contains(big, "io_uring") {
		t.Errorf("io_uring metrics rendered for a build without it")
	}
}
