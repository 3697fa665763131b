package control

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
