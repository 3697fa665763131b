// ctl.go owns the control-plane workload (`orbitefs bench ctl`): whole
// batch round trips - clone, submit one 4 KiB read, seal, wait, free -
// through a mount (RunCtlMount) and through the Go API in-process
// (RunCtlAPI), by 1 or N concurrent clients, each with its own 4 KiB of
// the region, so the two can be compared in one run.
//
// Invariants:
//   - A round trip counts only when every step succeeded and the wait
//     read "completed"; any failure ends the run with the step named.
//   - Each client frees every batch it cloned before it returns.

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// CtlResult is one control-plane measurement.
type CtlResult struct {
	Via        string  `json:"via"` // mount (shell form), txn, txn-reuse or api
	Clients    int     `json:"clients"`
	Seconds    float64 `json:"seconds"`
	RoundTrips uint64  `json:"round_trips"`
	PerSec     float64 `json:"round_trips_per_sec"`
	P50Us      float64 `json:"p50_us"`
	P99Us      float64 `json:"p99_us"`
	// FUSERequests per round trip, when the mount counted them
	// (in-process mounts only); 0 otherwise.
	FUSERequestsPerTrip float64 `json:"fuse_requests_per_round_trip,omitempty"`
	// CPUUsPerTrip is the CPU time (user + system) of this whole process
	// per round trip: client and engine, and the daemon when the mount is
	// in-process. Less sensitive to a noisy machine than the rate.
	CPUUsPerTrip float64 `json:"cpu_us_per_round_trip,omitempty"`
}

func (r CtlResult) String() string {
	s := fmt.Sprintf("%-9s %3d clients: %8.0f round trips/s, p50 %6.0fus p99 %6.0fus (%d in %.2fs), %.0fus CPU each", r.Via, r.Clients, r.PerSec, r.P50Us, r.P99Us, r.RoundTrips, r.Seconds, r.CPUUsPerTrip)
	if r.FUSERequestsPerTrip > 0 {
		s += fmt.Sprintf(", %.1f FUSE requests each", r.FUSERequestsPerTrip)
	}
	return s
}

// runClients runs trip on clients goroutines and merges: each client
// starts trips until runtime has passed, and every trip started counts,
// over the time until the last one ended (a run that counted only the
// trips ended within runtime found none on a loaded machine, while the
// FUSE requests and CPU of the trips that ended later were counted).
func runClients(ctx context.Context, via string, clients int, runtime time.Duration, trip func(c int) error) (CtlResult, error) {
	res := CtlResult{Via: via, Clients: clients}
	ctx, cancel := context.WithTimeout(ctx, runtime)
	defer cancel()
	hists := make([]Histogram, clients)
	errs := make([]error, clients)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := trip(c); err != nil {
					errs[c] = fmt.Errorf("client %d: %w", c, err)
					return
				}
				hists[c].Record(time.Since(t0))
			}
		}()
	}
	wg.Wait()
	cpu := cpuTime() - cpu0
	res.Seconds = time.Since(start).Seconds()
	var h Histogram
	for c := range clients {
		if errs[c] != nil {
			return res, errs[c]
		}
		h.Merge(&hists[c])
	}
	res.RoundTrips = h.Count()
	if res.RoundTrips > 0 {
		res.CPUUsPerTrip = float64(cpu.Microseconds()) / float64(res.RoundTrips)
	}
	res.PerSec = float64(res.RoundTrips) / res.Seconds
	res.P50Us = float64(h.Quantile(0.5)) / 1e3
	res.P99Us = float64(h.Quantile(0.99)) / 1e3
	return res, nil
}

// RunCtlMount runs round trips through the mount at dir, reading 4 KiB
// of segment seg into client c's 4 KiB of memory region mem (registered
// with at least clients * 4 KiB).
func RunCtlMount(ctx context.Context, dir, mem, seg string, clients int, runtime time.Duration) (CtlResult, error) {
	batches := filepath.Join(dir, "ctl", "batches")
	return runClients(ctx, "mount", clients, runtime, func(c int) error {
		raw, err := os.ReadFile(filepath.Join(batches, "clone"))
		if err != nil {
			return err
		}
		b := filepath.Join(batches, strings.TrimSpace(string(raw)))
		doc := fmt.Sprintf(`{"op":"read","target":%q,"requests":[{"memory":%q,"offset":%d,"target_offset":0,"length":4096}]}`, seg, mem, c*4096)
		err = writeCtl(filepath.Join(b, "submit"), doc)
		if err == nil {
			err = writeCtl(filepath.Join(b, "ctl"), "seal")
		}
		if err == nil {
			var st []byte
			if st, err = os.ReadFile(filepath.Join(b, "wait")); err == nil && strings.TrimSpace(string(st)) != "completed" {
				err = fmt.Errorf("%s/wait: %q, want completed", b, st)
			}
		}
		if rerr := unix.Rmdir(b); rerr != nil && err == nil {
			err = fmt.Errorf("rmdir %s: %w", b, rerr)
		}
		return err
	})
}

// writeCtl writes one document to a control file, as `echo > file` does
// but without O_CREAT|O_TRUNC.
func writeCtl(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// RunCtlAPI runs the same round trips through the Go API in-process.
func RunCtlAPI(ctx context.Context, e *engine.Engine, seg *engine.Segment, r *engine.Region, clients int, runtime time.Duration) (CtlResult, error) {
	return runClients(ctx, "api", clients, runtime, func(c int) error {
		b, err := e.AllocateBatch(1)
		if err != nil {
			return err
		}
		defer b.Free()
		req := []engine.Request{{Address: r.BaseAddress() + uint64(c)*4096, Length: 4096}}
		if _, err := b.Submit(engine.OpRead, seg, req, nil, 0); err != nil {
			return err
		}
		if err := b.Seal(); err != nil {
			return err
		}
		st, err := b.Wait(time.Minute)
		if err == nil && st != engine.StateCompleted {
			err = fmt.Errorf("batch %d ended %s", b.ID(), st)
		}
		return err
	})
}

// cpuTime is this process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
