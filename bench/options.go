// options.go owns a workload's description: its fields, parsing of the
// enumerated flag values, validation, and the engine config a workload
// needs.
//
// Invariants:
//   - Validate reports every problem at once, each naming the flag, its
//     value and the bound it broke; it never changes the options.
//   - EngineConfig only raises limits (queue depth, batch capacity,
//     in-flight bytes) and sets direct_io; it never lowers one.

package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// Limits on a workload.
const (
	// MaxQueueDepth bounds --qd.
	MaxQueueDepth = 4096
	// MaxBlockSize bounds --bs: one request moves at most this much.
	MaxBlockSize = 1 << 30
	// MaxBufferBytes bounds qd*bs, the memory a run registers.
	MaxBufferBytes = 4 << 30
	// DirectAlign is the granule --bs must be a multiple of with --direct.
	DirectAlign = 4096
)

// Pattern is the order in which a workload visits the file.
type Pattern uint8

const (
	// Seq visits block after block and wraps at Size.
	Seq Pattern = iota
	// Rand picks every block uniformly at random within Size.
	Rand
)

func (p Pattern) String() string {
	if p == Rand {
		return "rand"
	}
	return "seq"
}

// ParsePattern reads "seq" or "rand".
func ParsePattern(s string) (Pattern, error) {
	switch s {
	case "seq":
		return Seq, nil
	case "rand":
		return Rand, nil
	}
	return 0, fmt.Errorf("--pattern %q: want seq or rand", s)
}

// ParseOp reads "read" or "write".
func ParseOp(s string) (engine.Op, error) {
	switch s {
	case "read":
		return engine.OpRead, nil
	case "write":
		return engine.OpWrite, nil
	}
	return 0, fmt.Errorf("--op %q: want read or write", s)
}

// Impl is what executes the workload.
type Impl uint8

const (
	// ImplEngine drives the orbitefs engine (Run).
	ImplEngine Impl = iota
	// ImplPread is the naive baseline: goroutines calling pread/pwrite
	// (RunPread).
	ImplPread
)

func (i Impl) String() string {
	if i == ImplPread {
		return "pread"
	}
	return "engine"
}

// ParseImpl reads "engine" or "pread".
func ParseImpl(s string) (Impl, error) {
	switch s {
	case "engine":
		return ImplEngine, nil
	case "pread":
		return ImplPread, nil
	}
	return 0, fmt.Errorf("--impl %q: want engine or pread", s)
}

// Options describes one workload. The zero value is not valid: File,
// BlockSize, QueueDepth, Size and Runtime must be set.
type Options struct {
	File       string        // absolute or relative path of an existing regular file
	Op         engine.Op     // read: file -> memory; write: memory -> file
	Pattern    Pattern       // seq or rand
	BlockSize  uint64        // bytes per request
	QueueDepth int           // requests kept in flight
	Size       uint64        // bytes of the file exercised, from offset 0
	Runtime    time.Duration // how long to measure
	Direct     bool          // O_DIRECT (required, not best effort); false: page cache
	Seed       uint64        // random offsets; the same seed gives the same sequence
	// Jobs runs that many independent copies of the workload at once
	// (fio's numjobs): each engine job its own batches and QueueDepth
	// requests, the pread baseline QueueDepth goroutines per job. 0 is 1.
	Jobs int
	// HookReports takes every report from the batch's completion hook.
	// By default a request asks for its report back from Submit
	// (engine.SubmitOptions.Inline), as a client that waits for each of
	// its requests would, and only the others reach the hook.
	HookReports bool

	// submitting, nil outside tests, runs on a slot's goroutine just
	// before each engine Submit (file.go): a test holds slots there.
	submitting func()
	// meet, nil outside tests, runs on both sides of a task's meeting in
	// its cell (file.go), just before (after false) and just after each
	// side's swap: hook is the completion hook's side, else the slot's.
	// A test holds one side there to choose who comes first.
	meet func(batch uint64, task int, hook, after bool)
}

// MaxJobs bounds --jobs.
const MaxJobs = 256

// jobs is Jobs, with 0 meaning 1.
func (o *Options) jobs() int { return max(1, o.Jobs) }

// Validate checks every field and returns all problems joined, or nil.
func (o *Options) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.File == "" {
		add("--file is required")
	}
	if o.Op != engine.OpRead && o.Op != engine.OpWrite {
		add("op %d: want read or write", o.Op)
	}
	if o.Pattern != Seq && o.Pattern != Rand {
		add("pattern %d: want seq or rand", o.Pattern)
	}
	switch {
	case o.BlockSize == 0:
		add("--bs (0) must be > 0")
	case o.BlockSize > MaxBlockSize:
		add("--bs (%s) must be <= %s", config.Size(o.BlockSize), config.Size(MaxBlockSize))
	case o.Direct && o.BlockSize%DirectAlign != 0:
		add("--bs (%d) must be a multiple of %d with --direct", o.BlockSize, DirectAlign)
	}
	if o.Jobs < 0 || o.Jobs > MaxJobs {
		add("--jobs (%d) must be in [1, %d]", o.Jobs, MaxJobs)
	} else if o.QueueDepth < 1 || o.QueueDepth > MaxQueueDepth {
		add("--qd (%d) must be in [1, %d]", o.QueueDepth, MaxQueueDepth)
	} else if o.BlockSize > 0 && o.BlockSize <= MaxBlockSize && o.bufferBytes() > MaxBufferBytes {
		add("--jobs (%d) * --qd (%d) * --bs (%s) = %s of buffers exceeds %s", o.jobs(), o.QueueDepth, config.Size(o.BlockSize),
			config.Size(o.bufferBytes()), config.Size(MaxBufferBytes))
	}
	if o.Size < o.BlockSize {
		add("--size (%s) must be >= --bs (%s)", config.Size(o.Size), config.Size(o.BlockSize))
	}
	if o.Direct && o.Size%DirectAlign != 0 {
		add("--size (%d) must be a multiple of %d with --direct", o.Size, DirectAlign)
	}
	if o.Runtime <= 0 {
		add("--runtime (%s) must be > 0", o.Runtime)
	}
	return errors.Join(errs...)
}

// blocks is how many whole blocks fit in Size.
func (o *Options) blocks() uint64 { return o.Size / o.BlockSize }

// bufferBytes is the memory a run uses for its slots.
func (o *Options) bufferBytes() uint64 {
	return uint64(o.jobs()) * uint64(o.QueueDepth) * o.BlockSize
}

// EngineConfig returns base adjusted so an engine built from it can run
// o at full depth: io_uring.direct_io follows o.Direct (false forces the
// page cache), and the ring depth, batch capacity (at least 4*QueueDepth, so a batch
// lasts several rounds of every slot and the old one has drained long
// before the new one fills), the batches and requests allocated at once
// (each job's current, spare and retiring batches) and in-flight byte
// limits are raised where they are too small.
func (o *Options) EngineConfig(base config.Engine) config.Engine {
	c := base
	c.IOUring.DirectIO = o.Direct
	c.IOUring.QueueDepth = max(c.IOUring.QueueDepth, o.QueueDepth)
	if need := 4 * o.QueueDepth; c.MaxBatchRequests < need {
		c.MaxBatchRequests = need
	}
	// A job holds its current batch, a spare and up to maxRetiring full
	// ones (file.go).
	live := (maxRetiring + 2) * o.jobs()
	c.MaxAllocatedRequests = max(c.MaxAllocatedRequests, live*c.MaxBatchRequests)
	c.MaxAllocatedBatches = max(c.MaxAllocatedBatches, live)
	c.MaxInflightBatches = max(c.MaxInflightBatches, o.jobs()*o.QueueDepth)
	if need := config.Size(o.bufferBytes()); c.MaxInflightBytes < need {
		c.MaxInflightBytes = need
	}
	if need := config.Size(o.BlockSize); c.MaxTransferBytes < need {
		c.MaxTransferBytes = need
	}
	return c
}

// checkEngine reports why an engine with config c cannot run o as asked.
func (o *Options) checkEngine(c config.Engine) error {
	var errs []error
	if c.IOUring.DirectIO != o.Direct {
		errs = append(errs, fmt.Errorf("engine io_uring.direct_io is %v but the workload has direct=%v (build the engine from Options.EngineConfig)", c.IOUring.DirectIO, o.Direct))
	}
	if c.IOUring.QueueDepth < o.QueueDepth {
		errs = append(errs, fmt.Errorf("--qd (%d) exceeds engine io_uring.queue_depth (%d): one ring could not keep it in flight", o.QueueDepth, c.IOUring.QueueDepth))
	}
	if c.MaxBatchRequests < o.QueueDepth {
		errs = append(errs, fmt.Errorf("--qd (%d) exceeds engine max_batch_requests (%d)", o.QueueDepth, c.MaxBatchRequests))
	}
	if uint64(c.MaxInflightBytes) < o.bufferBytes() {
		errs = append(errs, fmt.Errorf("--qd * --bs (%s) exceeds engine max_inflight_bytes (%s)", config.Size(o.bufferBytes()), c.MaxInflightBytes))
	}
	if uint64(c.MaxTransferBytes) < o.BlockSize {
		errs = append(errs, fmt.Errorf("--bs (%s) exceeds engine max_transfer_bytes (%s)", config.Size(o.BlockSize), c.MaxTransferBytes))
	}
	// Not raised by EngineConfig: the bound protects the machine.
	if lim := c.RegisteredLimit(); lim < o.bufferBytes() {
		errs = append(errs, fmt.Errorf("--qd * --bs (%s) exceeds engine max_registered_bytes (%s on this machine)", config.Size(o.bufferBytes()), config.Size(lim)))
	}
	return errors.Join(errs...)
}
