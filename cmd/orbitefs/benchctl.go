// benchctl.go owns `orbitefs bench ctl`: control-plane round trips
// (clone, submit a 4 KiB read, seal, wait, free) through a mount and
// through the Go API, by 1 and N clients (bench/ctl.go).
//
// Without --mount it mounts its own control filesystem in-process (root
// or fusermount3 needed) over the same engine the API loop uses, and
// counts the FUSE requests each round trip costs on a second mount of the
// same service (counting slows requests, so it never runs while timing). With --mount it drives
// that daemon (whose FUSE requests it cannot see).

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/orbitefs/orbitefs/bench"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/fusefs"
)

const ctlUsage = `usage: orbitefs bench ctl [--mount DIR] [--clients N] [--runtime D] [--json]

Measures whole batch round trips (clone, submit one 4 KiB read, seal,
wait, free) per second and their p50/p99 latency, through the mount and
through the Go API in-process, by 1 client and by --clients concurrent
clients; prints the mount/API ratio and, for its own in-process mount,
the FUSE requests per round trip.

flags:
`

// ctlReport is what --json prints.
type ctlReport struct {
	Runs        []bench.CtlResult `json:"runs"`
	MountAPI1   float64           `json:"mount_api_ratio_1"`
	MountAPIN   float64           `json:"mount_api_ratio_n"`
	RSSIdleKiB  uint64            `json:"rss_idle_kib"`
	RSSLoadKiB  uint64            `json:"rss_under_clients_kib"`
	FUSEByOpOne map[string]uint64 `json:"fuse_requests_by_op_1_client,omitempty"`
}

func ctlMain(args []string) int {
	fs := flag.NewFlagSet("orbitefs bench ctl", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, ctlUsage)
		fs.PrintDefaults()
	}
	mount := fs.String("mount", "", "drive this mounted daemon (default: mount one in-process)")
	clients := fs.Int("clients", 8, "concurrent clients of the second measurement")
	runtime := fs.Duration("runtime", 3*time.Second, "how long each measurement runs")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *clients < 1 || *runtime <= 0 {
		fmt.Fprintf(os.Stderr, "orbitefs bench ctl: --clients %d and --runtime %s must be positive\n", *clients, *runtime)
		return 2
	}
	rep, err := runCtl(*mount, *clients, *runtime)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs bench ctl: %v\n", err)
		return 1
	}
	if *asJSON {
		b, _ := json.Marshal(rep)
		fmt.Printf("%s\n", b)
		return 0
	}
	for _, r := range rep.Runs {
		fmt.Println(r)
	}
	fmt.Printf("mount/api: %.3f (1 client), %.3f (%d clients); RSS %d KiB idle, %d KiB under %d clients\n",
		rep.MountAPI1, rep.MountAPIN, *clients, rep.RSSIdleKiB, rep.RSSLoadKiB, *clients)
	return 0
}

func runCtl(mount string, clients int, runtime time.Duration) (ctlReport, error) {
	var rep ctlReport
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "orbitefs-bench-ctl-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "data.bin")
	if err := os.WriteFile(file, make([]byte, 4096), 0o644); err != nil {
		return rep, err
	}
	cfg := config.DefaultEngine()
	cfg.MaxInflightBatches = max(cfg.MaxInflightBatches, 2*clients)
	e, err := engine.New(cfg, transports(cfg)...)
	if err != nil {
		return rep, err
	}
	defer e.Close(time.Minute)

	var counting *fusefs.Server // a second, counting mount of the same service
	if mount == "" {
		mount = filepath.Join(tmp, "mnt")
		if err := os.Mkdir(mount, 0o700); err != nil {
			return rep, err
		}
		lg := slog.New(slog.NewTextHandler(io.Discard, nil))
		svc := control.New(e, control.Options{Version: Version, DefaultBatchCapacity: 16, MaxDocumentBytes: 1 << 20,
			CloseTimeout: time.Minute, IdleBatchTimeout: time.Hour, Logger: lg})
		srv, err := fusefs.Mount(mount, svc, fusefs.Options{Logger: lg})
		if err != nil {
			return rep, err
		}
		cdir := filepath.Join(tmp, "counting")
		if err := os.Mkdir(cdir, 0o700); err != nil {
			return rep, err
		}
		if counting, err = fusefs.Mount(cdir, svc, fusefs.Options{Logger: lg, CountRequests: true}); err != nil {
			srv.Unmount(5 * time.Second)
			return rep, err
		}
		defer func() {
			svc.Shutdown(time.Minute)
			counting.Unmount(5 * time.Second)
			srv.Unmount(5 * time.Second)
		}()
	}
	rep.RSSIdleKiB = rssKiB()
	name := fmt.Sprintf("benchctl%d", os.Getpid())
	if err := os.WriteFile(filepath.Join(mount, "memory", "register"), fmt.Appendf(nil, `{"name":%q,"location":"cpu","bytes":%d}`, name, clients*4096), 0); err != nil {
		return rep, fmt.Errorf("register memory through %s: %w", mount, err)
	}
	defer syscall.Rmdir(filepath.Join(mount, "memory", name))
	if err := os.WriteFile(filepath.Join(mount, "segments", "open"), fmt.Appendf(nil, `{"name":%q,"uri":"file://%s","permission":"read"}`, name, file), 0); err != nil {
		return rep, fmt.Errorf("open segment through %s: %w", mount, err)
	}
	defer syscall.Rmdir(filepath.Join(mount, "segments", name))

	seg, err := e.OpenFileSegment("file://"+file, engine.PermRead)
	if err != nil {
		return rep, err
	}
	defer e.CloseFileSegment(seg, time.Minute)
	region, err := e.RegisterMemory(uint64(clients) * 4096)
	if err != nil {
		return rep, err
	}
	defer e.Unregister(region)

	for _, n := range []int{1, clients} {
		m, err := bench.RunCtlMount(ctx, mount, name, name, n, runtime)
		if err != nil {
			return rep, err
		}
		if n == clients {
			rep.RSSLoadKiB = rssKiB()
		}
		a, err := bench.RunCtlAPI(ctx, e, seg, region, n, runtime)
		if err != nil {
			return rep, err
		}
		rep.Runs = append(rep.Runs, m, a)
		if n == 1 {
			rep.MountAPI1 = m.PerSec / a.PerSec
		}
		if n == clients {
			rep.MountAPIN = m.PerSec / a.PerSec
		}
		if clients == 1 {
			break
		}
	}
	if counting != nil {
		// A mount of its own: counting slows every request.
		before := counting.Requests()
		c, err := bench.RunCtlMount(ctx, counting.Dir(), name, name, 1, min(runtime, 500*time.Millisecond))
		if err != nil {
			return rep, err
		}
		var total uint64
		rep.FUSEByOpOne = map[string]uint64{}
		for op, v := range counting.Requests() {
			if d := v - before[op]; d > 0 {
				rep.FUSEByOpOne[op] = d
				total += d
			}
		}
		if c.RoundTrips > 0 {
			per := float64(total) / float64(c.RoundTrips)
			for i := range rep.Runs {
				if rep.Runs[i].Via == "mount" {
					rep.Runs[i].FUSERequestsPerTrip = per
				}
			}
		}
	}
	return rep, nil
}

// rssKiB is this process's resident set size (the daemon's, when the
// mount is in-process), 0 if unknown.
func rssKiB() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res uint64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * uint64(os.Getpagesize()) / 1024
}
