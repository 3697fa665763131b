// require_test.go owns ORBITEFS_REQUIRE: a comma-separated list of
// features (fuse, and later cuda, gds) whose absence fails a test instead
// of skipping it. CI (.ci/run) sets ORBITEFS_REQUIRE=fuse, so a green run
// means the end-to-end tests really ran.

package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// required reports whether list (ORBITEFS_REQUIRE's value) names feature.
func required(list, feature string) bool {
	for _, f := range strings.Split(list, ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

// unavailable skips t because feature is missing here, or fails it when
// ORBITEFS_REQUIRE names the feature.
func unavailable(t *testing.T, feature, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if required(os.Getenv("ORBITEFS_REQUIRE"), feature) {
		t.Fatalf("%s, and ORBITEFS_REQUIRE=%s requires %s", msg, os.Getenv("ORBITEFS_REQUIRE"), feature)
	}
	t.Skip(msg)
}

func TestRequired(t *testing.T) {
	for _, c := range []struct {
		list, feature string
		want          bool
	}{
		{"fuse", "fuse", true},
		{"cuda,fuse", "fuse", true},
		{"cuda, fuse ", "fuse", true},
		{"", "fuse", false},
		{"fused", "fuse", false},
		{"cuda,gds", "fuse", false},
	} {
		if got := required(c.list, c.feature); got != c.want {
			t.Errorf("required(%q, %q) = %v, want %v", c.list, c.feature, got, c.want)
		}
	}
}
