// peer.go owns the peer workloads of `orbitefs bench peer`: READ or WRITE
// of one request size against a peer's exported region by N concurrent
// clients for a fixed time (optionally beside a background stream of
// large requests on the same peer), and completion notifications sent
// to a receiver that checks each arrives exactly once.
//
// Invariants:
//   - Ops, Bytes and the latencies count only requests that completed
//     without error inside the measured interval; the background
//     stream's bytes are reported apart, never in Bytes.
//   - CPU is what both processes spent over the measured interval: this
//     one (getrusage) and, when its pid is given, the serving daemon
//     (/proc/PID/stat); CPUSecondsPerGB divides their sum by Bytes.
//   - A notification is counted delivered only when the sender saw it
//     acknowledged; the receiver's count of each message is checked
//     against that (exactly once for every delivered one).

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/peer"
)

// PeerOptions describe one peer run.
type PeerOptions struct {
	Op          string // read, write or notify
	Region      string
	RegionBytes uint64 // offsets stay within [0, RegionBytes)
	Size        uint64 // bytes per request
	Concurrency int
	Runtime     time.Duration
	// Stream, when not 0, runs one more client that WRITEs requests of
	// Stream bytes back to back for the whole run, to StreamRegion
	// (StreamRegionBytes long) or, when that is empty, to Region.
	Stream            uint64
	StreamRegion      string
	StreamRegionBytes uint64
	// Count is the number of notifications (op notify).
	Count     int
	ServerPID int // the serving daemon's pid, for its CPU; 0: unknown
	// Verify checks every byte (peerverify.go): a WRITE carries a pattern
	// of its offset and round and is read back; a READ is compared with
	// what its slot holds. Total, when not 0, ends the run once that many
	// bytes moved (Runtime still bounds it).
	Verify bool
	Total  uint64
}

// Validate checks the options of a read or write run.
func (o *PeerOptions) Validate() error {
	var errs []error
	switch o.Op {
	case "read", "write":
		if o.Size == 0 {
			errs = append(errs, errors.New("--size must be at least 1 byte"))
		}
		if o.Size > o.RegionBytes {
			errs = append(errs, fmt.Errorf("--size %d over the region's %d bytes", o.Size, o.RegionBytes))
		}
		if sb := o.streamBytes(); o.Stream > sb {
			errs = append(errs, fmt.Errorf("--stream %d over the stream region's %d bytes", o.Stream, sb))
		}
		if o.Runtime <= 0 {
			errs = append(errs, fmt.Errorf("--runtime %s: want more than 0", o.Runtime))
		}
		if o.Verify && o.Stream > 0 {
			errs = append(errs, errors.New("--verify with --stream: the stream would overwrite the checked slots"))
		}
		if o.Verify && o.Size > 0 && o.RegionBytes/o.Size < uint64(o.Concurrency) {
			errs = append(errs, fmt.Errorf("--verify: the region's %d bytes hold %d requests of %d bytes, fewer than --concurrency %d (each client needs slots of its own)",
				o.RegionBytes, o.RegionBytes/o.Size, o.Size, o.Concurrency))
		}
		if o.Total > 0 && !o.Verify {
			errs = append(errs, errors.New("--total needs --verify (it counts the verified bytes moved)"))
		}
	case "notify":
		if o.Count < 1 {
			errs = append(errs, fmt.Errorf("--count %d: want at least 1", o.Count))
		}
		if o.Verify || o.Total > 0 {
			errs = append(errs, errors.New("--verify and --total are for --op read and write (notify checks every message anyway)"))
		}
	default:
		errs = append(errs, fmt.Errorf("--op %q: want read, write or notify", o.Op))
	}
	if o.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("--concurrency %d: want at least 1", o.Concurrency))
	}
	return errors.Join(errs...)
}

func (o *PeerOptions) streamRegion() string {
	if o.StreamRegion != "" {
		return o.StreamRegion
	}
	return o.Region
}

func (o *PeerOptions) streamBytes() uint64 {
	if o.StreamRegion != "" {
		return o.StreamRegionBytes
	}
	return o.RegionBytes
}

// PeerResult is one peer run's measurement.
type PeerResult struct {
	Op          string  `json:"op"`
	Peer        string  `json:"peer"`
	Lanes       int     `json:"lanes"`
	Size        uint64  `json:"size"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	Ops         uint64  `json:"ops"`
	Bytes       uint64  `json:"bytes"`
	Errors      uint64  `json:"errors"`
	GBPerSec    float64 `json:"gb_per_sec"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50Us       float64 `json:"p50_us"`
	P99Us       float64 `json:"p99_us"`
	P999Us      float64 `json:"p999_us"`
	MaxUs       float64 `json:"max_us"`
	// BulkGateLinger is the process's bulk gate linger ("0s": never
	// engaged), set by the command.
	BulkGateLinger string `json:"bulk_gate_linger,omitempty"`
	// FrameProtection is what guarded the run's frames ("none",
	// "aead"), set by the command.
	FrameProtection string `json:"frame_protection,omitempty"`

	// CPU seconds over the run: this process, the serving daemon (-1:
	// not measured), and both per GB of Bytes (or of the stream's bytes
	// when there are more of those).
	ClientCPUSeconds float64 `json:"client_cpu_seconds"`
	ServerCPUSeconds float64 `json:"server_cpu_seconds"`
	CPUSecondsPerGB  float64 `json:"cpu_seconds_per_gb"`

	Stream *StreamResult `json:"stream,omitempty"`
	Notify *NotifyResult `json:"notify,omitempty"`
	Verify *VerifyResult `json:"verify,omitempty"`
}

// StreamResult is the background stream of a run.
type StreamResult struct {
	Region   string  `json:"region"`
	Size     uint64  `json:"size"`
	Bytes    uint64  `json:"bytes"`
	GBPerSec float64 `json:"gb_per_sec"`
}

// NotifyResult counts the outcomes of a notification run.
type NotifyResult struct {
	Delivered  uint64 `json:"delivered"`
	Busy       uint64 `json:"busy_retried"` // answered inbox full, sent again
	Unknown    uint64 `json:"unknown"`
	NotSent    uint64 `json:"not_sent"`
	Received   uint64 `json:"received"`
	Duplicates uint64 `json:"duplicates"` // received more than once
	Missing    uint64 `json:"missing"`    // delivered, never received
}

func (r PeerResult) String() string {
	s := fmt.Sprintf("%s %s x%d lanes=%d: %.3f GB/s, %.0f ops/s, p50 %.0f us, p99 %.0f us, p99.9 %.0f us, max %.0f us, %.3f CPU s/GB (client %.2f s, server %.2f s), %d errors",
		r.Op, sizeString(r.Size), r.Concurrency, r.Lanes, r.GBPerSec, r.OpsPerSec, r.P50Us, r.P99Us, r.P999Us, r.MaxUs,
		r.CPUSecondsPerGB, r.ClientCPUSeconds, r.ServerCPUSeconds, r.Errors)
	if r.Stream != nil {
		s += fmt.Sprintf("; beside a %s write stream to %s at %.3f GB/s", sizeString(r.Stream.Size), r.Stream.Region, r.Stream.GBPerSec)
	}
	if r.Verify != nil {
		s += "; " + r.Verify.String()
	}
	if n := r.Notify; n != nil {
		s = fmt.Sprintf("notify x%d: %.0f/s, delivered %d, received %d, duplicates %d, missing %d, unknown %d, not sent %d, busy retried %d, p50 %.0f us, p99 %.0f us",
			r.Concurrency, r.OpsPerSec, n.Delivered, n.Received, n.Duplicates, n.Missing, n.Unknown, n.NotSent, n.Busy, r.P50Us, r.P99Us)
	}
	return s
}

func sizeString(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatUint(n, 10)
}

// RunPeer runs a read or write workload on c.
func RunPeer(ctx context.Context, c *peer.Conn, o PeerOptions) (PeerResult, error) {
	if err := o.Validate(); err != nil {
		return PeerResult{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg                  sync.WaitGroup
		ops, bytes, nerrs   atomic.Uint64
		streamBytes         atomic.Uint64
		mu                  sync.Mutex
		hist                Histogram
		firstErr            error
		measuring, finished atomic.Bool
	)
	do := func(buf []byte, off uint64) error {
		if o.Op == "read" {
			return c.Read(ctx, o.Region, off, buf)
		}
		return c.Write(ctx, o.Region, off, buf)
	}
	span := o.RegionBytes / o.Size * o.Size
	var (
		v        *verifier
		reached  = make(chan struct{})
		reachOne sync.Once
	)
	if o.Verify {
		v = newVerifier()
	}
	vt0 := time.Now()
	for w := range o.Concurrency {
		wg.Go(func() {
			var h Histogram
			buf := make([]byte, o.Size)
			for i := range buf {
				buf[i] = byte(i*7 + w)
			}
			off := uint64(w) * o.Size % span
			step := func() (time.Duration, error) {
				t := time.Now()
				err := do(buf, off)
				off = (off + o.Size*uint64(o.Concurrency)) % span
				return time.Since(t), err
			}
			if v != nil {
				vw := newVerifyWorker(&o, c, v, w)
				step = func() (time.Duration, error) { return vw.step(ctx) }
			}
			for !finished.Load() {
				d, err := step()
				if err != nil && v != nil && ctx.Err() == nil && !finished.Load() {
					v.failed.Add(1)
				}
				if o.Total > 0 && v.moved.Load() >= o.Total {
					reachOne.Do(func() { close(reached) })
				}
				if !measuring.Load() {
					continue
				}
				if err != nil {
					if ctx.Err() == nil {
						nerrs.Add(1)
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					continue
				}
				if finished.Load() {
					break
				}
				h.Record(d)
				ops.Add(1)
				bytes.Add(o.Size)
			}
			mu.Lock()
			hist.Merge(&h)
			mu.Unlock()
		})
	}
	if o.Stream > 0 {
		wg.Go(func() {
			buf := make([]byte, o.Stream)
			sspan := o.streamBytes() / o.Stream * o.Stream
			for off := uint64(0); !finished.Load(); off = (off + o.Stream) % sspan {
				if err := c.Write(ctx, o.streamRegion(), off, buf); err == nil && measuring.Load() && !finished.Load() {
					streamBytes.Add(o.Stream)
				}
			}
		})
	}
	// A short warm-up opens the lanes and lets TCP find its window.
	select {
	case <-time.After(min(o.Runtime/5, 500*time.Millisecond)):
	case <-reached:
	case <-ctx.Done():
	}
	cpu0, srv0 := cpuNow(), procCPU(o.ServerPID)
	t0 := time.Now()
	measuring.Store(true)
	select {
	case <-time.After(o.Runtime):
	case <-reached:
	case <-ctx.Done():
	}
	finished.Store(true)
	secs := time.Since(t0).Seconds()
	cpu1, srv1 := cpuNow(), procCPU(o.ServerPID)
	wg.Wait()
	vsecs := time.Since(vt0).Seconds()
	if ops.Load() == 0 && firstErr != nil {
		return PeerResult{}, fmt.Errorf("no request completed: %w", firstErr)
	}
	r := PeerResult{Op: o.Op, Size: o.Size, Concurrency: o.Concurrency, Seconds: secs, Ops: ops.Load(),
		Bytes: bytes.Load(), Errors: nerrs.Load()}
	r.GBPerSec, r.OpsPerSec = float64(r.Bytes)/secs/1e9, float64(r.Ops)/secs
	r.P50Us, r.P99Us = us(hist.Quantile(0.5)), us(hist.Quantile(0.99))
	r.P999Us, r.MaxUs = us(hist.Quantile(0.999)), us(hist.Max())
	moved := r.Bytes
	if o.Stream > 0 {
		sb := streamBytes.Load()
		r.Stream = &StreamResult{Region: o.streamRegion(), Size: o.Stream, Bytes: sb, GBPerSec: float64(sb) / secs / 1e9}
		moved += sb
	}
	cpu := cpu1.sub(cpu0)
	r.ClientCPUSeconds, r.ServerCPUSeconds = (cpu.user + cpu.sys).Seconds(), -1
	total := r.ClientCPUSeconds
	if srv0 >= 0 && srv1 >= 0 {
		r.ServerCPUSeconds = srv1 - srv0
		total += r.ServerCPUSeconds
	}
	if moved > 0 {
		r.CPUSecondsPerGB = total / (float64(moved) / 1e9)
	}
	var verr error
	if v != nil {
		r.Verify = v.result(vsecs)
		if n := r.Verify.MismatchedBytes; n > 0 {
			verr = fmt.Errorf("%d bytes mismatched in %d requests, the first at region offset %d",
				n, r.Verify.MismatchedRequests, r.Verify.FirstMismatch)
		}
	}
	if firstErr != nil && r.Errors > 0 {
		return r, errors.Join(verr, fmt.Errorf("%d requests failed, the first: %w", r.Errors, firstErr))
	}
	return r, verr
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux architecture Go supports).
const clockTicks = 100

// procCPU is the user and system CPU seconds of process pid, or -1.
func procCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces; fields count from ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return float64(ut+st) / clockTicks
}
