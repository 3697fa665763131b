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
