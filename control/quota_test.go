package control

import (
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestReserveCountsPending: a creation in progress counts against its
// uid's share until its object is in the table, so two racing creations
// (held here between reserve and insert) never pass the share together;
// privileged callers are never refused.
func TestReserveCountsPending(t *testing.T) {
	cfg := config.DefaultEngine()
	cfg.AllowedRoots = []string{t.TempDir()}
	cfg.MaxAllocatedBatches = 4
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	s := New(e, Options{Version: "test", DefaultBatchCapacity: 8, MaxDocumentBytes: 4096, CloseTimeout: time.Second, MaxUserShare: 0.5})
	t.Cleanup(func() { s.Shutdown(time.Second) })
	alice := &engine.Caller{UID: 4242, GID: 4242}
	if _, err := s.Clone(alice); err != nil {
		t.Fatal(err)
	}
	one := quota{batches: 1}
	done, err := s.reserve(alice, one) // the second of her 2, in progress
	if err != nil {
		t.Fatalf("alice's second batch: %v", err)
	}
	if _, err := s.reserve(alice, one); engine.KindOf(err) != engine.KindExhausted {
		t.Fatalf("a third batch racing the second: %v, want KindExhausted", err)
	}
	if _, err := s.Clone(alice); engine.KindOf(err) != engine.KindExhausted {
		t.Fatalf("a clone racing the second: %v, want KindExhausted", err)
	}
	done()
	if _, err := s.Clone(alice); err != nil {
		t.Fatalf("the second batch once the racing one gave up: %v", err)
	}
	if _, err := s.Clone(&engine.Caller{UID: 0}); err != nil {
		t.Fatalf("root past alice's share: %v", err)
	}
}
