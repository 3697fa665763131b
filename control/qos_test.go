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
