package engine

// route_test.go: the route table reaches an executor for every route,
// and every route a group dispatched as jobs can carry reaches a job
// executor: adding a route without its line in routeTable fails here,
// not on the first request that takes it. The scheduler's files name no
// route and no executor.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
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
		routeRemote: TransportTCP, routeIPC: TransportCUDAIPC, routeMapped: TransportMapped,
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

// TestCancellers: the executors that can stop a task they are running
// (canceller, executor.go) are exactly the ones the contract's "cancel
// running" check expects to cut; every other refuses with KindBusy.
func TestCancellers(t *testing.T) {
	e, err := New(config.DefaultEngine())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(0)
	for rt := route(0); int(rt) < routeCount; rt++ {
		_, ok := e.executor(rt).(canceller)
		if want := rt == routeRemote || rt == routeIPC; ok != want {
			t.Errorf("route %d (%s): canceller %v, want %v", rt, e.executor(rt).path(), ok, want)
		}
	}
}

// TestSchedulerNamesNoExecutor: the scheduler's files name no route and
// no executor (type, or the Engine field that holds one); they reach
// executors through the route table and the seam's methods. The names
// come from the code: every constant of type route, every executor type
// in the route table and every Engine field of such a type.
func TestSchedulerNamesNoExecutor(t *testing.T) {
	e, err := New(config.DefaultEngine())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(0)
	banned := map[string]string{}
	execTypes := map[reflect.Type]bool{}
	for rt := route(0); int(rt) < routeCount; rt++ {
		ty := reflect.TypeOf(e.executor(rt))
		execTypes[ty] = true
		if ty.Kind() == reflect.Pointer {
			ty = ty.Elem()
		}
		banned[ty.Name()] = "executor type"
	}
	et := reflect.TypeOf(e).Elem()
	for i := range et.NumField() {
		if f := et.Field(i); execTypes[f.Type] {
			banned[f.Name] = "Engine field holding an executor"
		}
	}
	fset := token.NewFileSet()
	src, err := os.ReadFile("route.go")
	if err != nil {
		t.Fatal(err)
	}
	rf, err := parser.ParseFile(fset, "route.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rf.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST || len(gd.Specs) == 0 {
			continue
		}
		if first := gd.Specs[0].(*ast.ValueSpec); first.Type == nil || types.ExprString(first.Type) != "route" {
			continue
		}
		for _, s := range gd.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				banned[n.Name] = "route"
			}
		}
	}
	if len(banned) < routeCount+2 {
		t.Fatalf("found only %v: the test no longer sees the routes and executors", banned)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	scheduler := regexp.MustCompile(`^(batch|task|group|worker|admission.*|failover.*)\.go$`)
	checked := 0
	for _, name := range files {
		if !scheduler.MatchString(name) {
			continue
		}
		checked++
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if what, bad := banned[id.Name]; bad {
					t.Errorf("%s: %s names %s %s", fset.Position(id.Pos()), name, what, id.Name)
				}
			}
			return true
		})
	}
	if checked < 6 {
		t.Fatalf("checked %d scheduler files, want batch, task, group, worker, admission and failover", checked)
	}
}
