package config

// specdefaults_test.go pins every default and limit the specification
// states as a number or a switch against the value the specification
// gives, transcribed from its text (the quote says where): a default
// changed in code, default.toml and docs together still fails here.

import (
	"strings"
	"testing"
	"time"
)

func TestSpecDefaults(t *testing.T) {
	d := DefaultEngine()
	cases := []struct {
		key  string
		spec string // what the specification says, paraphrased
		got  any
		want any
	}{
		// Local file transfers.
		{"max_file_segments", "bounds open and draining names (default 1024, maximum 4096)", d.MaxFileSegments, 1024},
		{"max_file_segments ceiling", "maximum 4096", MaxFileSegmentsCeiling, 4096},
		{"file_info_ttl", "file_segment_info caches size for up to one hour", d.FileInfoTTL.D(), time.Hour},
		{"max_vector_elements", "the limit is 1024 elements per vector", d.MaxVectorElements, 1024},
		{"max_vector_elements ceiling", "the limit is 1024 elements per vector", MaxVectorElementsCeiling, 1024},
		{"caller_fast_path_bytes", "one contiguous host request of at most 64 KiB on its caller", uint64(d.CallerFastPathBytes), uint64(64 << 10)},
		{"caller_fast_path_wait", "block for a CQE for at most 200 µs", d.CallerFastPathWait.D(), 200 * time.Microsecond},
		{"quiesce_grace", "one cutoff, 30 seconds after the submission deadline", d.QuiesceGrace.D(), 30 * time.Second},
		{"io_uring.pinned_staging", "set pinned_staging to enable TENT's optional file pool", d.IOUring.PinnedStaging, false},
		{"io_uring.staging_slot_kb", "staging_slot_kb defaults to 4096", d.IOUring.StagingSlotKB, 4096},
		{"io_uring.staging_slots", "staging_slots defaults to 32", d.IOUring.StagingSlots, 32},
		{"staging total ceiling", "the checked total is at most 1 GiB", uint64(MaxStagingTotal), uint64(1 << 30)},
		{"gds_enabled", "gds_enabled defaults to true in a GDS build", d.GDSEnabled, true},
		{"gds_batch_depth", "one native batch at gds_batch_depth (default 32)", d.GDSBatchDepth, 32},
		// Asynchronous batches.
		{"enable_progress_worker", "by default, free() on a busy batch returns BatchBusy; enable_progress_worker opts in to deferred free", d.EnableProgressWorker, false},
		{"merge_requests", "memory requests merge by default", d.MergeRequests, true},
		{"max_failover_attempts", "defaults to three additional attempts", d.MaxFailoverAttempts, 3},
		{"enable_auto_failover_on_poll", "enable_auto_failover_on_poll defaults to true", d.EnableAutoFailoverOnPoll, true},
		{"progress_fallback_interval", "the default fallback interval is 50 ms", d.ProgressFallbackInterval.D(), 50 * time.Millisecond},
		{"runtime_queue.enabled", "runtime_queue defaults to None", d.RuntimeQueue.Enabled, false},
		{"runtime_queue.max_outstanding_owners", "defaults allow 1,024 outstanding owners", d.RuntimeQueue.MaxOutstandingOwners, 1024},
		{"runtime_queue.max_outstanding_bytes", "defaults allow ... and 1 GiB", uint64(d.RuntimeQueue.MaxOutstandingBytes), uint64(1 << 30)},
		{"runtime_queue.max_dispatch_owners", "with 64 owners ... in the dispatch window", d.RuntimeQueue.MaxDispatchOwners, 64},
		{"runtime_queue.max_dispatch_bytes", "with ... 64 MiB in the dispatch window", uint64(d.RuntimeQueue.MaxDispatchBytes), uint64(64 << 20)},
		{"runtime_queue.staging_owner_reserve", "staging_owner_reserve and staging_byte_reserve default to zero", d.RuntimeQueue.StagingOwnerReserve, 0},
		{"runtime_queue.staging_byte_reserve", "staging_owner_reserve and staging_byte_reserve default to zero", uint64(d.RuntimeQueue.StagingByteReserve), uint64(0)},
		{"runtime_queue.promotion_slack", "the default, zero, disables promotion", d.RuntimeQueue.PromotionSlack.D(), time.Duration(0)},
		{"runtime_queue.deadline_aware", "FIFO orders eligible owners by admission; deadline_aware selects EDF", d.RuntimeQueue.DeadlineAware, false},
		{"qos", "qos defaults to None", d.QoS == nil && d.QoSFile == "" && d.QoSJSON == "", true},
		{"qos name ceiling", "names are trimmed and lowercased, at most 256 bytes", MaxQoSNameBytes, 256},
		{"qos contracts ceiling", "at most 4096 contracts compile", MaxQoSContracts, 4096},
		{"qos document ceiling", "input is limited to 1 MiB", MaxQoSDocumentBytes, 1 << 20},
		{"max_receiver_credit_sessions", "defaults to zero (disabled)", d.MaxReceiverCreditSessions, 0},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %v (%T), the spec says %v: %q", c.key, c.got, c.got, c.want, c.spec)
		}
	}
	if err := d.Validate(); err != nil {
		t.Errorf("the spec's defaults do not validate: %v", err)
	}
}

// TestSpecReceiverCreditDefaults pins the receiver's issuer defaults.
func TestSpecReceiverCreditDefaults(t *testing.T) {
	d, err := Parse("")
	if err != nil {
		t.Fatal(err)
	}
	c := d.Peer.ReceiverCredit
	for _, x := range []struct {
		key       string
		spec      string
		got, want any
	}{
		{"enabled", "receiver_credit = Some(...) turns the issuer on: off by default", c.Enabled, false},
		{"max_sessions", "defaults are 128 sessions", c.MaxSessions, 128},
		{"max_bytes", "64 MiB / 1024 aggregate", uint64(c.MaxBytes), uint64(64 << 20)},
		{"max_requests", "64 MiB / 1024 aggregate", c.MaxRequests, 1024},
		{"bytes_per_sender", "1 MiB / 16 requests per sender", uint64(c.BytesPerSender), uint64(1 << 20)},
		{"requests_per_sender", "1 MiB / 16 requests per sender", c.RequestsPerSender, 16},
		{"max_staging_slots", "all default to zero, disabled", c.MaxStagingSlots, 0},
		{"max_consumer_slots", "all default to zero, disabled", c.MaxConsumerSlots, 0},
		{"staging_slots_per_sender", "all default to zero, disabled", c.StagingSlotsPerSender, 0},
		{"consumer_slots_per_sender", "all default to zero, disabled", c.ConsumerSlotsPerSender, 0},
		{"max_receiver_credit_sessions ceiling", "at most 4096", MaxReceiverCreditSessions, 4096},
	} {
		if x.got != x.want {
			t.Errorf("peer.receiver_credit.%s = %v, the spec says %v: %q", x.key, x.got, x.want, x.spec)
		}
	}
}

// TestSpecLimitsRefused: each limit the specification states is refused
// one step past it, through the config file a user writes, with a
// message naming the key, the value given and the bound.
func TestSpecLimitsRefused(t *testing.T) {
	for _, c := range []struct {
		spec, toml, want string
	}{
		{"max_file_segments: maximum 4096", "[engine]\nmax_file_segments = 4097",
			"invalid config: engine.max_file_segments (4097) must be in [1, 4096]"},
		{"the limit is 1024 elements per vector", "[engine]\nmax_vector_elements = 1025",
			"invalid config: engine.max_vector_elements (1025) must be in [1, 1024]"},
		{"max_receiver_credit_sessions: a positive value (at most 4096)", "[engine]\nmax_receiver_credit_sessions = 4097",
			"invalid config: engine.max_receiver_credit_sessions (4097) must be in [0, 4096]"},
		{"capacity is positive", "[mount]\ndefault_batch_capacity = 0",
			"invalid config: mount.default_batch_capacity (0) must be in [1, 4096]"},
		{"capacity is at most max_batch_requests", "[mount]\ndefault_batch_capacity = 17\n[engine]\nmax_batch_requests = 16",
			"invalid config: mount.default_batch_capacity (17) must be in [1, 16]"},
		{"staging_slot_kb rounds up to a 4 KiB boundary; the checked total is at most 1 GiB",
			"[engine.io_uring]\npinned_staging = true\nstaging_slot_kb = 4093\nstaging_slots = 257",
			"invalid config: engine.io_uring.staging_slots (257) * engine.io_uring.staging_slot_kb (4093, rounded up to 4096) KiB = 1028MiB exceeds 1GiB"},
		{"the checked total is at most 1 GiB", "[engine.io_uring]\npinned_staging = true\nstaging_slots = 257",
			"invalid config: engine.io_uring.staging_slots (257) * engine.io_uring.staging_slot_kb (4096) KiB = 1028MiB exceeds 1GiB"},
		{"queue depth must be at least 1", "[engine.io_uring]\nqueue_depth = 0",
			"invalid config: engine.io_uring.queue_depth (0) must be in [1, 32768]"},
		{"max_failover_attempts: zero pins the first route", "[engine]\nmax_failover_attempts = -1",
			"invalid config: engine.max_failover_attempts (-1) must be in [0, 64]"},
		{"the dispatch window sits inside the outstanding budget", "[engine.runtime_queue]\nmax_dispatch_owners = 1025",
			"invalid config: engine.runtime_queue.max_dispatch_owners (1025) must be in [1, engine.runtime_queue.max_outstanding_owners (1024)]"},
		{"ordinary admission can consume only the total minus each reserve", "[engine.runtime_queue]\nstaging_owner_reserve = 1025",
			"invalid config: engine.runtime_queue.staging_owner_reserve (1025) must be in [0, engine.runtime_queue.max_outstanding_owners (1024)]"},
		{"ordinary admission can consume only the total minus each reserve", "[engine.runtime_queue]\nstaging_byte_reserve = \"2GiB\"",
			"invalid config: engine.runtime_queue.staging_byte_reserve (2GiB) must be <= engine.runtime_queue.max_outstanding_bytes (1GiB)"},
		{"each physical owner must fit its window; max_bytes bounds the sum", "[peer.receiver_credit]\nbytes_per_sender = \"65MiB\"",
			"invalid config: peer.receiver_credit.bytes_per_sender (65MiB) must be in [1, peer.receiver_credit.max_bytes (64MiB)]"},
		{"max_requests bounds the sum", "[peer.receiver_credit]\nrequests_per_sender = 1025",
			"invalid config: peer.receiver_credit.requests_per_sender (1025) must be in [1, peer.receiver_credit.max_requests (1024)]"},
		{"pending hooks are sized by max_pending_notifications", "[engine]\nmax_pending_notifications = 0",
			"invalid config: engine.max_pending_notifications (0) must be in [1, 1048576]"},
	} {
		_, err := Parse(c.toml)
		if err == nil {
			t.Errorf("%q accepted; the spec: %s", c.toml, c.spec)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != 1 || lines[0] != c.want {
			t.Errorf("%q:\n got  %v\n want %s\n(the spec: %s)", c.toml, err, c.want, c.spec)
		}
	}
}
