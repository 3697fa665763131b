package engine_test

import (
	"bytes"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

// TestGroupReuseKeepsReports: group objects are recycled once their
// batch is freed (group.go), never while a live batch can still read
// them: a finished batch's reports and task states stay its own while
// other batches on other goroutines recycle groups by the thousand.
func TestGroupReuseKeepsReports(t *testing.T) {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	path, orig := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	defer e.CloseFileSegment(seg, ioTimeout)
	r := register(t, e, 2<<20)

	// The batch that keeps its reports: three caller copies of distinct
	// lengths, read back after the churn below.
	kept, err := e.AllocateBatch(3)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Free()
	lengths := []uint64{4096, 512, 100}
	for i, n := range lengths {
		req := engine.Request{Address: r.BaseAddress() + uint64(i)*8192, TargetOffset: uint64(i) * 12288, Length: n}
		if _, err := kept.Submit(engine.OpRead, seg, []engine.Request{req}, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
	}
	kept.Seal()
	if st, err := kept.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v, %v", st, err)
	}
	wantReports, wantTasks := kept.Submissions(), kept.TaskStatuses()
	for i, rep := range wantReports {
		if rep.Tasks.First != i || rep.CompletedBytes != lengths[i] || !rep.Done || rep.Err != nil {
			t.Fatalf("report %d before the churn: %+v", i, rep)
		}
		if wantTasks[i].Transport != engine.TransportCopy {
			t.Fatalf("task %d went by %v, want a caller copy", i, wantTasks[i].Transport)
		}
	}
	keptGroups := kept.GroupIdentities()

	// Reuse happens: a freed batch's groups come back to the next batch.
	reused := false
	var prev []any
	for round := 0; round < 20 && !reused; round++ {
		b, err := e.AllocateBatch(64) // 64: its lists are pooled too
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 8; k++ {
			req := engine.Request{Address: r.BaseAddress() + 65536, TargetOffset: uint64(k) * 4096, Length: 4096}
			if _, err := b.Submit(engine.OpRead, seg, []engine.Request{req}, nil, ioTimeout); err != nil {
				t.Fatal(err)
			}
		}
		b.Seal()
		if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			t.Fatalf("round %d: state %v, %v", round, st, err)
		}
		ids := b.GroupIdentities()
		for _, id := range ids {
			for _, k := range keptGroups {
				if id == k {
					t.Fatalf("round %d: a group of the live batch was handed to another batch", round)
				}
			}
			for _, p := range prev {
				reused = reused || id == p
			}
		}
		prev = ids
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
		if n := b.TaskCount(); n != 0 {
			t.Fatalf("a freed batch still lists %d tasks", n)
		}
	}
	if !reused {
		t.Fatal("no group of a freed batch was reused in 20 rounds")
	}

	// Churn on 4 goroutines (about 15k groups, and batches of 64 whose
	// task and group lists are pooled too) while this one reads the kept
	// batch.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			base := r.BaseAddress() + 131072 + uint64(w)*262144
			for round := 0; round < 60; round++ {
				b, err := e.AllocateBatch(64)
				if err != nil {
					errs <- err
					return
				}
				for k := 0; k < 64; k++ { // 64: the batch's lists are pooled
					n := uint64(200 + 16*round + k)
					req := engine.Request{Address: base + uint64(k)*4096, TargetOffset: uint64(k*w) * 512, Length: n}
					tr, err := b.Submit(engine.OpRead, seg, []engine.Request{req}, nil, ioTimeout)
					if err == nil && tr.First != k {
						err = fmt.Errorf("submission %d got task %d", k, tr.First)
					}
					if err != nil {
						errs <- err
						b.Free()
						return
					}
				}
				b.Seal() // one copy in 64 goes to a host copy lane (lanecopy.go)
				if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
					errs <- fmt.Errorf("goroutine %d round %d: state %v, %v", w, round, st, err)
					b.Free()
					return
				}
				for k, rep := range b.Submissions() {
					if rep.Tasks.First != k || rep.CompletedBytes != uint64(200+16*round+k) {
						errs <- fmt.Errorf("goroutine %d round %d: report %d is %+v", w, round, k, rep)
						b.Free()
						return
					}
				}
				if err := b.Free(); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	go func() { wg.Wait(); close(stop) }()
	reads := 0
	for done := false; !done; reads++ {
		select {
		case <-stop:
			done = true
		default:
		}
		if got := kept.Submissions(); !reflect.DeepEqual(got, wantReports) {
			t.Fatalf("after %d reads during the churn: reports %+v, want %+v", reads, got, wantReports)
		}
		if got := kept.TaskStatuses(); !reflect.DeepEqual(got, wantTasks) {
			t.Fatalf("after %d reads during the churn: tasks %+v, want %+v", reads, got, wantTasks)
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mem := regionBytes(t, r)
	for i, n := range lengths {
		if !bytes.Equal(mem[uint64(i)*8192:uint64(i)*8192+n], orig[uint64(i)*12288:uint64(i)*12288+n]) {
			t.Fatalf("request %d: bytes differ from the file", i)
		}
	}
}
