package engine_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

// freeListFixture is an engine with a tmpfs file and a region, and a
// helper that runs n one-request caller copies on a batch.
type freeListFixture struct {
	e   *engine.Engine
	seg *engine.Segment
	r   *engine.Region
}

func newFreeListFixture(t *testing.T) *freeListFixture {
	shm := tmpfsDir(t)
	e := newEngine(t, nil)
	path, _ := randomFile(t, shm, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	t.Cleanup(func() { e.CloseFileSegment(seg, ioTimeout) })
	return &freeListFixture{e: e, seg: seg, r: register(t, e, 1<<20)}
}

func (f *freeListFixture) submit(b *engine.Batch, k int) error {
	req := engine.Request{Address: f.r.BaseAddress() + uint64(k%64)*4096, TargetOffset: uint64(k%256) * 4096, Length: 4096}
	_, err := b.Submit(engine.OpRead, f.seg, []engine.Request{req}, nil, ioTimeout)
	return err
}

// run allocates a batch of capacity, submits n caller copies, waits and
// returns it (not freed) with its group identities.
func (f *freeListFixture) run(t *testing.T, capacity, n int) (*engine.Batch, []any) {
	t.Helper()
	b, err := f.e.AllocateBatch(capacity)
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k < n; k++ {
		if err := f.submit(b, k); err != nil {
			t.Fatal(err)
		}
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v, %v", st, err)
	}
	return b, b.GroupIdentities()
}

// TestFreeListSkipsOthers: a freed batch with a group that may not be
// recycled (two requests) passes on only its one-request caller copies,
// in order.
func TestFreeListSkipsOthers(t *testing.T) {
	f := newFreeListFixture(t)
	for attempt := 0; ; attempt++ {
		old, err := f.e.AllocateBatch(64)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 64; k++ {
			if k == 5 { // one group of two requests in the middle
				reqs := []engine.Request{
					{Address: f.r.BaseAddress() + 70*4096, TargetOffset: 0, Length: 4096},
					{Address: f.r.BaseAddress() + 71*4096, TargetOffset: 4096, Length: 4096},
				}
				if _, err := old.Submit(engine.OpRead, f.seg, reqs, nil, ioTimeout); err != nil {
					t.Fatal(err)
				}
				k++
				continue
			}
			if err := f.submit(old, k); err != nil {
				t.Fatal(err)
			}
		}
		old.Seal()
		if st, err := old.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			t.Fatalf("state %v, %v", st, err)
		}
		groups := old.GroupIdentities()
		want := append(slices.Clone(groups[:5]), groups[6:]...)
		if err := old.Free(); err != nil {
			t.Fatal(err)
		}
		b, err := f.e.AllocateBatch(64)
		if err != nil {
			t.Fatal(err)
		}
		free := b.FreeList()
		b.Free()
		if len(free) == 0 && attempt < 50 {
			continue // sync.Pool dropped the lists
		}
		if !slices.Equal(free, want) {
			t.Fatalf("free list of %d groups, want the %d one-request ones of %d", len(free), len(want), len(groups))
		}
		return
	}
}

// TestFreeListCarriesGroups: the caller copies of a freed batch whose
// lists are pooled (at least 64 tasks, minPooledList) become the free list of the next batch that takes its
// lists, and that batch's one-request groups come from it, each handed
// out once; a batch of fewer than 64 tasks takes no free
// list.
func TestFreeListCarriesGroups(t *testing.T) {
	f := newFreeListFixture(t)
	for _, tc := range []struct {
		name          string
		capacity, n   int // the freed batch
		nextCap, next int // the batch after it
		wantFree      bool
	}{
		{"next takes all", 64, 64, 64, 64, true},
		{"next takes some", 64, 64, 64, 3, true},
		{"next takes more than the list", 128, 64, 128, 70, true},
		{"small next batch", 64, 64, 8, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// sync.Pool may drop the lists (at a GC, and at random under
			// the race detector): try a few times.
			for attempt := 0; ; attempt++ {
				old, oldGroups := f.run(t, tc.capacity, tc.n)
				if err := old.Free(); err != nil {
					t.Fatal(err)
				}
				b, err := f.e.AllocateBatch(tc.nextCap)
				if err != nil {
					t.Fatal(err)
				}
				free := b.FreeList()
				if !tc.wantFree {
					if len(free) != 0 {
						t.Fatalf("a batch of %d took a free list of %d", tc.nextCap, len(free))
					}
					b.Free()
					return
				}
				if !slices.Equal(free, oldGroups) {
					b.Free()
					if attempt < 50 {
						continue
					}
					t.Fatalf("free list of %d groups, want the freed batch's %d", len(free), len(oldGroups))
				}
				for k := 0; k < tc.next; k++ {
					if err := f.submit(b, k); err != nil {
						t.Fatal(err)
					}
				}
				b.Seal()
				if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
					t.Fatalf("state %v, %v", st, err)
				}
				got := b.GroupIdentities()
				took := min(tc.next, len(oldGroups))
				for i, g := range got[:took] {
					if !slices.Contains(oldGroups, g) {
						t.Fatalf("group %d is not from the free list", i)
					}
				}
				for i, g := range got {
					if slices.Index(got, g) != i {
						t.Fatalf("group %d handed out twice", i)
					}
				}
				// What is left is the list without what was taken, in
				// its order (the list is taken part by part, groupinline.go).
				rest := b.FreeList()
				want := slices.DeleteFunc(slices.Clone(oldGroups), func(g any) bool { return slices.Contains(got[:took], g) })
				if !slices.Equal(rest, want) {
					t.Fatalf("%d groups left on the free list, want %d", len(rest), len(want))
				}
				for i, rep := range b.Submissions() {
					if rep.Tasks.First != i || rep.CompletedBytes != 4096 || rep.Err != nil {
						t.Fatalf("report %d: %+v", i, rep)
					}
				}
				if err := b.Free(); err != nil {
					t.Fatal(err)
				}
				return
			}
		})
	}
}

// TestFreeListTakeRacesFree holds a submission right after it took a
// group from its batch's free list, frees the batch meanwhile (nothing
// is active yet), and lets it go: its Submit fails (the batch is
// freed), and the group it holds is neither on the free list the freed
// batch passes on nor handed to any later batch; the rest of the list
// is passed on whole.
func TestFreeListTakeRacesFree(t *testing.T) {
	f := newFreeListFixture(t)
	held := make(chan any, 1)
	armed := make(chan chan struct{}, 1) // carries the held submission's release
	f.e.HoldGroupTaken(func(g any) {
		select {
		case release := <-armed:
			held <- g
			<-release
		default:
		}
	})
	for attempt := 0; ; attempt++ {
		old, _ := f.run(t, 64, 64)
		if err := old.Free(); err != nil {
			t.Fatal(err)
		}
		a, err := f.e.AllocateBatch(64)
		if err != nil {
			t.Fatal(err)
		}
		list := a.FreeList()
		if len(list) < 2 {
			a.Free()
			if attempt < 50 {
				continue // sync.Pool dropped the lists
			}
			t.Fatalf("free list of %d groups", len(list))
		}
		release := make(chan struct{})
		armed <- release
		done := make(chan error, 1)
		go func() { done <- f.submit(a, 0) }()
		g := <-held // a's submission holds a group of the list
		if !slices.Contains(list, g) {
			t.Fatal("the submission did not take a group of the free list")
		}
		if err := a.Free(); err != nil {
			t.Fatalf("free with the submission held before admission: %v", err)
		}
		c, err := f.e.AllocateBatch(64)
		if err != nil {
			t.Fatal(err)
		}
		next := c.FreeList()
		close(release)
		if err := <-done; !errors.Is(err, engine.ErrNotFound) {
			t.Fatalf("submission to the freed batch: %v, want not found", err)
		}
		if slices.Contains(next, g) {
			t.Fatal("the held group was passed on in the next free list")
		}
		c.Free()
		if len(next) == 0 && attempt < 50 {
			continue // sync.Pool dropped the lists
		}
		if want := slices.DeleteFunc(slices.Clone(list), func(h any) bool { return h == g }); !slices.Equal(next, want) {
			t.Fatalf("next free list has %d groups, want the %d the held submission did not take", len(next), len(list)-1)
		}
		// Churn: no later batch is ever handed the held group.
		for round := 0; round < 10; round++ {
			b, groups := f.run(t, 64, 16)
			if slices.Contains(groups, g) {
				t.Fatalf("round %d: the held group was handed out again", round)
			}
			b.Free()
		}
		return
	}
}
