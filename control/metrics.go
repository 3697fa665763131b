// metrics.go owns /metrics: the engine's stats in the Prometheus text
// exposition format (version 0.0.4), every name prefixed orbitefs_.
//
// Invariants:
//   - Every numeric field of engine.Stats (and of its io_uring part) has
//     exactly one metric here; metrics_test.go fails when the lead adds a
//     field and this table does not follow.
//   - Counters end in _total; gauges do not.

package control

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/orbitefs/orbitefs/engine"
)

type metric struct {
	name, typ, help string
	value           func(*engine.Stats) float64
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var engineMetrics = []metric{
	{"segments", "gauge", "Open file segments (draining ones included).", func(s *engine.Stats) float64 { return float64(s.Segments) }},
	{"segments_draining", "gauge", "File segments closed to new work, waiting for admitted transfers.", func(s *engine.Stats) float64 { return float64(s.SegmentsDraining) }},
	{"memory_regions", "gauge", "Registered memory regions.", func(s *engine.Stats) float64 { return float64(s.Regions) }},
	{"memory_region_bytes", "gauge", "Bytes of registered memory.", func(s *engine.Stats) float64 { return float64(s.RegionBytes) }},
	{"batches", "gauge", "Allocated batches.", func(s *engine.Stats) float64 { return float64(s.Batches) }},
	{"reserved_requests", "gauge", "Task slots reserved by allocated batches.", func(s *engine.Stats) float64 { return float64(s.ReservedRequests) }},
	{"quarantined_batches", "gauge", "Freed batches whose unquiesced groups keep their capacity and batch slot.", func(s *engine.Stats) float64 { return float64(s.QuarantinedBatches) }},
	{"inflight_groups", "gauge", "Admitted submissions not yet finished.", func(s *engine.Stats) float64 { return float64(s.InflightGroups) }},
	{"inflight_bytes", "gauge", "Bytes of admitted submissions not yet finished.", func(s *engine.Stats) float64 { return float64(s.InflightBytes) }},
	{"groups_submitted_total", "counter", "Submissions accepted.", func(s *engine.Stats) float64 { return float64(s.GroupsSubmitted) }},
	{"groups_rejected_total", "counter", "Submissions rejected at submit.", func(s *engine.Stats) float64 { return float64(s.GroupsRejected) }},
	{"tasks_completed_total", "counter", "Tasks completed.", func(s *engine.Stats) float64 { return float64(s.TasksCompleted) }},
	{"tasks_failed_total", "counter", "Tasks failed.", func(s *engine.Stats) float64 { return float64(s.TasksFailed) }},
	{"tasks_cancelled_total", "counter", "Tasks cancelled before they started.", func(s *engine.Stats) float64 { return float64(s.TasksCancelled) }},
	{"read_bytes_total", "counter", "Bytes moved from targets into local memory.", func(s *engine.Stats) float64 { return float64(s.BytesRead) }},
	{"written_bytes_total", "counter", "Bytes moved from local memory into targets.", func(s *engine.Stats) float64 { return float64(s.BytesWritten) }},
	{"fast_path_hits_total", "counter", "Small submissions completed on the submitting caller.", func(s *engine.Stats) float64 { return float64(s.FastPathHits) }},
	{"fast_path_handoffs_total", "counter", "Small submissions handed from the caller to a worker.", func(s *engine.Stats) float64 { return float64(s.FastPathHandoffs) }},
	{"submit_through_total", "counter", "Submissions put on a running worker's ring by the submitting goroutine.", func(s *engine.Stats) float64 { return float64(s.SubmitThrough) }},
	{"workers_started_total", "counter", "Batch workers started.", func(s *engine.Stats) float64 { return float64(s.WorkersStarted) }},
	{"caller_copies_total", "counter", "Small groups on in-memory files copied by their submitter (no worker, no ring).", func(s *engine.Stats) float64 { return float64(s.CallerCopies) }},
	{"peer_units_total", "counter", "Units of transfers on remote segments moved by the peer executor.", func(s *engine.Stats) float64 { return float64(s.PeerUnits) }},
	{"lane_copies_total", "counter", "Of the caller copies, those the host copy lanes ran for a batch streaming small groups.", func(s *engine.Stats) float64 { return float64(s.LaneCopies) }},
	{"host_copy_units_total", "counter", "Units of large requests on in-memory files copied by the host copy lanes.", func(s *engine.Stats) float64 { return float64(s.HostCopyUnits) }},
	{"workers_running", "gauge", "Batch workers running now.", func(s *engine.Stats) float64 { return float64(s.WorkersRunning) }},
	{"unquiesced_groups_total", "counter", "Submissions that ended without proof the kernel was done with their memory.", func(s *engine.Stats) float64 { return float64(s.UnquiescedGroups) }},
	{"deferred_batches", "gauge", "Batches freed while busy (engine.enable_progress_worker) whose work has not drained; they keep their capacity and batch slot.", func(s *engine.Stats) float64 { return float64(s.DeferredBatches) }},
	{"failovers_total", "counter", "Transport attempts started on a task's next transport after a failed one.", func(s *engine.Stats) float64 { return float64(s.Failovers) }},
}

func ioUringValue(f func(*engine.FileStats) float64) func(*engine.Stats) float64 {
	return func(s *engine.Stats) float64 {
		if s.IOUring == nil {
			return 0
		}
		return f(s.IOUring)
	}
}

var ioUringMetrics = []metric{
	{"io_uring_available", "gauge", "1 when the io_uring transport is built in and its probe passed.", ioUringValue(func(f *engine.FileStats) float64 { return b2f(f.Available) })},
	{"io_uring_rings", "gauge", "io_uring rings created and not abandoned.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.Rings) })},
	{"io_uring_rings_idle", "gauge", "io_uring rings idle in the pool.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.RingsIdle) })},
	{"io_uring_rings_abandoned", "gauge", "io_uring rings retired with operations still in flight.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.RingsAbandon) })},
	{"io_uring_sqes_submitted_total", "counter", "Submission queue entries handed to the kernel.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.Submitted) })},
	{"io_uring_cqes_completed_total", "counter", "Completion queue entries reaped.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.Completed) })},
	{"io_uring_fixed_buffer_ops_total", "counter", "Operations using registered (fixed) buffers.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.FixedOps) })},
	{"io_uring_fixed_file_ops_total", "counter", "Operations using registered files.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.FixedFileOps) })},
	{"io_uring_vectored_ops_total", "counter", "Vectored (readv/writev) operations.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.VectoredOps) })},
	{"io_uring_buffer_registrations_total", "counter", "Buffer registrations with rings.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.BufferRegs) })},
	{"io_uring_file_registrations_total", "counter", "File registrations with rings.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.FileRegs) })},
	{"io_uring_read_bytes_total", "counter", "Bytes read through io_uring.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.BytesRead) })},
	{"io_uring_written_bytes_total", "counter", "Bytes written through io_uring.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.BytesWritten) })},
	{"io_uring_submit_calls_total", "counter", "io_uring_enter calls that submitted entries.", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.SubmitCalls) })},
	{"io_uring_offloaded_ops_total", "counter", "Operations run on the kernel's io-wq threads (IOSQE_ASYNC).", ioUringValue(func(f *engine.FileStats) float64 { return float64(f.OffloadedOps) })},
}

func stagingValue(f func(*engine.StagingStats) float64) func(*engine.Stats) float64 {
	return func(s *engine.Stats) float64 {
		if s.Staging == nil {
			return 0
		}
		return f(s.Staging)
	}
}

// stagingMetrics appear once the pinned staging pool exists (the first
// CUDA transfer through staging).
var stagingMetrics = []metric{
	{"staging_chunk_bytes", "gauge", "Size of one pinned staging chunk.", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.ChunkSize) })},
	{"staging_chunks", "gauge", "Pinned staging chunks in the pool.", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.Chunks) })},
	{"staging_allocated", "gauge", "1 once the pinned staging slab is allocated.", stagingValue(func(f *engine.StagingStats) float64 { return b2f(f.Allocated) })},
	{"staging_lanes", "gauge", "Staging lanes running (engine-wide, shared by every batch).", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.Lanes) })},
	{"staging_chunks_in_use", "gauge", "Pinned staging chunks serving a unit now, or retained for good.", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.InUse) })},
	{"staging_chunks_high_water", "gauge", "Most pinned staging chunks leased at once.", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.HighWater) })},
	{"staging_leases_total", "counter", "Units staged through pinned chunks.", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.Leases) })},
	{"staging_pageable_fallbacks_total", "counter", "Pageable buffers taken by a lane whose chunks were all retained.", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.Fallbacks) })},
	{"staging_pageable_bytes", "gauge", "Bytes of pageable fallback buffers outstanding.", stagingValue(func(f *engine.StagingStats) float64 { return float64(f.PageableBytes) })},
}

var mappedMetrics = []metric{
	{"mapped_files", "gauge", "tmpfs files mapped and registered for DMA (engine.mapped_files).", func(s *engine.Stats) float64 { return float64(s.Mapped.Files) }},
	{"mapped_bytes", "gauge", "Bytes of tmpfs files mapped and registered for DMA (engine.max_mapped_bytes bounds them).", func(s *engine.Stats) float64 { return float64(s.Mapped.Bytes) }},
	{"mapped_takes_total", "counter", "Batch copies between device memory and mapped tmpfs files.", func(s *engine.Stats) float64 { return float64(s.Mapped.Takes) }},
	{"mapped_units_total", "counter", "Units copied between device memory and mapped tmpfs files.", func(s *engine.Stats) float64 { return float64(s.Mapped.Units) }},
	{"mapped_remaps_total", "counter", "Mappings retired because their file was truncated or grew under them.", func(s *engine.Stats) float64 { return float64(s.Mapped.Remaps) }},
	{"mapped_refused_total", "counter", "Mappings refused (driver, mmap or max_mapped_bytes); the file stays on staging.", func(s *engine.Stats) float64 { return float64(s.Mapped.Refused) }},
	{"mapped_retained", "gauge", "Mappings kept for good behind a copy of unknown outcome.", func(s *engine.Stats) float64 { return float64(s.Mapped.Retained) }},
}

var gdsMetrics = []metric{
	{"gds_files", "gauge", "Segment files registered with cuFile.", func(s *engine.Stats) float64 { return float64(s.GDS.Files) }},
	{"gds_buffer_registrations", "gauge", "Device regions registered with cuFile.", func(s *engine.Stats) float64 { return float64(s.GDS.BufferRegistrations) }},
	{"gds_buffer_registration_failures_total", "counter", "cuFile buffer registrations refused (the region stays on staging).", func(s *engine.Stats) float64 { return float64(s.GDS.BufferRegistrationFailures) }},
	{"gds_reads_total", "counter", "cuFile read calls.", func(s *engine.Stats) float64 { return float64(s.GDS.Reads) }},
	{"gds_writes_total", "counter", "cuFile write calls.", func(s *engine.Stats) float64 { return float64(s.GDS.Writes) }},
	{"gds_unquiesced_calls_total", "counter", "cuFile calls that did not return by deadline + quiesce_grace.", func(s *engine.Stats) float64 { return float64(s.GDS.Unquiesced) }},
	{"gds_retained_total", "counter", "Device allocations and O_DIRECT fds kept for good: an uncertain cuFile registration, a failed deregistration or handle destroy.", func(s *engine.Stats) float64 { return float64(s.GDS.Retained) }},
}

// RenderMetrics renders st (and the build version) as Prometheus text.
func RenderMetrics(st engine.Stats, version string) []byte {
	var b strings.Builder
	write := func(name, typ, help, labels string, v float64) {
		fmt.Fprintf(&b, "# HELP orbitefs_%s %s\n# TYPE orbitefs_%s %s\norbitefs_%s%s %s\n", name, help, name, typ, name, labels, strconv.FormatFloat(v, 'f', -1, 64))
	}
	write("build_info", "gauge", "Build information; the value is always 1.", fmt.Sprintf("{version=%q}", version), 1)
	for _, m := range engineMetrics {
		write(m.name, m.typ, m.help, "", m.value(&st))
	}
	if st.IOUring != nil {
		for _, m := range ioUringMetrics {
			write(m.name, m.typ, m.help, "", m.value(&st))
		}
	}
	if st.Staging != nil {
		for _, m := range stagingMetrics {
			write(m.name, m.typ, m.help, "", m.value(&st))
		}
	}
	renderAdmission(&st, write, &b)   // qos.go
	for _, m := range creditMetrics { // credit.go
		write(m.name, m.typ, m.help, "", m.value(&st))
	}
	write("gds_info", "gauge", "GPU Direct Storage mode as a label; the value is always 1.", fmt.Sprintf("{mode=%q}", st.GDS.Mode), 1)
	for _, m := range mappedMetrics {
		write(m.name, m.typ, m.help, "", m.value(&st))
	}
	for _, m := range gdsMetrics {
		write(m.name, m.typ, m.help, "", m.value(&st))
	}
	return []byte(b.String())
}
