// benchctl.go owns `orbitefs bench ctl`: control-plane round trips
// (submit a 4 KiB read, wait until terminal, free) through a mount, in
// the shell form (bench/ctl.go) and the one-file transaction forms
// (bench/ctltxn.go), and through the Go API, by 1 and N clients.
//
// Without --mount it mounts its own control filesystem in-process (root
// or fusermount3 needed) over the same engine the API loop uses, and
// counts the FUSE requests each round trip costs on a second mount of the
// same service (counting slows requests, so it never runs while timing).
// With --mount it drives that daemon (whose FUSE requests it cannot see).
// --cpuprofile profiles the whole process, so with the in-process mount
// it shows the daemon's side of every FUSE request.

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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/orbitefs/orbitefs/bench"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/fusefs"
)

const ctlUsage = `usage: orbitefs bench ctl [--mount DIR] [--clients N] [--runtime D] [--forms LIST] [--data-dir DIR] [--cpuprofile FILE] [--json]

Measures whole batch round trips (submit one 4 KiB read, wait until it is
terminal, free the batch) per second and their p50/p99 latency, by 1
client and by --clients concurrent clients, through the mount in three
forms and through the Go API in-process; prints each form's ratio to the
API and, for its own in-process mount, the FUSE requests per round trip.

Forms through the mount:
  mount      the shell form: read clone, write submit, write seal to ctl,
             read wait, rmdir
  txn        the one-file transaction, opened per round trip: open
             ctl/batches/txn read-write, write the submission, read the
             status, close
  txn-reuse  the one-file transaction on one descriptor per client: write
             the submission, read the status (the next write frees the
             batch)

flags:
`

// ctlReport is what --json prints.
type ctlReport struct {
	Runs      []bench.CtlResult `json:"runs"`
	MountAPI1 float64           `json:"mount_api_ratio_1"`
	MountAPIN float64           `json:"mount_api_ratio_n"`
	// The one-file transaction (/ctl/batches/txn) against the API: opened
	// per round trip (txn) and one descriptor per client (txn-reuse).
	TxnAPI1      float64 `json:"txn_api_ratio_1"`
	TxnAPIN      float64 `json:"txn_api_ratio_n"`
	TxnReuseAPI1 float64 `json:"txn_reuse_api_ratio_1"`
	TxnReuseAPIN float64 `json:"txn_reuse_api_ratio_n"`
	RSSIdleKiB   uint64  `json:"rss_idle_kib"`
	RSSLoadKiB   uint64  `json:"rss_under_clients_kib"`
	// FUSE requests by opcode over the counted 1-client runs, per form.
	FUSEByOpOne      map[string]uint64 `json:"fuse_requests_by_op_1_client,omitempty"`
	FUSEByOpTxn      map[string]uint64 `json:"fuse_requests_by_op_txn,omitempty"`
	FUSEByOpTxnReuse map[string]uint64 `json:"fuse_requests_by_op_txn_reuse,omitempty"`
}

// ctlMountForm is one way of driving the mount.
type ctlMountForm struct {
	via string
	run func(ctx context.Context, dir, mem, seg string, clients int, runtime time.Duration) (bench.CtlResult, error)
}

var ctlMountForms = []ctlMountForm{
	{"mount", bench.RunCtlMount},
	{"txn", bench.RunCtlTxn},
	{"txn-reuse", bench.RunCtlTxnReuse},
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
	forms := fs.String("forms", "mount,txn,txn-reuse", "comma-separated forms through the mount to run")
	dataDir := fs.String("data-dir", "", "directory for the 4 KiB file the round trips read (default: the system temporary directory; /dev/shm takes the disk out of the round trip)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (the in-process daemon included) to this file")
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
	sel, err := selectCtlForms(*forms)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs bench ctl: %v\n", err)
		return 2
	}
	stopProfiles, err := startProfiles(*cpuprofile, "")
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs bench ctl: %v\n", err)
		return 1
	}
	defer stopProfiles()
	rep, err := runCtl(*mount, *dataDir, *clients, *runtime, sel)
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
	fmt.Printf("mount/api: %.3f (1 client), %.3f (%d clients); txn/api: %.3f, %.3f; txn-reuse/api: %.3f, %.3f\n",
		rep.MountAPI1, rep.MountAPIN, *clients, rep.TxnAPI1, rep.TxnAPIN, rep.TxnReuseAPI1, rep.TxnReuseAPIN)
	fmt.Printf("RSS %d KiB idle, %d KiB under %d clients\n", rep.RSSIdleKiB, rep.RSSLoadKiB, *clients)
	return 0
}

// selectCtlForms parses --forms.
func selectCtlForms(list string) ([]ctlMountForm, error) {
	var out []ctlMountForm
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(ctlMountForms, func(f ctlMountForm) bool { return f.via == name })
		if i < 0 {
			return nil, fmt.Errorf("--forms: unknown form %q: want mount, txn or txn-reuse", name)
		}
		out = append(out, ctlMountForms[i])
	}
	return out, nil
}

func runCtl(mount, dataDir string, clients int, runtime time.Duration, forms []ctlMountForm) (ctlReport, error) {
	var rep ctlReport
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tmp, err := os.MkdirTemp("", "orbitefs-bench-ctl-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, "data.bin")
	if dataDir != "" {
		dd, err := os.MkdirTemp(dataDir, "orbitefs-bench-ctl-")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(dd)
		file = filepath.Join(dd, "data.bin")
	}
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
		svc := control.New(e, control.Options{Version: buildVersion(), DefaultBatchCapacity: 16, MaxDocumentBytes: 1 << 20,
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
		var viaMount []bench.CtlResult
		for _, form := range forms {
			m, err := form.run(ctx, mount, name, name, n, runtime)
			if err != nil {
				return rep, fmt.Errorf("%s: %w", form.via, err)
			}
			viaMount = append(viaMount, m)
		}
		if n == clients {
			rep.RSSLoadKiB = rssKiB()
		}
		a, err := bench.RunCtlAPI(ctx, e, seg, region, n, runtime)
		if err != nil {
			return rep, err
		}
		rep.Runs = append(append(rep.Runs, viaMount...), a)
		ratios := map[string][2]*float64{"mount": {&rep.MountAPI1, &rep.MountAPIN},
			"txn": {&rep.TxnAPI1, &rep.TxnAPIN}, "txn-reuse": {&rep.TxnReuseAPI1, &rep.TxnReuseAPIN}}
		for _, m := range viaMount {
			r := ratios[m.Via]
			if n == 1 {
				*r[0] = m.PerSec / a.PerSec
			}
			if n == clients {
				*r[1] = m.PerSec / a.PerSec
			}
		}
		if clients == 1 {
			break
		}
	}
	if counting != nil {
		// A mount of its own: counting slows every request. The count
		// runs 500 ms whatever runtime is: a form's fixed requests (the
		// kept descriptor's open and close) are spread over enough trips
		// also on a loaded machine.
		for _, form := range forms {
			per, byOp, err := countRequests(ctx, counting, form, name, 500*time.Millisecond)
			if err != nil {
				return rep, err
			}
			switch form.via {
			case "mount":
				rep.FUSEByOpOne = byOp
			case "txn":
				rep.FUSEByOpTxn = byOp
			case "txn-reuse":
				rep.FUSEByOpTxnReuse = byOp
			}
			for i := range rep.Runs {
				if rep.Runs[i].Via == form.via {
					rep.Runs[i].FUSERequestsPerTrip = per
				}
			}
		}
	}
	return rep, nil
}

// countRequests runs form by one client on the counting mount and
// returns the FUSE requests per round trip and their count by opcode.
func countRequests(ctx context.Context, counting *fusefs.Server, form ctlMountForm, name string, runtime time.Duration) (float64, map[string]uint64, error) {
	// A short warm-up first: the first walk looks up the fixed names the
	// kernel then caches, which a short count would spread over few trips.
	if _, err := form.run(ctx, counting.Dir(), name, name, 1, 20*time.Millisecond); err != nil {
		return 0, nil, fmt.Errorf("%s (counting warm-up): %w", form.via, err)
	}
	before := counting.Requests()
	c, err := form.run(ctx, counting.Dir(), name, name, 1, runtime)
	if err != nil {
		return 0, nil, fmt.Errorf("%s (counting): %w", form.via, err)
	}
	var total uint64
	byOp := map[string]uint64{}
	for op, v := range counting.Requests() {
		if d := v - before[op]; d > 0 {
			byOp[op] = d
			// An INTERRUPT is the kernel's notice that the thread in a
			// request got a signal (the Go runtime's preemption signals
			// reach threads of this very process under load): no trip
			// makes one, so it is listed but not counted.
			if op != "INTERRUPT" {
				total += d
			}
		}
	}
	if c.RoundTrips == 0 {
		return 0, byOp, nil
	}
	return float64(total) / float64(c.RoundTrips), byOp, nil
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
