// benchload.go owns `orbitefs bench load`: flag parsing and engine wiring
// for the whole-file workload of package bench (file -> cpu, pinned or
// cuda:N memory, or back).

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/orbitefs/orbitefs/bench"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

const loadUsage = `usage: orbitefs bench load --file PATH [flags]

Loads a whole file into registered memory (--mem cpu, pinned or cuda:N),
or stores memory into it (--op write), through the engine API, and reports
GB/s per pass. A file of any size loads: each pass is cut into
submissions of --request-sized requests that fit the engine's limits
(max_transfer_bytes, max_batch_requests, max_inflight_bytes), several in
flight; a file up to half of max_inflight_bytes is one submission.
--cold drops the file's page cache before each read pass.

flags:
`

func loadMain(args []string) int {
	fs := flag.NewFlagSet("orbitefs bench load", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, loadUsage)
		fs.PrintDefaults()
	}
	file := fs.String("file", "", "file to load or store (required; never created or extended)")
	op := fs.String("op", "read", "read (file -> memory) or write (memory -> file)")
	mem := fs.String("mem", "cpu", "memory: cpu, pinned or cuda:N")
	transport := fs.String("transport", "unspec", "unspec, io_uring or gds")
	size := fs.String("size", "", "bytes from offset 0 (default: the whole file)")
	request := fs.String("request", "256MiB", "bytes per request")
	runs := fs.Int("runs", 3, "passes")
	cold := fs.Bool("cold", false, "drop the file's page cache before each pass")
	verify := fs.Bool("verify", false, "compare memory with the file after the last pass")
	asJSON := fs.Bool("json", false, "print one JSON object")
	lanes := fs.Int("lanes", 0, "engine.staging_lanes (0: the default)")
	chunks := fs.Int("chunks", 0, "engine.staging_chunk_count (0: the default)")
	chunk := fs.String("chunk", "", "engine.staging_chunk_size (default: the default)")
	maxInflight := fs.String("max-inflight-bytes", "", "engine.max_inflight_bytes (default: the default)")
	maxTransfer := fs.String("max-transfer-bytes", "", "engine.max_transfer_bytes (default: the default)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o := bench.LoadOptions{File: *file, Runs: *runs, Cold: *cold, Verify: *verify}
	var errs []error
	var err error
	if *file == "" {
		errs = append(errs, errors.New("--file is required"))
	}
	if o.Op, err = bench.ParseOp(*op); err != nil {
		errs = append(errs, err)
	}
	if o.Memory, err = bench.ParseLocation(*mem); err != nil {
		errs = append(errs, err)
	}
	if o.Transport, err = bench.ParseTransport(*transport); err != nil {
		errs = append(errs, err)
	}
	if *size != "" {
		n, err := config.ParseSize(*size)
		if err != nil {
			errs = append(errs, fmt.Errorf("--size: %w", err))
		}
		o.Size = uint64(n)
	}
	if n, err := config.ParseSize(*request); err != nil || n == 0 {
		errs = append(errs, fmt.Errorf("--request %q: want a positive size like 256MiB", *request))
	} else {
		o.Request = uint64(n)
	}
	if o.Runs < 1 {
		errs = append(errs, fmt.Errorf("--runs %d: want at least 1", o.Runs))
	}
	if len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "orbitefs bench load: %v\n", errors.Join(errs...))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The engine's own limits, as a daemon would have them: PlanLoad cuts
	// each pass to fit them rather than raising them to fit the file.
	cfg := config.DefaultEngine()
	cfg.StagingLanes = *lanes
	if *chunks > 0 {
		cfg.StagingChunkCount = *chunks
	}
	for _, f := range []struct {
		flag string
		val  string
		dst  *config.Size
	}{{"--chunk", *chunk, &cfg.StagingChunkSize}, {"--max-inflight-bytes", *maxInflight, &cfg.MaxInflightBytes}, {"--max-transfer-bytes", *maxTransfer, &cfg.MaxTransferBytes}} {
		if f.val == "" {
			continue
		}
		n, err := config.ParseSize(f.val)
		if err != nil {
			fmt.Fprintf(os.Stderr, "orbitefs bench load: %s: %v\n", f.flag, err)
			return 2
		}
		*f.dst = n
	}
	// engine.New validates the staging and limit flags.
	return runOnEngine("load", cfg, *asJSON, func(e *engine.Engine) (bench.LoadResult, error) { return bench.RunLoad(ctx, e, o) })
}

// runOnEngine builds an engine from cfg, runs fn on it and prints its
// result (one JSON object with asJSON); the exit status of a bench
// subcommand.
func runOnEngine[R fmt.Stringer](name string, cfg config.Engine, asJSON bool, fn func(*engine.Engine) (R, error)) int {
	e, err := engine.New(cfg, transports(cfg)...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs bench %s: %v\n", name, err)
		return 1
	}
	defer e.Close(time.Minute)
	res, err := fn(e)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs bench %s: %v\n", name, err)
		return 1
	}
	if asJSON {
		b, _ := json.Marshal(res)
		fmt.Printf("%s\n", b)
	} else {
		fmt.Println(res)
	}
	return 0
}
