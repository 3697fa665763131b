package control_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/control"
)

// TestIdleReclaim: an unused batch is freed after IdleBatchTimeout; one
// with an accepted submission is not; a refused submission does not keep
// a batch alive.
func TestIdleReclaim(t *testing.T) {
	dir := t.TempDir()
	s, _ := serviceOver(t, dir, func(o *control.Options) { o.IdleBatchTimeout = 100 * time.Millisecond })
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(nil, []byte(`{"name":"buf","location":"cpu","bytes":4096}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.OpenSegment(nil, []byte(`{"name":"f","uri":"file://`+path+`","permission":"read"}`)); err != nil {
		t.Fatal(err)
	}
	used, _ := s.Clone(nil)
	idle, _ := s.Clone(nil)
	refused, _ := s.Clone(nil)
	if err := s.Submit(nil, used, []byte(`{"op":"read","target":"f","requests":[{"memory":"buf","length":4096}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(nil, refused, []byte(`{"op":"frob"}`)); err == nil {
		t.Fatal("a bad submission was accepted")
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Batch(idle.ID) != nil || s.Batch(refused.ID) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("unused batches not reclaimed after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Batch(used.ID) != used {
		t.Fatalf("the batch with a submission was reclaimed")
	}
	_, err := s.State(idle)
	wantErrno(t, "state of a reclaimed batch", err, syscall.ENOENT, "reclaimed")
	err = s.Submit(nil, idle, []byte(`{"op":"read","target":"f","requests":[{"memory":"buf","length":4096}]}`))
	wantErrno(t, "submit to a reclaimed batch", err, syscall.ENOENT, "mount.idle_batch_timeout")
}

// TestIdleReclaimCountsFromActivity: writes to submit (a submission in
// pieces) or ctl (progress) keep an unused batch alive past the timeout
// counted from its clone; reads do not; once the writes stop, the batch
// is reclaimed a timeout after the last one.
func TestIdleReclaimCountsFromActivity(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s, _ := serviceOver(t, t.TempDir(), func(o *control.Options) { o.IdleBatchTimeout = timeout })
	pieces, _ := s.Clone(nil)
	progress, _ := s.Clone(nil)
	read, _ := s.Clone(nil)
	w := s.SubmitWriter(nil, pieces)
	doc := []byte(`{"op":"read","target":"f","requests":[{"memory":"buf","length":4096}]}`)
	start := time.Now()
	var last time.Time
	for i := 0; time.Since(start) < 4*timeout; i++ {
		if err := w.Write(doc[i:i+1], int64(i)); err != nil {
			t.Fatalf("piece %d: %v", i, err)
		}
		if err := s.Ctl(nil, progress, "progress"); err != nil {
			t.Fatalf("progress: %v", err)
		}
		last = time.Now() // both batches saw activity no later than this
		if _, err := s.State(read); err != nil && time.Since(start) < timeout/2 {
			t.Fatalf("state: %v", err)
		}
		time.Sleep(timeout / 6)
	}
	if s.Batch(pieces.ID) != pieces {
		t.Errorf("a batch with a submission being written was reclaimed")
	}
	if s.Batch(progress.ID) != progress {
		t.Errorf("a batch getting progress every %s was reclaimed", timeout/6)
	}
	if s.Batch(read.ID) != nil {
		t.Errorf("a batch that was only read was not reclaimed after %s", 4*timeout)
	}
	for s.Batch(pieces.ID) != nil || s.Batch(progress.ID) != nil {
		if time.Since(last) > 10*time.Second {
			t.Fatalf("batches not reclaimed 10s after their last write")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(last); d < timeout-50*time.Millisecond {
		t.Errorf("reclaimed %s after the last write, before the %s timeout", d, timeout)
	}
}
