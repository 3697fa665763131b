package control

import (
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestSubmissionQoSAndDeadline(t *testing.T) {
	s, err := ParseSubmission([]byte(`{"op":"read","target":"c","deadline":"200ms","qos":{"tenant":"Tenant-A","intent":"foreground_get","priority":"low"},
		"requests":[{"memory":"m","length":4}]}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Deadline.D() != 200*time.Millisecond || s.QoS.Tenant != "Tenant-A" || *s.QoS.Priority != config.PriorityLow {
		t.Fatalf("parsed %+v %+v", s, s.QoS)
	}
	for _, c := range []struct{ doc, want string }{
		{`{"op":"read","target":"c","qos":{"tenant":"a","priority":"urgent"},"requests":[{"memory":"m","length":4}]}`, `priority "urgent"`},
		{`{"op":"read","target":"c","qos":{"tenant":"a","class":1},"requests":[{"memory":"m","length":4}]}`, `unknown field "class"`},
		{`{"op":"read","target":"c","deadline":"0s","requests":[{"memory":"m","length":4}]}`, "deadline 0s: must be > 0"},
	} {
		_, err := ParseSubmission([]byte(c.doc), 0)
		if engine.KindOf(err) != engine.KindInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want EINVAL with %q", c.doc, err, c.want)
		}
	}
}

// Several bandwidth estimates share one HELP/TYPE header.
func TestMetricsBandwidthFamily(t *testing.T) {
	st := engine.Stats{RuntimeQueue: engine.QueueStats{Enabled: true, Bandwidth: []engine.BandwidthStat{
		{Path: "file_dram", Device: "8:0", BytesPerSecond: 1.5e9}, {Path: "gds", Device: "259:1", BytesPerSecond: 0}}}}
	out := string(RenderMetrics(st, "test"))
	if n := strings.Count(out, "# TYPE orbitefs_runtime_queue_bandwidth_bytes_per_second gauge\n"); n != 1 {
		t.Fatalf("%d TYPE lines for the bandwidth family:\n%s", n, out)
	}
	for _, want := range []string{`orbitefs_runtime_queue_bandwidth_bytes_per_second{path="file_dram",device="8:0"} 1500000000` + "\n",
		`orbitefs_runtime_queue_bandwidth_bytes_per_second{path="gds",device="259:1"} 0` + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
