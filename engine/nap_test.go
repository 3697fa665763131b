package engine

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNapSetsTimerSlack: a nap leaves its thread with napSlack, so the
// copy-event polls that follow wake within about a microsecond of their
// deadline rather than the default 50 µs after it.
func TestNapSetsTimerSlack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const before = 50_000
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, before, 0, 0, 0); err != nil {
		t.Skipf("prctl(PR_SET_TIMERSLACK): %v", err)
	}
	nap(1000)
	got, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatalf("prctl(PR_GET_TIMERSLACK): %v", err)
	}
	if got != int(napSlack) {
		t.Fatalf("timer slack after nap = %d ns, want %d (it was %d before)", got, napSlack, before)
	}
}
