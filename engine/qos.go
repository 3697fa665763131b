// qos.go owns QoS contracts: compiling config.QoS into numbered contract
// slots, resolving a request context to an immutable policy, and the
// per-slot usage the admission code (admission.go) charges.
//
// Invariants:
//   - Slot 0 is the global default/unspec contract; every tenant default
//     and every explicit intent has its own slot; nothing else ever gets
//     one, so an unknown name shares an existing budget and cannot create
//     counters.
//   - Fields compile in specificity order (defaults, tenant defaults,
//     intent override), each field independently: nil inherits, an
//     effective nil cap is no cap, 0 is a hard zero.
//   - A QoSPolicy is immutable and bound to the engine that resolved it;
//     Submit refuses a policy from another engine (ErrForeignQoS).
//   - An intent's budget is not also charged to its tenant default.
//   - A request's own priority never exceeds its contract's max_priority
//     (default config.DefaultMaxPriority): ResolveQoS refuses it with
//     KindPermission rather than lowering it behind the caller's back. A
//     contract's priority replaces the request's and is not limited.

package engine

import (
	"errors"
	"fmt"
	"sort"

	"github.com/orbitefs/orbitefs/config"
)

// Priority re-exports config.Priority: lower is more urgent.
type Priority = config.Priority

// ErrForeignQoS: a policy resolved by another engine was attached.
var ErrForeignQoS = errors.New("qos policy belongs to another engine")

// Blank identities resolve to these names.
const (
	DefaultTenant = "default"
	UnspecIntent  = "unspec"
)

// contract is one compiled slot.
type contract struct {
	slot     int
	tenant   string // normalized; DefaultTenant for slot 0
	intent   string // normalized; UnspecIntent for a tenant default
	priority *Priority
	maxPrio  Priority // most urgent priority a request may ask for
	maxBytes *uint64  // nil: no cap
	maxReqs  *uint64  // nil: no cap
	delay    bool
}

// Contract is a compiled contract as /qos/contracts shows it.
type Contract struct {
	Tenant              string   `json:"tenant"`
	Intent              string   `json:"intent"`
	Priority            *string  `json:"priority"`
	MaxPriority         string   `json:"max_priority"`
	MaxInflightBytes    *uint64  `json:"max_inflight_bytes"`
	MaxInflightRequests *uint64  `json:"max_inflight_requests"`
	Actions             []string `json:"allowed_degraded_actions"`
}

type qosTenant struct {
	slot    int
	intents map[string]int
}

// qosTable is the compiled, read-only contract set.
type qosTable struct {
	contracts []contract
	tenants   map[string]qosTenant
	delay     bool // some contract delays: admission waits at the batch head
}

func compileQoS(q *config.QoS) *qosTable {
	if q == nil {
		return nil
	}
	t := &qosTable{tenants: map[string]qosTenant{}}
	add := func(tenant, intent string, f config.QoSFields) int {
		c := contract{slot: len(t.contracts), tenant: tenant, intent: intent, priority: f.Priority, maxPrio: config.DefaultMaxPriority, delay: f.Delay()}
		if f.MaxPriority != nil {
			c.maxPrio = *f.MaxPriority
		}
		if f.MaxInflightBytes != nil {
			v := uint64(*f.MaxInflightBytes)
			c.maxBytes = &v
		}
		if f.MaxInflightRequests != nil {
			v := *f.MaxInflightRequests
			c.maxReqs = &v
		}
		t.delay = t.delay || c.delay
		t.contracts = append(t.contracts, c)
		return c.slot
	}
	add(DefaultTenant, UnspecIntent, q.Defaults)
	for _, ten := range q.Tenants {
		tf := q.Defaults.Overlay(ten.Defaults)
		e := qosTenant{slot: add(ten.Name, UnspecIntent, tf), intents: map[string]int{}}
		names := make([]string, 0, len(ten.Intents))
		for n := range ten.Intents {
			names = append(names, n)
		}
		sort.Strings(names) // slots in a stable order
		for _, n := range names {
			e.intents[n] = add(ten.Name, n, tf.Overlay(ten.Intents[n]))
		}
		t.tenants[ten.Name] = e
	}
	return t
}

// QoSContext is what a request says about itself: application-supplied
// identities (not authentication) and the priority it asks for.
type QoSContext struct {
	Tenant   string
	Intent   string
	Priority *Priority // nil: medium unless the contract says otherwise
}

// QoSPolicy is a resolved, immutable, engine-bound policy.
type QoSPolicy struct {
	e        *Engine
	slot     int // -1: QoS disabled, no budget
	priority Priority
	tenant   string
	intent   string
	matched  string
}

// Priority is the effective priority: the contract's when it sets one,
// else the requested one (medium when none was requested).
func (p *QoSPolicy) Priority() Priority { return p.priority }

// Matched names the contract that resolved ("default", "tenant-a",
// "tenant-a/foreground_get"), or "disabled".
func (p *QoSPolicy) Matched() string { return p.matched }

// Resolved is the policy as /qos/resolve shows it.
type Resolved struct {
	Tenant   string   `json:"tenant"`
	Intent   string   `json:"intent"`
	Matched  string   `json:"matched_contract"`
	Priority string   `json:"effective_priority"`
	Contract Contract `json:"fields"`
	Usage    Usage    `json:"usage"`
}

// Usage is a contract's current charge.
type Usage struct {
	Owners  uint64 `json:"owners"`
	Bytes   uint64 `json:"bytes"`
	Waiting int    `json:"waiting"`
}

// ResolveQoS resolves ctx to a policy. Names are normalized as
// config.QoSName does (a control character or invalid UTF-8 is
// KindInvalid); blank ones mean default/unspec; unknown ones fall back to
// the tenant's default, then the global default. A requested priority
// more urgent than the contract's max_priority is KindPermission.
func (e *Engine) ResolveQoS(ctx QoSContext) (*QoSPolicy, error) {
	tenant, err := config.QoSName(ctx.Tenant)
	if err != nil {
		return nil, errorf(KindInvalid, "resolve", "qos", "tenant: %v", err)
	}
	intent, err := config.QoSName(ctx.Intent)
	if err != nil {
		return nil, errorf(KindInvalid, "resolve", "qos", "intent: %v", err)
	}
	if tenant == "" {
		tenant = DefaultTenant
	}
	if intent == "" {
		intent = UnspecIntent
	}
	p := &QoSPolicy{e: e, slot: -1, priority: config.PriorityMedium, tenant: tenant, intent: intent, matched: "disabled"}
	if ctx.Priority != nil {
		if *ctx.Priority > config.PriorityLow {
			return nil, errorf(KindInvalid, "resolve", "qos", "priority %d: want 0, 1 or 2", *ctx.Priority)
		}
		p.priority = *ctx.Priority
	}
	t := e.adm.qos
	if t == nil {
		return p, nil
	}
	p.slot, p.matched = 0, DefaultTenant
	if ten, ok := t.tenants[tenant]; ok {
		p.slot, p.matched = ten.slot, tenant
		if s, ok := ten.intents[intent]; ok {
			p.slot, p.matched = s, tenant+"/"+intent
		}
	}
	c := &t.contracts[p.slot]
	switch {
	case c.priority != nil:
		p.priority = *c.priority
	case ctx.Priority != nil && *ctx.Priority < c.maxPrio:
		return nil, errorf(KindPermission, "resolve", "qos", "priority %s: qos contract %q allows requests at most priority %s (its max_priority)", *ctx.Priority, c.name(), c.maxPrio)
	}
	return p, nil
}

// Explain returns the policy's fields and its contract's usage now.
func (p *QoSPolicy) Explain() Resolved {
	r := Resolved{Tenant: p.tenant, Intent: p.intent, Matched: p.matched, Priority: p.priority.String()}
	if p.slot >= 0 {
		r.Contract = p.e.adm.qos.contracts[p.slot].public()
		r.Usage = p.e.adm.usage(p.slot)
	}
	return r
}

func (c *contract) public() Contract {
	out := Contract{Tenant: c.tenant, Intent: c.intent, MaxPriority: c.maxPrio.String(), MaxInflightBytes: c.maxBytes, MaxInflightRequests: c.maxReqs, Actions: []string{config.ActionReject}}
	if c.priority != nil {
		s := c.priority.String()
		out.Priority = &s
	}
	if c.delay {
		out.Actions = []string{config.ActionDelay, config.ActionReject}
	}
	return out
}

// QoSContracts lists the compiled contracts in slot order (nil: QoS off).
func (e *Engine) QoSContracts() []Contract {
	t := e.adm.qos
	if t == nil {
		return nil
	}
	out := make([]Contract, len(t.contracts))
	for i := range t.contracts {
		out[i] = t.contracts[i].public()
	}
	return out
}

// ContractUsage pairs a contract's name with its usage.
type ContractUsage struct {
	Contract string `json:"contract"`
	Usage
}

// QoSUsage reports every contract's current charge (nil: QoS off).
func (e *Engine) QoSUsage() []ContractUsage {
	t := e.adm.qos
	if t == nil {
		return nil
	}
	out := make([]ContractUsage, len(t.contracts))
	for i, c := range t.contracts {
		name := c.tenant
		if i > 0 && c.intent != UnspecIntent {
			name += "/" + c.intent
		}
		out[i] = ContractUsage{Contract: name, Usage: e.adm.usage(i)}
	}
	return out
}

// checkPolicy refuses a foreign policy; nil resolves to the default.
func (e *Engine) checkPolicy(p *QoSPolicy) (*QoSPolicy, error) {
	if p == nil {
		return e.defaultPolicy, nil
	}
	if p.e != e {
		return nil, fmt.Errorf("%w (matched %q)", ErrForeignQoS, p.matched)
	}
	return p, nil
}
