// benchkvswap.go owns `orbitefs bench kvswap`: flag parsing and engine
// wiring for the KV-cache swap workload of package bench (kvswap.go).

package main

import (
	"context"
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

const kvswapUsage = `usage: orbitefs bench kvswap --dir DIR [flags]

Swaps KV-cache groups between per-layer files (DIR/layer-NNN.kv, each
--groups groups of --group-bytes) and registered memory (--mem cpu,
pinned or cuda:N) through the engine API: each of --clients clients loops
over batches of --batch random groups of one random layer, read (swap-in)
or, for --write-pct percent of the batches, written (swap-out). Before
the clock starts, every client swaps one batch in at once (the warm-up,
reads only: the engine's first-use costs at this concurrency), reported
apart as warmup_max_us. Reports GB/s, batches/s and per-batch p50/p99. O_DIRECT
where the filesystem has it unless --buffered. --create makes the layer
files first.

flags:
`

func kvswapMain(args []string) int {
	fs := flag.NewFlagSet("orbitefs bench kvswap", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, kvswapUsage)
		fs.PrintDefaults()
	}
	var o bench.KVOptions
	fs.StringVar(&o.Dir, "dir", "", "directory of the layer files (required)")
	fs.IntVar(&o.Layers, "layers", 4, "layer files")
	fs.IntVar(&o.GroupsPerLay, "groups", 256, "KV groups per layer file")
	groupBytes := fs.String("group-bytes", "256KiB", "bytes per KV group (a multiple of 4096)")
	fs.IntVar(&o.BatchGroups, "batch", 32, "groups per batch")
	fs.IntVar(&o.Concurrency, "clients", 1, "concurrent clients, one batch in flight each")
	fs.IntVar(&o.WritePct, "write-pct", 0, "percent of batches that swap out (write)")
	mem := fs.String("mem", "cpu", "memory: cpu, pinned or cuda:N")
	fs.DurationVar(&o.Runtime, "runtime", 10*time.Second, "how long to measure")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the random picks")
	buffered := fs.Bool("buffered", false, "page cache only (no O_DIRECT fd)")
	create := fs.Bool("create", false, "create or grow the layer files with random data first")
	asJSON := fs.Bool("json", false, "print one JSON object")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the measured run to `FILE` (go tool pprof)")
	traceFile := fs.String("trace", "", "write an execution trace of the measured run to `FILE` (go tool trace)")
	engineJSON := fs.String("engine-json", "", "engine configuration as a JSON `FILE`, as the daemon's --engine-json (keys left out keep their defaults)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("--dir is required"))
	}
	if n, err := config.ParseSize(*groupBytes); err != nil {
		errs = append(errs, fmt.Errorf("--group-bytes: %w", err))
	} else {
		o.GroupBytes = uint64(n)
	}
	var err error
	if o.Memory, err = bench.ParseLocation(*mem); err != nil {
		errs = append(errs, err)
	}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "orbitefs bench kvswap: %v\n", errors.Join(errs...))
		return 2
	}
	if *create {
		if err := bench.PrepareKVFiles(o); err != nil {
			fmt.Fprintf(os.Stderr, "orbitefs bench kvswap: --create: %v\n", err)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config.DefaultEngine()
	if *engineJSON != "" {
		c, err := config.EngineFromJSONFile(*engineJSON)
		if err != nil {
			fmt.Fprintln(os.Stderr, "orbitefs bench kvswap: --engine-json:", err)
			return 2
		}
		cfg = c
	}
	cfg.IOUring.DirectIO = !*buffered
	batchBytes := o.GroupBytes * uint64(o.BatchGroups)
	cfg.MaxTransferBytes = config.Size(max(uint64(cfg.MaxTransferBytes), o.GroupBytes))
	cfg.MaxInflightBytes = config.Size(max(uint64(cfg.MaxInflightBytes), batchBytes*uint64(o.Concurrency)))
	cfg.MaxInflightBatches = max(cfg.MaxInflightBatches, o.Concurrency)
	cfg.MaxBatchRequests = max(cfg.MaxBatchRequests, o.BatchGroups)
	cfg.MaxAllocatedRequests = max(cfg.MaxAllocatedRequests, o.BatchGroups*o.Concurrency)
	return runOnEngine("kvswap", cfg, *asJSON, func(e *engine.Engine) (bench.KVResult, error) {
		stopProfiles, err := startProfiles(*cpuprofile, *traceFile)
		if err != nil {
			return bench.KVResult{}, err
		}
		defer stopProfiles()
		return bench.RunKV(ctx, e, o)
	})
}
