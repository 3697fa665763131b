package control

import (
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"buf", true},
		{"kv-cache_0.bin", true},
		{"ünïcode", true},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"a/b", false},
		{"/", false},
		{"register", false},
		{"open", false},
		{"a\nb", false},
		{"a\x00b", false},
		{"a\x7fb", false},
		{"\xff", false},
		{"a\u0080b", false},
		{"a\u0085b", false},
		{"a\u009fb", false},
		{"a\u00a0b", true},
		{"a\u2028b", false},
		{"a\u2029b", false},
		{"ok\xc3", false},
	} {
		err := ValidateName(c.name)
		if (err == nil) != c.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}
