package config

import (
	"strings"
	"testing"
	"time"
)

func TestIdleBatchTimeout(t *testing.T) {
	d, err := Parse("")
	if err != nil || d.Mount.IdleBatchTimeout.D() != 5*time.Minute {
		t.Fatalf("default: %v, %v", d, err)
	}
	for _, bad := range []string{`"0s"`, `"500ms"`, `"25h"`} {
		_, err := Parse("[mount]\nidle_batch_timeout = " + bad + "\n")
		if err == nil || !strings.Contains(err.Error(), "mount.idle_batch_timeout") {
			t.Errorf("idle_batch_timeout = %s: %v", bad, err)
		}
	}
	d, err = Parse("[mount]\nidle_batch_timeout = \"2s\"\n")
	if err != nil || d.Mount.IdleBatchTimeout.D() != 2*time.Second {
		t.Errorf("2s: %v", err)
	}
}
