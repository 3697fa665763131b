// parallel_test.go tests ParallelBatch's bookkeeping over the fake cuFile:
// one receipt per slice, depth refused before anything changes, Cancel of
// queued slices, Destroy refused while slices are in flight.

package gds

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestParallelBatchBookkeeping(t *testing.T) {
	f := &fakeCuFile{allow: 1, readGate: make(chan struct{})}
	var pid atomic.Int64
	pid.Store(1)
	d, err := fakeProcess(f, &pid).open(Options{Binder: noBinder})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h := &Handle{d: d, fd: -1, fh: 1}
	b, err := d.NewParallelBatch(8, 2)
	if err != nil {
		t.Fatal(err)
	}
	ios := Split(Read, h, 0x1000, 0, 0, 8<<20, 1<<20, 0)
	if err := b.Submit(append(ios, ios[0])); !errors.Is(err, ErrInvalid) || b.InFlight() != 0 {
		t.Fatalf("9 slices at depth 8 = %v (in flight %d), want ErrInvalid and nothing queued", err, b.InFlight())
	}
	if err := b.Submit(ios); err != nil {
		t.Fatal(err)
	}
	// Two workers each hold one slice in cuFileRead (blocked on the gate).
	for f.readCalls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := b.Destroy(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Destroy with slices in flight = %v, want ErrBusy", err)
	}
	if err := b.Cancel(); err != nil {
		t.Fatal(err)
	}
	f.readGate <- struct{}{}
	f.readGate <- struct{}{}
	got := map[uint64]Result{}
	for len(got) < 8 {
		rs, err := b.Poll(1, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if _, dup := got[r.Cookie]; dup {
				t.Fatalf("two receipts for slice %d", r.Cookie)
			}
			got[r.Cookie] = r
		}
	}
	var done, canceled int
	for _, r := range got {
		switch {
		case r.Err == nil && r.N == 1<<20:
			done++
		case errors.Is(r.Err, ErrCanceled):
			canceled++
		default:
			t.Fatalf("receipt %+v", r)
		}
	}
	if done != 2 || canceled != 6 || b.InFlight() != 0 {
		t.Fatalf("done %d canceled %d in flight %d, want 2, 6, 0", done, canceled, b.InFlight())
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := b.Submit(ios[:1]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Destroy = %v, want ErrClosed", err)
	}
}
