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
		{"ünïcode", false},
		{"a+b@c=d,e:f~g.h_i-j", true},
		{"A-Z_0.9", true},
		{"caf\u00e9", false},  // NFC é
		{"cafe\u0301", false}, // NFD: e + combining acute
		{"a\u200bb", false},   // zero-width space
		{"\u200d", false},     // zero-width joiner alone
		{"\ufeffbuf", false},  // byte order mark
		{"\u212a", false},     // Kelvin sign, NFKC "K"
		{"a b", false},        // space
		{"a*b", false},
		{"$(x)", false},
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
		{"a\u00a0b", false},
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
