package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestNotifyGroupEndsInsideAttach: a submission's group can finish, and
// its hook run, after the submit returned and before attach recorded
// the notice (the hook then finds none). Held at that point, the group
// must still be decided and its notification sent once.
func TestNotifyGroupEndsInsideAttach(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultEngine()
	cfg.AllowedRoots = []string{dir}
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan string, 4)
	s := New(e, Options{Version: "test", DefaultBatchCapacity: 64, MaxDocumentBytes: 1 << 16, CloseTimeout: time.Second,
		Notify: func(_ context.Context, d NotifyDest, submission, message string) (string, error) {
			sent <- message
			return NotifyDelivered, nil
		}})
	t.Cleanup(func() { s.Shutdown(5 * time.Second) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "sparse")
	must(os.WriteFile(path, nil, 0o644))
	must(os.Truncate(path, 64<<20))
	must(s.Register(nil, []byte(`{"name":"big","location":"cpu","bytes":"64MiB"}`)))
	must(s.Register(nil, []byte(`{"name":"out","location":"cpu","bytes":4096}`)))
	must(s.OpenSegment(nil, []byte(`{"name":"f","uri":"file://`+path+`","permission":"read"}`)))
	must(s.OpenSegment(nil, []byte(`{"name":"m","uri":"mem://out","permission":"read_write"}`)))
	bt, err := s.Clone(nil)
	must(err)
	// A file group first: the memory group queues behind it, so it
	// finishes after its submit returned.
	must(s.Submit(nil, bt, []byte(`{"op":"read","target":"f","requests":[`+
		`{"memory":"big","length":67108864},{"memory":"big","length":67108864},{"memory":"big","length":67108864},{"memory":"big","length":67108864}]}`)))

	seen := make(chan int, 4)
	s.groupDoneSeen = func(first int) { seen <- first }
	held := false
	s.beforeAttach = func(first int) {
		s.beforeAttach = nil
		for _, r := range bt.b.Submissions() {
			if r.Tasks.First == first && r.Done {
				return // finished inside the submit: nothing to hold
			}
		}
		for {
			select {
			case f := <-seen:
				if f == first {
					held = true
					return
				}
			case <-time.After(10 * time.Second):
				t.Error("the memory group's hook did not run")
				return
			}
		}
	}
	must(s.Submit(nil, bt, []byte(`{"op":"write","target":"m","requests":[{"memory":"big","length":4096}],`+
		`"notify":[{"peer":"tcp://127.0.0.1:9","message":"held"}]}`)))
	if !held {
		t.Fatal("the memory group finished inside its submit: the race cannot be shown here")
	}
	select {
	case m := <-sent:
		if m != "held" {
			t.Fatalf("sent %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a group that finished before attach recorded its notice: nothing sent; status %v", bt.notices())
	}
	select {
	case m := <-sent:
		t.Fatalf("sent twice: %q", m)
	case <-time.After(100 * time.Millisecond):
	}
}
