// engine.go owns the engine's tunables: every limit and default the spec
// names, with the spec's value where it gives one.
//
// Invariants:
//   - DefaultEngine() always passes Validate.
//   - Validate reports every bad key at once, each naming the key, its value
//     and the bound it broke; it never changes the config.
//   - Keys the engine does not act on yet are still parsed and validated, so
//     a config written today keeps working when the feature lands
//     (docs/config.md marks them).

package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Hard ceilings from the spec and the kernel.
const (
	MaxFileSegmentsCeiling    = 4096
	MaxVectorElementsCeiling  = 1024
	MaxReceiverCreditSessions = 4096
	// MaxSingleIO is Linux's MAX_RW_COUNT: one read/write moves at most this.
	MaxSingleIO = 0x7ffff000
	// MaxStagingTotal bounds staging_slots * staging_slot_kb.
	MaxStagingTotal = 1 << 30
	// HostCopyUnit is the bytes one host copy lane copies at once
	// (engine/hostcopy.go); host_copy_min_bytes is at most this.
	HostCopyUnit = 4 << 20
)

// Engine holds the engine limits. The zero value is not usable; start
// from DefaultEngine.
type Engine struct {
	MaxFileSegments      int      `toml:"max_file_segments" json:"max_file_segments"`
	MaxBatchRequests     int      `toml:"max_batch_requests" json:"max_batch_requests"`
	MaxAllocatedBatches  int      `toml:"max_allocated_batches" json:"max_allocated_batches"`
	MaxAllocatedRequests int      `toml:"max_allocated_requests" json:"max_allocated_requests"`
	MaxInflightBatches   int      `toml:"max_inflight_batches" json:"max_inflight_batches"`
	MaxInflightBytes     Size     `toml:"max_inflight_bytes" json:"max_inflight_bytes"`
	MaxTransferBytes     Size     `toml:"max_transfer_bytes" json:"max_transfer_bytes"`
	MaxVectorElements    int      `toml:"max_vector_elements" json:"max_vector_elements"`
	FileInfoTTL          Duration `toml:"file_info_ttl" json:"file_info_ttl"`
	QuiesceGrace         Duration `toml:"quiesce_grace" json:"quiesce_grace"`
	CallerFastPathBytes  Size     `toml:"caller_fast_path_bytes" json:"caller_fast_path_bytes"`
	CallerFastPathWait   Duration `toml:"caller_fast_path_wait" json:"caller_fast_path_wait"`
	// CallerCopy lets the submitter copy a group of at most
	// caller_fast_path_bytes on a file that lives in memory itself
	// (engine/callercopy.go); false keeps every such group on io_uring.
	CallerCopy bool `toml:"caller_copy" json:"caller_copy"`
	// LaneCopyProbe: one caller copy in every LaneCopyProbe of a batch
	// goes to the host copy lanes instead, so a client
	// keeping many groups in flight on that batch is seen (its next
	// groups find one on the lanes and follow it there); 1 sends every
	// such group to the lanes, 0 keeps every one on its submitter
	// (engine/lanecopy.go).
	LaneCopyProbe int `toml:"lane_copy_probe" json:"lane_copy_probe"`
	// HostCopyMinBytes: a group of several scalar requests on a file
	// that lives in memory, each of at least this many bytes, is copied
	// by the host copy lanes, shared fairly by every batch, instead of
	// the batch's own ring; 0 leaves such groups on the ring
	// (engine/hostcopy.go, lanesBatch).
	HostCopyMinBytes Size     `toml:"host_copy_min_bytes" json:"host_copy_min_bytes"`
	DefaultTimeout   Duration `toml:"default_timeout" json:"default_timeout"`
	// StoreCallTimeout bounds one open or stat of a segment's file that
	// the kernel may block on (a stalled FUSE or network store): the
	// caller gets ETIMEDOUT after it (engine/storewait.go).
	StoreCallTimeout Duration `toml:"store_call_timeout" json:"store_call_timeout"`
	// MaxRegisteredBytes bounds all registered host memory together; 0
	// means AutoRegistered (half of MemTotal, capped). See memory.go.
	MaxRegisteredBytes Size `toml:"max_registered_bytes" json:"max_registered_bytes"`

	MergeRequests             bool     `toml:"merge_requests" json:"merge_requests"`
	MaxFailoverAttempts       int      `toml:"max_failover_attempts" json:"max_failover_attempts"`
	EnableAutoFailoverOnPoll  bool     `toml:"enable_auto_failover_on_poll" json:"enable_auto_failover_on_poll"`
	EnableProgressWorker      bool     `toml:"enable_progress_worker" json:"enable_progress_worker"`
	ProgressFallbackInterval  Duration `toml:"progress_fallback_interval" json:"progress_fallback_interval"`
	MaxReceiverCreditSessions int      `toml:"max_receiver_credit_sessions" json:"max_receiver_credit_sessions"`
	MaxPendingNotifications   int      `toml:"max_pending_notifications" json:"max_pending_notifications"`
	MaxPendingNotifyBytes     Size     `toml:"max_pending_notification_bytes" json:"max_pending_notification_bytes"`
	StagingChunkCount         int      `toml:"staging_chunk_count" json:"staging_chunk_count"`
	StagingChunkSize          Size     `toml:"staging_chunk_size" json:"staging_chunk_size"`
	StagingLanes              int      `toml:"staging_lanes" json:"staging_lanes"`
	// MappedFiles lets device memory <-> tmpfs requests copy straight
	// from and into the file's pages, mapped and registered for DMA
	// (engine/mappedexec.go); MaxMappedBytes bounds those pages, 0
	// meaning AutoRegistered (half of MemTotal, capped).
	MappedFiles      bool `toml:"mapped_files" json:"mapped_files"`
	MaxMappedBytes   Size `toml:"max_mapped_bytes" json:"max_mapped_bytes"`
	GDSEnabled       bool `toml:"gds_enabled" json:"gds_enabled"`
	GDSBatchDepth    int  `toml:"gds_batch_depth" json:"gds_batch_depth"`
	GDSRequireNative bool `toml:"gds_require_native" json:"gds_require_native"`

	IOUring      IOUring      `toml:"io_uring" json:"io_uring"`
	RuntimeQueue RuntimeQueue `toml:"runtime_queue" json:"runtime_queue"`

	// QoS is the compiled-from contract set (qos.go); nil disables QoS.
	// The daemon's TOML names a JSON file (qos_file) or inlines the JSON
	// document (qos_json); Load parses either into QoS.
	QoS     *QoS   `toml:"-" json:"-"`
	QoSFile string `toml:"qos_file" json:"-"`
	QoSJSON string `toml:"qos_json" json:"-"`

	// AllowedRoots, when non-empty, confines file segments to these
	// directories: a path opens only if it resolves beneath one of them
	// with no symlink or ".." leading out. Empty means no confinement
	// (library use); the daemon always sets it.
	AllowedRoots []string `toml:"-" json:"-"`

	// Logger receives lifecycle and error logs; nil discards them.
	Logger *slog.Logger `toml:"-" json:"-"`
}

// IOUring tunes the io_uring executor.
type IOUring struct {
	// QueueDepth is the SQ size of each ring (rounded up to a power of two
	// by the kernel); it also bounds how many SQEs one worker keeps in flight.
	QueueDepth int `toml:"queue_depth" json:"queue_depth"`
	// MaxRings bounds the pool of rings shared by batch workers.
	MaxRings int `toml:"max_rings" json:"max_rings"`
	// FixedBuffers registers engine-allocated regions with each ring so
	// aligned I/O uses READ_FIXED/WRITE_FIXED.
	FixedBuffers bool `toml:"fixed_buffers" json:"fixed_buffers"`
	// RegisterFiles registers segment fds with each ring.
	RegisterFiles bool `toml:"register_files" json:"register_files"`
	// DirectIO lets aligned requests use an O_DIRECT fd where the
	// filesystem allows it; false forces the page cache for every request.
	DirectIO bool `toml:"direct_io" json:"direct_io"`
	// SQPoll asks for a kernel submission thread; off by default.
	SQPoll bool `toml:"sqpoll" json:"sqpoll"`

	PinnedStaging bool `toml:"pinned_staging" json:"pinned_staging"`
	StagingSlotKB int  `toml:"staging_slot_kb" json:"staging_slot_kb"`
	StagingSlots  int  `toml:"staging_slots" json:"staging_slots"`
}

// RuntimeQueue configures the optional admission queue (spec: disabled
// by default).
type RuntimeQueue struct {
	Enabled              bool     `toml:"enabled" json:"enabled"`
	MaxOutstandingOwners int      `toml:"max_outstanding_owners" json:"max_outstanding_owners"`
	MaxOutstandingBytes  Size     `toml:"max_outstanding_bytes" json:"max_outstanding_bytes"`
	MaxDispatchOwners    int      `toml:"max_dispatch_owners" json:"max_dispatch_owners"`
	MaxDispatchBytes     Size     `toml:"max_dispatch_bytes" json:"max_dispatch_bytes"`
	DeadlineAware        bool     `toml:"deadline_aware" json:"deadline_aware"`
	PromotionSlack       Duration `toml:"promotion_slack" json:"promotion_slack"`
	MLULocalThreshold    float64  `toml:"mlu_local_threshold" json:"mlu_local_threshold"`
	StagingOwnerReserve  int      `toml:"staging_owner_reserve" json:"staging_owner_reserve"`
	StagingByteReserve   Size     `toml:"staging_byte_reserve" json:"staging_byte_reserve"`

	// PriorityAging bounds how long priority can hold a waiter back: one
	// that has waited this long since its submission goes before every
	// waiter that has not (oldest first); 0 disables aging (strict
	// priority, which can starve). Not in the spec.
	PriorityAging Duration `toml:"priority_aging" json:"priority_aging"`
}

// DefaultEngine returns the spec's defaults. Where the spec names a key
// without a value, the value chosen here is recorded in docs/config.md.
func DefaultEngine() Engine {
	return Engine{
		MaxFileSegments:          1024,
		MaxBatchRequests:         4096,
		MaxAllocatedBatches:      1024,
		MaxAllocatedRequests:     1 << 20,
		MaxInflightBatches:       1024,
		MaxInflightBytes:         4 << 30,
		MaxTransferBytes:         1 << 30,
		MaxVectorElements:        1024,
		FileInfoTTL:              Duration(time.Hour),
		QuiesceGrace:             Duration(30 * time.Second),
		CallerFastPathBytes:      64 << 10,
		CallerFastPathWait:       Duration(200 * time.Microsecond),
		CallerCopy:               true,
		MappedFiles:              true,
		LaneCopyProbe:            64,
		HostCopyMinBytes:         128 << 10,
		DefaultTimeout:           Duration(30 * time.Second),
		StoreCallTimeout:         Duration(5 * time.Second),
		MergeRequests:            true,
		MaxFailoverAttempts:      3,
		EnableAutoFailoverOnPoll: true,
		ProgressFallbackInterval: Duration(50 * time.Millisecond),
		MaxPendingNotifications:  1024,
		MaxPendingNotifyBytes:    1 << 20,
		StagingChunkCount:        256,
		StagingChunkSize:         1 << 20,
		GDSEnabled:               true,
		GDSBatchDepth:            32,
		IOUring: IOUring{
			QueueDepth:    256,
			MaxRings:      64,
			FixedBuffers:  true,
			DirectIO:      true,
			RegisterFiles: true,
			StagingSlotKB: 4096,
			StagingSlots:  32,
		},
		RuntimeQueue: RuntimeQueue{
			MaxOutstandingOwners: 1024,
			MaxOutstandingBytes:  1 << 30,
			MaxDispatchOwners:    64,
			MaxDispatchBytes:     64 << 20,
			PriorityAging:        Duration(time.Second),
		},
	}
}

// problems collects validation failures so Validate reports all of them.
type problems []string

func (p *problems) addf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p *problems) between(key string, v, lo, hi int) {
	if v < lo || v > hi {
		p.addf("%s (%d) must be in [%d, %d]", key, v, lo, hi)
	}
}

func (p *problems) positiveDur(key string, d Duration) {
	if d <= 0 {
		p.addf("%s (%s) must be > 0", key, d)
	}
}

func (p problems) err(what string) error {
	if len(p) == 0 {
		return nil
	}
	errs := make([]error, len(p))
	for i, s := range p {
		errs[i] = errors.New(what + ": " + s)
	}
	return errors.Join(errs...)
}

// Validate checks every key and returns all problems joined, or nil.
func (c *Engine) Validate() error {
	var p problems
	c.validate(&p, "engine.")
	return p.err("invalid config")
}

func (c *Engine) validate(p *problems, pre string) {
	p.between(pre+"max_file_segments", c.MaxFileSegments, 1, MaxFileSegmentsCeiling)
	p.between(pre+"max_batch_requests", c.MaxBatchRequests, 1, 1<<20)
	p.between(pre+"max_allocated_batches", c.MaxAllocatedBatches, 1, 1<<20)
	p.between(pre+"max_allocated_requests", c.MaxAllocatedRequests, 1, 1<<30)
	if c.MaxAllocatedRequests < c.MaxBatchRequests {
		p.addf("%smax_allocated_requests (%d) must be >= %smax_batch_requests (%d)", pre, c.MaxAllocatedRequests, pre, c.MaxBatchRequests)
	}
	p.between(pre+"max_inflight_batches", c.MaxInflightBatches, 1, 1<<20)
	if c.MaxInflightBytes == 0 {
		p.addf("%smax_inflight_bytes (0) must be > 0", pre)
	}
	if c.MaxTransferBytes == 0 || c.MaxTransferBytes > MaxSingleIO {
		p.addf("%smax_transfer_bytes (%d) must be in [1, %d]", pre, c.MaxTransferBytes, MaxSingleIO)
	}
	if c.MaxTransferBytes > c.MaxInflightBytes {
		p.addf("%smax_transfer_bytes (%s) must be <= %smax_inflight_bytes (%s)", pre, c.MaxTransferBytes, pre, c.MaxInflightBytes)
	}
	p.between(pre+"max_vector_elements", c.MaxVectorElements, 1, MaxVectorElementsCeiling)
	p.positiveDur(pre+"file_info_ttl", c.FileInfoTTL)
	p.positiveDur(pre+"quiesce_grace", c.QuiesceGrace)
	p.positiveDur(pre+"default_timeout", c.DefaultTimeout)
	p.positiveDur(pre+"store_call_timeout", c.StoreCallTimeout)
	if c.CallerFastPathBytes > c.MaxTransferBytes {
		p.addf("%scaller_fast_path_bytes (%s) must be <= %smax_transfer_bytes (%s)", pre, c.CallerFastPathBytes, pre, c.MaxTransferBytes)
	}
	p.between(pre+"lane_copy_probe", c.LaneCopyProbe, 0, 1<<20)
	if c.HostCopyMinBytes > HostCopyUnit {
		p.addf("%shost_copy_min_bytes (%s) must be <= %s (the host copy unit); 0 turns it off", pre, c.HostCopyMinBytes, Size(HostCopyUnit))
	}
	if c.CallerFastPathWait > Duration(time.Second) {
		p.addf("%scaller_fast_path_wait (%s) must be <= 1s", pre, c.CallerFastPathWait)
	}
	if mt, err := MemTotal(); err == nil && uint64(c.MaxMappedBytes) > mt {
		p.addf("%smax_mapped_bytes (%s) must be <= this machine's MemTotal (%s); 0 picks half of it", pre, c.MaxMappedBytes, Size(mt))
	}
	if mt, err := MemTotal(); err == nil && uint64(c.MaxRegisteredBytes) > mt {
		p.addf("%smax_registered_bytes (%s) must be <= this machine's MemTotal (%s); 0 picks half of it", pre, c.MaxRegisteredBytes, Size(mt))
	}
	p.between(pre+"max_failover_attempts", c.MaxFailoverAttempts, 0, 64)
	if c.ProgressFallbackInterval < 0 {
		p.addf("%sprogress_fallback_interval (%s) must be >= 0", pre, c.ProgressFallbackInterval)
	}
	p.between(pre+"max_receiver_credit_sessions", c.MaxReceiverCreditSessions, 0, MaxReceiverCreditSessions)
	// The sender's bound on notifications waiting to be sent (the
	// receiver's inbox has its own [peer] keys).
	p.between(pre+"max_pending_notifications", c.MaxPendingNotifications, 1, 1<<20)
	if c.MaxPendingNotifyBytes < 1 || c.MaxPendingNotifyBytes > 1<<30 {
		p.addf("%smax_pending_notification_bytes (%s) must be in [1B, 1GiB]", pre, c.MaxPendingNotifyBytes)
	}
	p.between(pre+"staging_chunk_count", c.StagingChunkCount, 1, 1<<16)
	p.between(pre+"staging_lanes", c.StagingLanes, 0, 256)
	if total := uint64(c.StagingChunkCount) * uint64(c.StagingChunkSize); total > MaxStagingTotal {
		p.addf("%sstaging_chunk_count (%d) * staging_chunk_size (%s) = %s exceeds 1GiB (one io_uring fixed buffer)", pre, c.StagingChunkCount, c.StagingChunkSize, Size(total))
	}
	if c.StagingChunkSize < 4096 || c.StagingChunkSize%4096 != 0 {
		p.addf("%sstaging_chunk_size (%d) must be a positive multiple of 4096", pre, c.StagingChunkSize)
	}
	p.between(pre+"gds_batch_depth", c.GDSBatchDepth, 1, 4096)

	u := c.IOUring
	p.between(pre+"io_uring.queue_depth", u.QueueDepth, 1, 32768)
	p.between(pre+"io_uring.max_rings", u.MaxRings, 1, 4096)
	p.between(pre+"io_uring.staging_slot_kb", u.StagingSlotKB, 1, MaxStagingTotal>>10)
	p.between(pre+"io_uring.staging_slots", u.StagingSlots, 1, 1<<16)
	if u.PinnedStaging {
		slot := (uint64(u.StagingSlotKB) + 3) &^ 3 // rounds up to 4 KiB
		if total := slot << 10 * uint64(u.StagingSlots); total > MaxStagingTotal {
			kb := fmt.Sprint(u.StagingSlotKB)
			if slot != uint64(u.StagingSlotKB) {
				kb += fmt.Sprintf(", rounded up to %d", slot)
			}
			p.addf("%sio_uring.staging_slots (%d) * %sio_uring.staging_slot_kb (%s) KiB = %s exceeds 1GiB", pre, u.StagingSlots, pre, kb, Size(total))
		}
	}

	q := c.RuntimeQueue
	p.between(pre+"runtime_queue.max_outstanding_owners", q.MaxOutstandingOwners, 1, 1<<20)
	if q.MaxDispatchOwners < 1 || q.MaxDispatchOwners > q.MaxOutstandingOwners {
		p.addf("%sruntime_queue.max_dispatch_owners (%d) must be in [1, %sruntime_queue.max_outstanding_owners (%d)]", pre, q.MaxDispatchOwners, pre, q.MaxOutstandingOwners)
	}
	if q.MaxDispatchBytes == 0 || q.MaxDispatchBytes > q.MaxOutstandingBytes {
		p.addf("%sruntime_queue.max_dispatch_bytes (%s) must be in [1, %sruntime_queue.max_outstanding_bytes (%s)]", pre, q.MaxDispatchBytes, pre, q.MaxOutstandingBytes)
	}
	if q.PromotionSlack < 0 {
		p.addf("%sruntime_queue.promotion_slack (%s) must be >= 0", pre, q.PromotionSlack)
	}
	if q.PriorityAging < 0 {
		p.addf("%sruntime_queue.priority_aging (%s) must be >= 0", pre, q.PriorityAging)
	}
	if !(q.MLULocalThreshold >= 0) || math.IsInf(q.MLULocalThreshold, 1) {
		// NaN fails every comparison, so it must be refused by name:
		// "ratio >= NaN" never holds and would disable the check silently.
		p.addf("%sruntime_queue.mlu_local_threshold (%g) must be a finite number >= 0", pre, q.MLULocalThreshold)
	}
	if q.StagingOwnerReserve < 0 || q.StagingOwnerReserve > q.MaxOutstandingOwners {
		p.addf("%sruntime_queue.staging_owner_reserve (%d) must be in [0, %sruntime_queue.max_outstanding_owners (%d)]", pre, q.StagingOwnerReserve, pre, q.MaxOutstandingOwners)
	}
	if q.StagingByteReserve > q.MaxOutstandingBytes {
		p.addf("%sruntime_queue.staging_byte_reserve (%s) must be <= %sruntime_queue.max_outstanding_bytes (%s)", pre, q.StagingByteReserve, pre, q.MaxOutstandingBytes)
	}
	// The spec: delay waits in the runtime queue, so it needs one.
	if c.QoS.UsesDelay() && !q.Enabled {
		p.addf("%sqos: allowed_degraded_actions \"delay\" requires runtime_queue.enabled", pre)
	}
	if c.QoS != nil {
		if err := c.QoS.Validate(); err != nil {
			p.addf("%sqos: %v", pre, err)
		}
	}
}
