package control

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestFailureLines: each finished, failed submission is one line naming
// it, its first failed request and how many of its tasks failed; running
// and successful ones are not listed; past maxFailureLines one line
// counts the rest, at the time of the last of them.
func TestFailureLines(t *testing.T) {
	at := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	fail := func(first, count int, at time.Time) engine.Report {
		return engine.Report{Tasks: engine.TaskRange{First: first, Count: count}, Done: true, FailedAt: at,
			Err: &engine.Error{Op: "read", Name: "batches/7", Kind: engine.KindTimeout,
				Err: fmt.Errorf("requests[1] (task %d): deadline passed", first+1)}}
	}
	tasks := make([]engine.TaskStatus, 8)
	for i := range tasks {
		tasks[i].State = engine.TaskCompleted
	}
	tasks[5].State, tasks[6].State = engine.TaskFailed, engine.TaskFailed
	reports := []engine.Report{
		{Tasks: engine.TaskRange{First: 0, Count: 4}, Done: true},
		fail(4, 3, at),
		{Tasks: engine.TaskRange{First: 7, Count: 1}, Err: errors.New("still running")},
	}
	got := failureLines(reports, tasks)
	want := []string{"2026-12-01T14:00:00.000Z read batches/7: timed out: submissions[1] requests[1] (task 5): deadline passed (2 of 3 tasks failed)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failureLines = %q, want %q", got, want)
	}

	reports = reports[:0]
	for i := 0; i < maxFailureLines+3; i++ {
		reports = append(reports, fail(0, 1, at.Add(time.Duration(i)*time.Second)))
	}
	got = failureLines(reports, tasks)
	if len(got) != maxFailureLines+1 {
		t.Fatalf("%d lines for %d failed submissions, want %d", len(got), len(reports), maxFailureLines+1)
	}
	if last := got[maxFailureLines]; last != "2026-12-01T14:00:18.000Z and 3 more failed submissions, the last at this time: see status" {
		t.Errorf("last line %q", last)
	}
}

// TestSubmitRegionReplaced: between a submission's ownership checks and
// the engine's lookup of its addresses, the caller's region can be
// unregistered and another user's mapped at the same address. Held at
// that point (afterResolve), alice's write of "her" memory must not
// copy the daemon's region that now sits there into her segment.
func TestSubmitRegionReplaced(t *testing.T) {
	cfg := config.DefaultEngine()
	cfg.AllowedRoots = []string{t.TempDir()}
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	s := New(e, Options{Version: "test", DefaultBatchCapacity: 8, MaxDocumentBytes: 4096, CloseTimeout: time.Second})
	t.Cleanup(func() { s.Shutdown(time.Second) })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	alice := &engine.Caller{UID: 4242, GID: 4242}
	const size = 1 << 20
	must(s.Register(alice, []byte(fmt.Sprintf(`{"name":"abuf","location":"cpu","bytes":%d}`, size))))
	must(s.Register(alice, []byte(fmt.Sprintf(`{"name":"aout","location":"cpu","bytes":%d}`, size))))
	must(s.OpenSegment(alice, []byte(`{"name":"aseg","uri":"mem://aout","permission":"read_write"}`)))
	bt, err := s.Clone(alice)
	must(err)
	secret := bytes.Repeat([]byte("S"), size)
	old := s.Memory("abuf").region.BaseAddress()
	reused := false
	s.afterResolve = func() {
		s.afterResolve = nil
		must(s.Unregister(alice, "abuf"))
		// The freed range is mapped again for the next registration of
		// its size (tried a few times: the runtime may map in between).
		for i := 0; i < 8 && !reused; i++ {
			name := fmt.Sprintf("secret%d", i)
			must(s.Register(nil, []byte(fmt.Sprintf(`{"name":"%s","location":"cpu","bytes":%d}`, name, size))))
			m := s.Memory(name)
			_, err := s.WriteMemory(m, secret, 0)
			must(err)
			reused = m.region.BaseAddress() == old
		}
	}
	err = s.Submit(alice, bt, []byte(`{"op":"write","target":"aseg","requests":[{"memory":"abuf","length":1048576}]}`))
	if !reused {
		t.Fatalf("no new registration reused the freed address %#x: the race cannot be shown here", old)
	}
	if Errno(err) != syscall.EACCES {
		if err == nil {
			must(bt.b.Seal())
			bt.b.Wait(5 * time.Second)
			out := make([]byte, size)
			s.ReadMemory(s.Memory("aout"), out, 0)
			t.Fatalf("alice's submission went on after her region was replaced (copied %d bytes of the daemon's region into hers); want EACCES", bytes.Count(out, []byte("S")))
		}
		t.Fatalf("alice's submission after her region was replaced: %v (errno %v), want EACCES", err, Errno(err))
	}
	if bt.b.TaskCount() != 0 {
		t.Fatalf("the refused submission appended %d tasks", bt.b.TaskCount())
	}
}
