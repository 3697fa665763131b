// need_test.go owns test skips: a test that cannot run here skips with
// its reason, and ORBITEFS_REQUIRE=gpu (set by the GPU gate) turns every
// such skip into a failure.

package gds

import (
	"os"
	"testing"
)

func need(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("ORBITEFS_REQUIRE") == "gpu" {
		t.Fatalf("required (ORBITEFS_REQUIRE=gpu) but unavailable: %s", reason)
	}
	t.Skipf("skipped: %s", reason)
}
