// bench.go owns the `bench` subcommand: flag parsing and validation,
// wiring an engine for the workload, CPU and mutex profiles, printing. The
// workload itself lives in package bench.
//
// Invariants:
//   - Flag problems are all reported at once and exit 2; run failures
//     exit 1. With --json, stdout holds exactly one JSON object.
//   - The file is created or extended only with --create.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/orbitefs/orbitefs/bench"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// benchCommands are bench's subcommands, in the order help lists them.
func benchCommands() []command {
	return []command{
		{"bench file", "--file PATH [flags]", "a file workload at a fixed queue depth through the engine (--impl pread: a naive baseline)", benchFileMain},
		{"bench load", "--file PATH [flags]", "load a whole file into cpu, pinned or cuda:N memory, or store it (--op write)", loadMain},
		{"bench kvswap", "--dir DIR [flags]", "swap KV-cache groups between per-layer files and memory, by N clients", kvswapMain},
		{"bench ctl", "[flags]", "batch round trips through a FUSE mount against the Go API", ctlMain},
		{"bench peer", "--addr HOST:PORT [flags]", "READ or WRITE against a peer's exported region (or notifications), with CPU per GB", benchPeerMain},
	}
}

// benchHelp writes bench's own help: its subcommands.
func benchHelp(w io.Writer) {
	fmt.Fprint(w, "usage: orbitefs bench SUBCOMMAND [flags]\n\nMeasures the engine (no daemon needed). Subcommands:\n")
	for _, c := range benchCommands() {
		writeCommand(w, c)
	}
	fmt.Fprint(w, "\n`orbitefs bench SUBCOMMAND -h` prints its flags. docs/performance.md records the\nresults and the scripts that compare them with fio.\n")
}

// benchMain dispatches `orbitefs bench SUBCOMMAND`.
func benchMain(args []string) int {
	if len(args) == 0 {
		benchHelp(os.Stderr)
		return 2
	}
	if isHelp(args[0]) {
		benchHelp(os.Stdout)
		return 0
	}
	for _, c := range benchCommands() {
		if c.name == "bench "+args[0] {
			return c.run(args[1:])
		}
	}
	fmt.Fprintf(os.Stderr, "orbitefs bench: unknown subcommand %q\n\n", args[0])
	benchHelp(os.Stderr)
	return 2
}

const benchUsage = `usage: orbitefs bench file --file PATH [flags]

Drives a file workload at a fixed queue depth through the engine API (no
FUSE) and reports bytes/s, IOPS and p50/p99 latency. --impl pread runs the
same workload with plain pread/pwrite goroutines, as a naive baseline.

The file must exist and hold at least --size bytes (a write run never
extends it); --create makes or grows it with random data first.

flags:
`

// benchArgs is the parsed command line of `bench file`.
type benchArgs struct {
	opts         bench.Options
	impl         bench.Impl
	json         bool
	create       bool
	cpuprofile   string
	trace        string
	mutexprofile string
}

// parseBenchArgs parses the flags after `bench file`. sizeOf reports the
// file's current size for a missing --size (the whole file). It returns
// every flag problem joined; flag.ErrHelp for -h.
func parseBenchArgs(args []string, out io.Writer) (benchArgs, error) {
	var a benchArgs
	fs := flag.NewFlagSet("orbitefs bench file", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, benchUsage)
		fs.PrintDefaults()
	}
	file := fs.String("file", "", "file to exercise (required)")
	op := fs.String("op", "read", "read (file -> memory) or write (memory -> file)")
	pattern := fs.String("pattern", "seq", "seq or rand")
	bs := fs.String("bs", "4KiB", "bytes per request (e.g. 4KiB, 1MiB)")
	qd := fs.Int("qd", 1, "requests kept in flight, 1-4096 (per job)")
	jobs := fs.Int("jobs", 1, "independent copies of the workload run at once (fio's numjobs): engine jobs each with their own batches, pread jobs --qd goroutines each")
	size := fs.String("size", "", "bytes of the file exercised from offset 0 (default: the whole file)")
	runtime := fs.Duration("runtime", 10*time.Second, "how long to measure")
	direct := fs.Bool("direct", false, "O_DIRECT on every request, failing if the file has none (default: page cache)")
	impl := fs.String("impl", "engine", "engine (orbitefs engine) or pread (naive goroutine baseline)")
	seed := fs.Uint64("seed", 1, "seed of random offsets")
	hooks := fs.Bool("hook-reports", false, "take every request's report from the batch's completion hook, never back from Submit (engine)")
	fs.BoolVar(&a.json, "json", false, "print one JSON object")
	fs.BoolVar(&a.create, "create", false, "create the file, or extend it to --size, with random data before the run")
	fs.StringVar(&a.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured run to `FILE` (go tool pprof)")
	fs.StringVar(&a.trace, "trace", "", "write an execution trace of the measured run to `FILE` (go tool trace)")
	fs.StringVar(&a.mutexprofile, "mutexprofile", "", "write a profile of mutex contention during the run to `FILE` (go tool pprof; every contention event is sampled)")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	o := bench.Options{File: *file, QueueDepth: *qd, Jobs: *jobs, Runtime: *runtime, Direct: *direct, Seed: *seed, HookReports: *hooks}
	var err error
	if o.Op, err = bench.ParseOp(*op); err != nil {
		errs = append(errs, err)
	}
	if o.Pattern, err = bench.ParsePattern(*pattern); err != nil {
		errs = append(errs, err)
	}
	if a.impl, err = bench.ParseImpl(*impl); err != nil {
		errs = append(errs, err)
	}
	sizeErr := func(flag string, err error) error {
		return fmt.Errorf("--%s: %w", flag, err)
	}
	if n, err := config.ParseSize(*bs); err != nil {
		errs = append(errs, sizeErr("bs", err))
	} else {
		o.BlockSize = uint64(n)
	}
	switch {
	case *size != "":
		if n, err := config.ParseSize(*size); err != nil {
			errs = append(errs, sizeErr("size", err))
		} else {
			o.Size = uint64(n)
		}
	case a.create:
		errs = append(errs, errors.New("--create needs --size"))
	case *file != "" && o.BlockSize > 0:
		// The whole file, in whole blocks.
		if st, err := os.Stat(*file); err == nil && st.Mode().IsRegular() {
			o.Size = uint64(st.Size()) / o.BlockSize * o.BlockSize
		}
	}
	if *file != "" && !a.create {
		if _, err := os.Stat(*file); errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("--file %s: no such file (--create --size N makes one of random data)", *file))
		}
	}
	a.opts = o
	if len(errs) > 0 {
		return a, errors.Join(errs...)
	}
	if err := o.Validate(); err != nil {
		return a, err
	}
	return a, nil
}

// benchFileMain is `orbitefs bench file`.
func benchFileMain(args []string) int {
	a, err := parseBenchArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs bench file: %v\n", err)
		return 2
	}
	res, err := runBench(a)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs bench file: %v\n", err)
		return 1
	}
	if a.json {
		b, err := json.Marshal(res)
		if err != nil {
			fmt.Fprintf(os.Stderr, "orbitefs bench file: %v\n", err)
			return 1
		}
		fmt.Printf("%s\n", b)
	} else {
		fmt.Println(res.String())
		if c := res.Engine; c != nil {
			fmt.Printf("engine: %d batches, %d groups, %d SQEs (%d fixed-buffer, %d fixed-file), %d fast-path hits, %d workers started, %d rings\n",
				c.Batches, c.GroupsSubmitted, c.SQEsSubmitted, c.FixedBufferOps, c.FixedFileOps, c.FastPathHits, c.WorkersStarted, c.Rings)
		}
	}
	return 0
}

// runBench prepares the file if asked, builds the engine for the
// workload and runs it, profiling the run when asked.
func runBench(a benchArgs) (res bench.Result, err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if a.create {
		if _, err := bench.Prepare(a.opts.File, a.opts.Size); err != nil {
			return res, err
		}
	}
	var e *engine.Engine
	if a.impl == bench.ImplEngine {
		cfg := a.opts.EngineConfig(config.DefaultEngine())
		if e, err = engine.New(cfg, transports(cfg)...); err != nil {
			return res, err
		}
		defer func() {
			if cerr := e.Close(10 * time.Second); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	stopProfiles, err := startProfiles(a.cpuprofile, a.trace)
	if err != nil {
		return res, err
	}
	defer stopProfiles()
	if a.mutexprofile != "" {
		f, err := os.Create(a.mutexprofile)
		if err != nil {
			return res, fmt.Errorf("--mutexprofile: %w", err)
		}
		defer f.Close()
		prev := runtime.SetMutexProfileFraction(1)
		defer func() {
			runtime.SetMutexProfileFraction(prev)
			if perr := pprof.Lookup("mutex").WriteTo(f, 0); perr != nil && err == nil {
				err = fmt.Errorf("--mutexprofile: %w", perr)
			}
		}()
	}
	if e != nil {
		return bench.Run(ctx, e, a.opts)
	}
	return bench.RunPread(ctx, a.opts)
}
