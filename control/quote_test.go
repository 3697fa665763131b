package control_test

import (
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/control"
)

// TestErrorFileTextBounded: whatever a refusal's message quotes (here a
// size decoder quoting a 900 KiB value), the error file keeps at most a
// few KiB of it.
func TestErrorFileTextBounded(t *testing.T) {
	s, _ := serviceOver(t, t.TempDir(), func(o *control.Options) { o.MaxDocumentBytes = 1 << 20 })
	huge := strings.Repeat("9", 900<<10) + "x"
	err := s.Register(nil, []byte(`{"name":"a","location":"cpu","bytes":"`+huge+`"}`))
	if err == nil {
		t.Fatal("accepted")
	}
	text := string(s.LastError(nil))
	if len(text) > 4200 || !strings.Contains(text, "bytes") || !strings.Contains(text, "cut:") {
		t.Fatalf("error file holds %d bytes: %.300s", len(text), text)
	}
}
