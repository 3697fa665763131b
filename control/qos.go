// qos.go owns the control plane's view of admission: the "qos" and
// "deadline" keys of a submission, the /qos files (contracts, usage,
// resolve) and the runtime queue and QoS rows of /metrics.
//
//	{"op": "read", "target": "cache", "deadline": "200ms",
//	 "qos": {"tenant": "tenant-a", "intent": "foreground_get", "priority": "low"},
//	 "requests": [...]}
//
// Invariants:
//   - A submission's qos object resolves once, against the engine that
//     runs it (engine.ResolveQoS); a submission without one uses the
//     default contract, exactly like a library request without a policy.
//   - "deadline" is relative to the moment the submission is accepted and
//     may only shorten the deadline "timeout" (or default_timeout) gives.
//   - Every numeric field of engine.QueueStats and engine.QoSStats has one
//     metric here (render_test.go checks it).

package control

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// QoSContext is a request context: in a submission's "qos" key and in a
// document written to /qos/resolve.
type QoSContext struct {
	Tenant   string           `json:"tenant,omitempty"`
	Intent   string           `json:"intent,omitempty"`
	Priority *config.Priority `json:"priority,omitempty"`
}

func (c *QoSContext) engine() engine.QoSContext {
	return engine.QoSContext{Tenant: c.Tenant, Intent: c.Intent, Priority: c.Priority}
}

// submitOptions builds the engine options of a parsed submission.
func (s *Service) submitOptions(sub *Submission) (engine.SubmitOptions, error) {
	var o engine.SubmitOptions
	if sub.Timeout != nil {
		o.Timeout = sub.Timeout.D()
	}
	if sub.Deadline != nil {
		o.Deadline = time.Now().Add(sub.Deadline.D())
	}
	if sub.QoS != nil {
		p, err := s.e.ResolveQoS(sub.QoS.engine())
		if err != nil {
			return o, err
		}
		o.QoS = p
	}
	return o, nil
}

// QoSContracts is /qos/contracts: the compiled contracts, names
// normalized, in slot order (null when QoS is off).
func (s *Service) QoSContracts() []byte { return marshal(s.e.QoSContracts()) }

// QoSUsage is /qos/usage: each contract's current owners and bytes.
func (s *Service) QoSUsage() []byte { return marshal(s.e.QoSUsage()) }

// ResolveWriter returns the handle state for one open of /qos/resolve:
// each document written is a QoSContext, and the handle's next read
// returns its resolution (ResolveAnswer).
func (s *Service) ResolveWriter(c *engine.Caller, answer func([]byte)) *DocWriter {
	sc := scope{caller: c, op: "resolve", name: "qos/resolve"}
	return &DocWriter{doc: s.newDocument(c),
		commit: func(doc []byte) error {
			out, err := s.Resolve(doc)
			if err != nil {
				return s.fail(sc, err)
			}
			answer(out)
			return nil
		},
		fail: func(err error) error { return s.fail(sc, err) }}
}

// Resolve resolves one request context document.
func (s *Service) Resolve(doc []byte) ([]byte, error) {
	var c QoSContext
	if err := decodeStrict(doc, s.opts.MaxDocumentBytes, &c); err != nil {
		return nil, err
	}
	p, err := s.e.ResolveQoS(c.engine())
	if err != nil {
		return nil, err
	}
	return marshal(p.Explain()), nil
}

var queueMetrics = []metric{
	{"runtime_queue_enabled", "gauge", "1 when the runtime admission queue is enabled.", func(s *engine.Stats) float64 { return b2f(s.RuntimeQueue.Enabled) }},
	{"runtime_queue_deadline_aware", "gauge", "1 when the runtime queue orders by earliest deadline (EDF).", func(s *engine.Stats) float64 { return b2f(s.RuntimeQueue.DeadlineAware) }},
	{"runtime_queue_outstanding_owners", "gauge", "Physical owners admitted to the runtime queue and not released.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.OutstandingOwners) }},
	{"runtime_queue_outstanding_bytes", "gauge", "Payload bytes admitted to the runtime queue and not released.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.OutstandingBytes) }},
	{"runtime_queue_dispatch_owners", "gauge", "Owners in the dispatch window now.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.DispatchOwners) }},
	{"runtime_queue_dispatch_bytes", "gauge", "Payload bytes in the dispatch window now.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.DispatchBytes) }},
	{"runtime_queue_peak_dispatch_owners", "gauge", "Most owners ever in the dispatch window at once.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.PeakDispatchOwners) }},
	{"runtime_queue_peak_dispatch_bytes", "gauge", "Most payload bytes ever in the dispatch window at once.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.PeakDispatchBytes) }},
	{"runtime_queue_waiting", "gauge", "Submissions waiting for contract capacity or a window share now.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.Waiting) }},
	{"runtime_queue_admitted_total", "counter", "Submissions past admission at submit.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.Admitted) }},
	{"runtime_queue_rejected_total", "counter", "Submissions refused by the outstanding budget or the window size.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.Rejected) }},
	{"runtime_queue_granted_total", "counter", "Dispatch window shares granted (one per owner).", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.Granted) }},
	{"runtime_queue_deadline_infeasible_drops_total", "counter", "Owners dropped because their predicted time would miss the deadline.", func(s *engine.Stats) float64 { return float64(s.RuntimeQueue.DeadlineInfeasibleDrops) }},
}

var qosMetrics = []metric{
	{"qos_enabled", "gauge", "1 when QoS contracts are configured.", func(s *engine.Stats) float64 { return b2f(s.QoS.Enabled) }},
	{"qos_contracts", "gauge", "Compiled QoS contracts.", func(s *engine.Stats) float64 { return float64(s.QoS.Contracts) }},
	{"qos_delay", "gauge", "1 when some contract delays (capacity is taken at the batch head).", func(s *engine.Stats) float64 { return b2f(s.QoS.Delay) }},
	{"qos_rejected_total", "counter", "Submissions refused by a contract cap at submit.", func(s *engine.Stats) float64 { return float64(s.QoS.Rejected) }},
	{"qos_dispatch_rejected_total", "counter", "Submissions a reject-only contract failed at their batch head.", func(s *engine.Stats) float64 { return float64(s.QoS.DispatchRejected) }},
	{"qos_delayed_total", "counter", "Times a submission waited at its batch head for contract capacity.", func(s *engine.Stats) float64 { return float64(s.QoS.Delayed) }},
}

// renderAdmission writes the runtime queue, bandwidth and QoS metrics.
// The bandwidth family has one sample per (path, device) under a single
// HELP/TYPE header, as the exposition format requires.
func renderAdmission(st *engine.Stats, write func(name, typ, help, labels string, v float64), raw *strings.Builder) {
	for _, m := range queueMetrics {
		write(m.name, m.typ, m.help, "", m.value(st))
	}
	for i, b := range st.RuntimeQueue.Bandwidth {
		labels := fmt.Sprintf("{path=%q,device=%q}", b.Path, b.Device)
		if i == 0 {
			write("runtime_queue_bandwidth_bytes_per_second", "gauge", "Measured bandwidth per data path and device (0: not yet known).", labels, b.BytesPerSecond)
			continue
		}
		fmt.Fprintf(raw, "orbitefs_runtime_queue_bandwidth_bytes_per_second%s %s\n", labels, strconv.FormatFloat(b.BytesPerSecond, 'f', -1, 64))
	}
	for _, m := range qosMetrics {
		write(m.name, m.typ, m.help, "", m.value(st))
	}
}
