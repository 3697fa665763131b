package engine

// route_test.go: the route table reaches an executor for every route,
// and every route a group dispatched as jobs can carry reaches a job
// executor: adding a route without its line in routeTable fails here,
// not on the first request that takes it.

import (
	"testing"

	"github.com/orbitefs/orbitefs/config"
)

func TestRouteTableCoversEveryRoute(t *testing.T) {
	e, err := New(config.DefaultEngine())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(0)
	want := map[route]TransportKind{
		routeRing: TransportIOUring, routeStaged: TransportIOUring, routeGDS: TransportGDS,
		routeMem: TransportMemory, routeCopy: TransportCopy, routeHostCopy: TransportCopy,
		routeRemote: TransportTCP, routeIPC: TransportCUDAIPC,
	}
	if len(want) != routeCount {
		t.Fatalf("%d routes, %d expected here: name the new route's transport in this test", routeCount, len(want))
	}
	paths := map[string]route{}
	for rt := route(0); int(rt) < routeCount; rt++ {
		ex := e.executor(rt)
		if ex == nil {
			t.Fatalf("route %d has no executor in routeTable", rt)
		}
		if got := ex.transport(); got != want[rt] {
			t.Errorf("route %d reports transport %v, want %v", rt, got, want[rt])
		}
		if other, dup := paths[ex.path()]; dup {
			t.Errorf("routes %d and %d share the bandwidth path %q", other, rt, ex.path())
		}
		paths[ex.path()] = rt
		// Every route but the ring's ops and the caller copy reaches a
		// group dispatched as jobs (rideAlong moves host requests off
		// the ring route there).
		_, jobs := ex.(jobExecutor)
		if wantJobs := rt != routeRing && rt != routeCopy; jobs != wantJobs {
			t.Errorf("route %d: takes jobs %v, want %v", rt, jobs, wantJobs)
		}
	}
}
