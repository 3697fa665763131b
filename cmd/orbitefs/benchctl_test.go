package main

import (
	"os"
	"testing"
	"time"
)

// TestBenchCtlCountsFUSERequests: `bench ctl` drives real round trips
// through its own in-process mount, in the shell form and the one-file
// transaction forms, and through the API, and counts the FUSE requests of
// a round trip: in the shell form one RMDIR per trip, and more than the
// five syscalls a trip makes, but at most 40 (64 before the kernel cached
// attributes and fixed names, fusefs/cache.go), with at most 8 GETATTR
// (25 before); about 6 for txn and 2 for txn-reuse.
func TestBenchCtlCountsFUSERequests(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs /dev/fuse and root")
	}
	rep, err := runCtl("", "", 2, 500*time.Millisecond, ctlMountForms)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 8 || rep.MountAPI1 <= 0 || rep.MountAPIN <= 0 || rep.TxnAPI1 <= 0 || rep.TxnReuseAPIN <= 0 || rep.RSSIdleKiB == 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Runs {
		if r.RoundTrips == 0 {
			t.Fatalf("no round trips: %+v", r)
		}
		if r.Via == "mount" && (r.FUSERequestsPerTrip < 5 || r.FUSERequestsPerTrip > 40) {
			t.Errorf("%+v: want 5 to 40 FUSE requests per round trip (by op: %v)", r, rep.FUSEByOpOne)
		}
		// The one-file transaction: OPEN, WRITE, READ, FLUSH, RELEASE and
		// the root's GETATTR; on a kept descriptor WRITE and READ.
		if r.Via == "txn" && (r.FUSERequestsPerTrip < 5 || r.FUSERequestsPerTrip > 7) {
			t.Errorf("%+v: want 5 to 7 FUSE requests per round trip (by op: %v)", r, rep.FUSEByOpTxn)
		}
		if r.Via == "txn-reuse" && (r.FUSERequestsPerTrip < 2 || r.FUSERequestsPerTrip > 2.5) {
			t.Errorf("%+v: want 2 FUSE requests per round trip", r)
		}
	}
	ops := rep.FUSEByOpOne
	if ops["RMDIR"] == 0 || ops["OPEN"] < 4*ops["RMDIR"] || ops["GETATTR"] > 8*ops["RMDIR"] {
		t.Errorf("FUSE requests by op %v: want one RMDIR, at least four OPENs and at most 8 GETATTRs per trip", ops)
	}
}
