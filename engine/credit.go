// credit.go owns receiver credits on the sending side: with
// max_receiver_credit_sessions > 0, every nonempty submission to a peer
// needs a credit binding for the peer's endpoint and epoch, and each of
// its requests (one physical owner each) spends DataBytes (its length)
// and one RequestSlot of that binding's cumulative grants before it may
// dispatch.
//
// A binding is manual (ActivateReceiverCredit, then cumulative updates
// through ApplyReceiverCredit) or automatic (ConnectReceiverCredit: the
// receiver's issuer grants window + completed_total, and a starved head
// asks it for fresh totals, creditsync.go).
//
// Life of one owner's credit (all under ledger.mu):
//
//	reserved   the first owner at its batch head (headGate), before the
//	           QoS contract and the dispatch window: a starved head waits
//	           holding none of them, so other peers' heads go on; a head
//	           that then waits at one of those gives its credit back
//	           (unreserve), so nothing is charged while it waits; each
//	           later owner as its group's window dispatches it (feed);
//	committed  at its handoff to the transport (the first unit's call on
//	           the Remote), never returned after that, even if it fails;
//	refunded   if it ends before the handoff (cancel, deadline, an
//	           earlier failure, a group that never dispatched);
//	receipted  when a committed owner ends with a known outcome; a
//	           successful one adds to completed_total. A WRITE whose
//	           effect is unknown (a lost ack) never gets a receipt: its
//	           binding stays fenced for good.
//
// Invariants:
//   - used (reserved + committed) never exceeds granted, per resource;
//     grants never decrease.
//   - Owners reserve one at a time, in input order, as they dispatch: a
//     head reserves its first live owner or nothing (a starved head
//     holds no charge while it waits), and each later owner reserves
//     when the group's window hands it to its executor (feed). A group
//     whose next owner lacks credit stops there, its running owners go
//     on, and the rest stay pending (cancellable) until credit returns.
//     The runtime queue's dispatch window is not windowed the same way
//     yet: an off-ring group takes its shares for every owner at its
//     head (admissionGate), and one stopped here keeps them.
//   - Deactivate and disconnect fence new reservations at once and
//     succeed only with no permit live and every committed owner
//     receipted; until then they return KindBusy and the fence stays.
//   - Lock order: Batch.mu, then ledger.mu; ledger.mu is never held
//     while calling an issuer or taking another lock; pokes never block.

package engine

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// CreditResource is one kind of receiver credit (the spec's tags).
type CreditResource uint8

// The credit resources.
const (
	CreditDataBytes     CreditResource = iota // payload bytes, notifications excluded
	CreditRequestSlots                        // one per physical owner
	CreditStagingSlots                        // remote Pin ring slots (observable; charged by the receiver)
	CreditConsumerSlots                       // remote Pin sessions (observable; charged by the receiver)
	numCreditResources
)

var creditNames = [numCreditResources]string{"data_bytes", "request_slots", "staging_slots", "consumer_slots"}

func (r CreditResource) String() string {
	if r < numCreditResources {
		return creditNames[r]
	}
	return fmt.Sprintf("credit(%d)", uint8(r))
}

// ParseCreditResource parses a resource's name.
func ParseCreditResource(s string) (CreditResource, error) {
	for i, n := range creditNames {
		if s == n {
			return CreditResource(i), nil
		}
	}
	return 0, fmt.Errorf("resource %q: want one of %s", s, strings.Join(creditNames[:], ", "))
}

// CreditTotal is one resource's cumulative grant.
type CreditTotal struct {
	Resource CreditResource
	Total    uint64
}

// CreditUpdate is a manual binding's cumulative grant (the spec's
// ReceiverCreditUpdateV1): totals since activation, not increments.
type CreditUpdate struct {
	Peer     string // the peer's endpoint, as its segments were dialed (host:port)
	Epoch    uint64 // the peer's epoch
	Sequence uint64 // a sequence not above the last applied one is ignored
	// FreshnessTTL, when > 0, is how long these totals may authorize new
	// reservations; past it a head waits for the next update. Owners
	// already reserved are not affected.
	FreshnessTTL time.Duration
	Totals       []CreditTotal
}

type creditKey struct {
	peer  string
	epoch uint64
}

// creditRes is one resource of a binding.
type creditRes struct {
	granted   uint64
	reserved  uint64 // reserved, not yet handed off
	committed uint64 // handed off: spent for good
}

func (r *creditRes) available() uint64 { return r.granted - r.reserved - r.committed }

// creditBinding is one peer endpoint and epoch. Guarded by ledger.mu.
type creditBinding struct {
	key     creditKey
	qos     uint8
	auto    *creditAuto // nil: manual
	since   time.Time
	seq     uint64
	updated bool      // an update (or a connect) set the grants
	fresh   time.Time // when they were set
	ttl     time.Duration
	res     [numCreditResources]creditRes
	permits int // owners reserved and not yet handed off or refunded
	open    int // committed owners without a completion receipt
	fenced  bool
	lostAck bool // a committed WRITE's effect is unknown: fenced for good
	// completed_total: the successful owners' bytes and count.
	doneBytes, doneReqs uint64
	refunds, waits      uint64
	ignored             uint64 // old or duplicate sequences
}

// ownerCredit is one request's state in its group's reservation.
type ownerCredit uint8

const (
	ocNone ownerCredit = iota
	ocReserved
	ocCommitted
	ocDone
)

// groupCredit is a remote group's reservation.
type groupCredit struct {
	l     *creditLedger
	b     *creditBinding
	held  bool          // the head's owner was reserved (guarded by ledger.mu)
	state []ownerCredit // per request (guarded by ledger.mu)
	bytes []uint64      // per request: DataBytes it spends
}

// creditLedger is the engine's bindings.
type creditLedger struct {
	max int // max_receiver_credit_sessions; 0: off

	mu       sync.Mutex
	bindings map[creditKey]*creditBinding
	waiters  map[*worker]struct{}
	// stale are issuers of replaced bindings, released outside the lock
	// by the call that replaced them.
	stale []CreditIssuer
	st    struct{ missing, waits, reserved, refunded, committed, syncs, syncErrors uint64 }
	// beforeSync, when set (tests), runs in the worker that performs a
	// sync, before it calls the issuer.
	beforeSync func()
}

func newCreditLedger(max int) *creditLedger {
	return &creditLedger{max: max, bindings: map[creditKey]*creditBinding{}, waiters: map[*worker]struct{}{}}
}

func (l *creditLedger) enabled() bool { return l != nil && l.max > 0 }

func creditName(peer string, epoch uint64) string {
	return fmt.Sprintf("credit/%s@%d", peer, epoch)
}

// byPeerLocked is the live binding of peer, whatever its epoch.
func (l *creditLedger) byPeerLocked(peer string) *creditBinding {
	for k, b := range l.bindings {
		if k.peer == peer {
			return b
		}
	}
	return nil
}

// addLocked creates a binding for key, refusing a second one for the
// same endpoint (a fresh epoch cannot replace a fenced one) and one past
// the session limit. REQUIRES: l.mu.
func (l *creditLedger) addLocked(op string, key creditKey, qos uint8) (*creditBinding, error) {
	name := creditName(key.peer, key.epoch)
	if !l.enabled() {
		return nil, errorf(KindUnavailable, op, name, "receiver credits are off (engine.max_receiver_credit_sessions is 0)")
	}
	if key.peer == "" {
		return nil, errorf(KindInvalid, op, name, "no peer endpoint")
	}
	if old := l.byPeerLocked(key.peer); old != nil {
		switch {
		case old.key.epoch == key.epoch:
			return nil, errorf(KindExists, op, name, "a binding for %s epoch %d is already active", key.peer, key.epoch)
		case old.lostAck:
			return nil, errorf(KindBusy, op, name, "epoch %d of %s stays fenced: a WRITE's acknowledgement was lost (its remote effect is unknown); a fresh epoch cannot replace it", old.key.epoch, key.peer)
		case old.fenced && old.permits == 0 && old.open == 0:
			// A drained binding whose disconnect could not reach its
			// receiver (it restarted): the new epoch replaces it.
			delete(l.bindings, old.key)
			if old.auto != nil {
				l.stale = append(l.stale, old.auto.is)
			}
		default:
			return nil, errorf(KindBusy, op, name, "%s is bound at epoch %d; deactivate (or disconnect) it first", key.peer, old.key.epoch)
		}
	}
	if len(l.bindings) >= l.max {
		return nil, errorf(KindExhausted, op, name, "%d credit sessions, the engine.max_receiver_credit_sessions limit", l.max)
	}
	b := &creditBinding{key: key, qos: qos, since: time.Now()}
	l.bindings[key] = b
	return b, nil
}

// ActivateReceiverCredit creates a manual binding for peer (an endpoint,
// host:port) at epoch. It authorizes nothing until the first update.
func (e *Engine) ActivateReceiverCredit(peer string, epoch uint64, qosClass uint8) error {
	l := e.credit
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.addLocked("activate", creditKey{peer, epoch}, qosClass)
	l.releaseStaleLocked()
	if err != nil {
		return err
	}
	e.log.Info("receiver credit activated", "peer", peer, "epoch", epoch, "qos_class", qosClass)
	return nil
}

// ApplyReceiverCredit applies a manual binding's cumulative update.
// Decreasing totals and a resource named twice refuse the whole update
// (KindInvalid, nothing changes); an old or duplicate sequence is
// ignored (nil).
func (e *Engine) ApplyReceiverCredit(u CreditUpdate) error {
	const op = "apply"
	name := creditName(u.Peer, u.Epoch)
	l := e.credit
	if !l.enabled() {
		return errorf(KindUnavailable, op, name, "receiver credits are off (engine.max_receiver_credit_sessions is 0)")
	}
	if u.FreshnessTTL < 0 {
		return errorf(KindInvalid, op, name, "freshness_ttl %s: want >= 0 (0: never stale)", u.FreshnessTTL)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bindings[creditKey{u.Peer, u.Epoch}]
	if b == nil {
		return errorf(KindNotFound, op, name, "no binding for %s epoch %d: activate it first", u.Peer, u.Epoch)
	}
	if b.auto != nil {
		return errorf(KindInvalid, op, name, "the binding of %s is automatic: its issuer grants its totals", u.Peer)
	}
	seen := [numCreditResources]bool{}
	for _, t := range u.Totals {
		if t.Resource >= numCreditResources {
			return errorf(KindInvalid, op, name, "unknown resource %d", t.Resource)
		}
		if seen[t.Resource] {
			return errorf(KindInvalid, op, name, "resource %s appears twice in one update", t.Resource)
		}
		seen[t.Resource] = true
	}
	if b.updated && u.Sequence <= b.seq {
		b.ignored++
		return nil // old or duplicate: not an error
	}
	for _, t := range u.Totals {
		if r := &b.res[t.Resource]; t.Total < r.granted {
			return errorf(KindInvalid, op, name, "%s total %d is below the %d already granted: totals are cumulative and never decrease", t.Resource, t.Total, r.granted)
		}
	}
	for _, t := range u.Totals {
		b.res[t.Resource].granted = t.Total
	}
	b.seq, b.updated, b.fresh, b.ttl = u.Sequence, true, time.Now(), u.FreshnessTTL
	l.wakeLocked()
	return nil
}

// DeactivateReceiverCredit fences peer's binding at epoch against new
// reservations and removes it once no permit is live and every committed
// owner has its completion receipt; until then it returns KindBusy (the
// fence stays; call again). A lost WRITE acknowledgement keeps it busy
// for good.
func (e *Engine) DeactivateReceiverCredit(peer string, epoch uint64) error {
	const op = "deactivate"
	l := e.credit
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bindings[creditKey{peer, epoch}]
	if b == nil {
		return errorf(KindNotFound, op, creditName(peer, epoch), "no binding for %s epoch %d", peer, epoch)
	}
	if b.auto != nil {
		return errorf(KindInvalid, op, creditName(peer, epoch), "the binding of %s is automatic: disconnect it", peer)
	}
	if err := l.fenceLocked(op, b); err != nil {
		return err
	}
	delete(l.bindings, b.key)
	e.log.Info("receiver credit deactivated", "peer", peer, "epoch", epoch)
	return nil
}

// fenceLocked fences b and reports KindBusy while it is not drained.
// REQUIRES: l.mu.
func (l *creditLedger) fenceLocked(op string, b *creditBinding) error {
	b.fenced = true
	l.wakeLocked() // its waiters fail now instead of at their deadline
	name := creditName(b.key.peer, b.key.epoch)
	switch {
	case b.lostAck:
		return errorf(KindBusy, op, name, "fenced for good: a WRITE's acknowledgement was lost, so its remote effect is unknown")
	case b.permits > 0 || b.open > 0:
		return errorf(KindBusy, op, name, "%d reserved owner(s) not yet handed off and %d committed owner(s) without a completion receipt; fenced, call again once they finish", b.permits, b.open)
	}
	return nil
}

// bind finds the binding a submission to rs must hold, at prepare.
func (l *creditLedger) bind(rs *RemoteSegment, reqs int, bytes []uint64) (*groupCredit, error) {
	if !l.enabled() {
		return nil, nil
	}
	key := creditKey{rs.info.Address, rs.info.Epoch}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bindings[key]
	if b == nil {
		l.st.missing++
		return nil, detail(KindPermission, "no receiver credit binding for %s epoch %d (engine.max_receiver_credit_sessions is on): activate or connect one first", key.peer, key.epoch)
	}
	if b.fenced {
		return nil, detail(KindBusy, "the receiver credit binding of %s epoch %d is fenced (deactivating or disconnecting)", key.peer, key.epoch)
	}
	if a := b.auto; a != nil {
		// Each physical owner must fit the window (one larger would wait
		// for ever); a submission larger than the window proceeds owner
		// by owner as credit returns.
		for i, n := range bytes {
			if n > a.window[CreditDataBytes] || a.window[CreditRequestSlots] == 0 {
				return nil, detail(KindExhausted, "requests[%d] of %d bytes exceeds the receiver's window for this engine (%d requests, %d bytes): each request must fit it", i, n, a.window[CreditRequestSlots], a.window[CreditDataBytes])
			}
		}
	}
	return &groupCredit{l: l, b: b, state: make([]ownerCredit, reqs), bytes: bytes}, nil
}

// creditVerdict is what the credit gate tells a head.
type creditVerdict uint8

const (
	creditGo creditVerdict = iota
	creditWait
	creditSync // wait, and this worker asks the issuer for fresh totals
)

// reserve takes the credit of g's first live owner at its batch head,
// or nothing: a head whose first owner lacks credit waits holding none.
// Its later owners reserve theirs as they dispatch (feed). live(i) says
// which requests are still pending. A head that must wait is registered
// with worker w. REQUIRES: w's Batch.mu.
func (c *groupCredit) reserve(g *group, live func(i int) bool, w *worker, now time.Time) (creditVerdict, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.held {
		return creditGo, nil
	}
	for i := range c.state {
		if !live(i) {
			continue
		}
		v, err := c.ownerLocked(g, i, w, now)
		c.held = v == creditGo && err == nil
		return v, err
	}
	delete(l.waiters, w) // no live owner: nothing to reserve
	return creditGo, nil
}

// feed reserves owner i's credit as the group hands it to its executor
// (Batch.feedLocked), unless it holds it already: owners reserve one by
// one as they dispatch, so a submission larger than the window goes out
// as credit returns, and never holds credit for owners still waiting.
// w (nil when the batch has no worker) waits for a poke.
func (c *groupCredit) feed(g *group, i int, w *worker, now time.Time) (creditVerdict, error) {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.state[i] != ocNone {
		return creditGo, nil
	}
	return c.ownerLocked(g, i, w, now)
}

// ownerLocked reserves owner i's DataBytes and one RequestSlot, or
// registers w to wait (and, on an automatic binding, tells it to sync).
// REQUIRES: l.mu.
func (c *groupCredit) ownerLocked(g *group, i int, w *worker, now time.Time) (creditVerdict, error) {
	l, b := c.l, c.b
	if b.fenced {
		l.forgetLocked(w)
		return creditGo, errorf(KindBusy, g.op.String(), g.b.name(), "receiver credit %s is fenced (deactivating or disconnecting); requests[%d] and the rest were not sent", creditName(b.key.peer, b.key.epoch), i)
	}
	stale := !b.updated || (b.ttl > 0 && now.Sub(b.fresh) > b.ttl)
	if stale || b.res[CreditDataBytes].available() < c.bytes[i] || b.res[CreditRequestSlots].available() < 1 {
		if w != nil {
			if _, ok := l.waiters[w]; !ok {
				l.waiters[w] = struct{}{}
				l.st.waits++
				b.waits++
			}
		}
		if b.auto != nil && w != nil && b.auto.wantSyncLocked(b, now) {
			// Counted here, with the waiter, so a test sees every sync
			// begun the moment it sees the heads waiting.
			b.auto.syncing = true
			b.auto.syncs++
			l.st.syncs++
			return creditSync, nil
		}
		return creditWait, nil
	}
	l.forgetLocked(w)
	c.state[i] = ocReserved
	b.permits++
	b.res[CreditDataBytes].reserved += c.bytes[i]
	b.res[CreditRequestSlots].reserved++
	l.st.reserved++
	return creditGo, nil
}

// forgetLocked drops w from the waiters. REQUIRES: l.mu.
func (l *creditLedger) forgetLocked(w *worker) {
	if w != nil {
		delete(l.waiters, w)
	}
}

// commit spends owner i's reservation at its handoff to the transport.
// Idempotent: every unit of the owner calls it.
func (c *groupCredit) commit(i int) {
	l, b := c.l, c.b
	l.mu.Lock()
	if c.state[i] == ocReserved {
		c.state[i] = ocCommitted
		b.permits--
		b.open++
		b.res[CreditDataBytes].reserved -= c.bytes[i]
		b.res[CreditDataBytes].committed += c.bytes[i]
		b.res[CreditRequestSlots].reserved--
		b.res[CreditRequestSlots].committed++
		l.st.committed++
	}
	l.mu.Unlock()
}

// end records owner i's outcome: a refund if it was never handed off, a
// completion receipt if its outcome is known (a successful one adds to
// completed_total), and a permanent fence for a WRITE of unknown effect.
func (c *groupCredit) end(i int, ok bool, effect RemoteEffect) {
	l, b := c.l, c.b
	l.mu.Lock()
	defer l.mu.Unlock()
	switch c.state[i] {
	case ocReserved:
		c.refundLocked(i)
	case ocCommitted:
		c.state[i] = ocDone
		if effect == EffectUnknown {
			b.lostAck, b.fenced = true, true // no receipt: the owner stays open
			l.wakeLocked()
			return
		}
		b.open--
		if ok {
			b.doneBytes += c.bytes[i]
			b.doneReqs++
		}
		l.wakeLocked() // an automatic binding's waiters may now sync
	}
}

// refundLocked returns owner i's reservation. REQUIRES: l.mu.
func (c *groupCredit) refundLocked(i int) {
	b := c.b
	c.state[i] = ocDone
	b.permits--
	b.res[CreditDataBytes].reserved -= c.bytes[i]
	b.res[CreditRequestSlots].reserved--
	b.refunds++
	c.l.st.refunded++
	c.l.wakeLocked()
}

// release refunds whatever g still reserves when it is released (it
// failed or was cancelled before its owners were handed off).
func (c *groupCredit) release() {
	l := c.l
	l.mu.Lock()
	for i, s := range c.state {
		if s == ocReserved {
			c.refundLocked(i)
		}
	}
	l.mu.Unlock()
}

// unreserve gives back a reservation taken at this head because the
// head waits at a later gate: no owner was handed off yet.
func (c *groupCredit) unreserve() {
	l, b := c.l, c.b
	l.mu.Lock()
	defer l.mu.Unlock()
	if !c.held {
		return
	}
	for i, s := range c.state {
		if s == ocReserved { // the head's owner: none was handed off yet
			c.state[i] = ocNone
			b.permits--
			b.res[CreditDataBytes].reserved -= c.bytes[i]
			b.res[CreditRequestSlots].reserved--
		}
	}
	c.held = false
	l.wakeLocked()
}

// forget drops w from the waiters (its head left the gate another way).
func (l *creditLedger) forget(w *worker) {
	l.mu.Lock()
	delete(l.waiters, w)
	l.mu.Unlock()
}

// releaseStaleLocked releases replaced issuers on goroutines of their
// own (Release closes a connection; never under l.mu). REQUIRES: l.mu.
func (l *creditLedger) releaseStaleLocked() {
	for _, is := range l.stale {
		go is.Release()
	}
	l.stale = nil
}

// wakeLocked pokes every waiting worker. REQUIRES: l.mu.
func (l *creditLedger) wakeLocked() {
	for w := range l.waiters {
		w.poke()
	}
}

// CreditResourceStats is one resource of a binding.
type CreditResourceStats struct {
	Resource  string `json:"resource"`
	Granted   uint64 `json:"granted"`
	Reserved  uint64 `json:"reserved"`
	Consumed  uint64 `json:"consumed"`
	Available uint64 `json:"available"`
}

// CreditBindingStats describes one binding (the spec's
// ReceiverCreditStats).
type CreditBindingStats struct {
	Peer      string                `json:"peer"`
	Epoch     uint64                `json:"epoch"`
	Mode      string                `json:"mode"` // manual or automatic
	QoSClass  uint8                 `json:"qos_class"`
	Sequence  uint64                `json:"sequence"`
	Fresh     bool                  `json:"fresh"` // its totals may authorize new reservations
	Fenced    bool                  `json:"fenced"`
	LostAck   bool                  `json:"lost_ack"`
	Permits   int                   `json:"permits"`   // reserved owners not yet handed off
	Open      int                   `json:"open"`      // committed owners without a completion receipt
	Completed [2]uint64             `json:"completed"` // completed_total: bytes, requests
	Waits     uint64                `json:"waits"`
	Refunds   uint64                `json:"refunds"`
	Ignored   uint64                `json:"ignored_updates"`
	Syncs     uint64                `json:"syncs"`
	SyncError string                `json:"sync_error,omitempty"`
	Resources []CreditResourceStats `json:"resources"`
}

// Resource returns the stats of resource r.
func (s CreditBindingStats) Resource(r CreditResource) CreditResourceStats {
	for _, x := range s.Resources {
		if x.Resource == r.String() {
			return x
		}
	}
	return CreditResourceStats{Resource: r.String()}
}

// CreditStats reports receiver credits on the sending side.
type CreditStats struct {
	Enabled     bool                 `json:"enabled"`
	MaxSessions int                  `json:"max_sessions"`
	Sessions    int                  `json:"sessions"`
	Waiting     int                  `json:"waiting"`
	Missing     uint64               `json:"missing"` // submissions refused: no binding
	Waits       uint64               `json:"waits"`
	Reserved    uint64               `json:"reserved"`
	Committed   uint64               `json:"committed"`
	Refunded    uint64               `json:"refunded"`
	Syncs       uint64               `json:"syncs"` // begun
	SyncErrors  uint64               `json:"sync_errors"`
	Bindings    []CreditBindingStats `json:"bindings"`
}

// ReceiverCreditStats reports every binding.
func (e *Engine) ReceiverCreditStats() CreditStats {
	l := e.credit
	l.mu.Lock()
	defer l.mu.Unlock()
	s := CreditStats{Enabled: l.enabled(), MaxSessions: l.max, Sessions: len(l.bindings), Waiting: len(l.waiters),
		Missing: l.st.missing, Waits: l.st.waits, Reserved: l.st.reserved, Committed: l.st.committed,
		Refunded: l.st.refunded, Syncs: l.st.syncs, SyncErrors: l.st.syncErrors, Bindings: []CreditBindingStats{}}
	now := time.Now()
	for _, b := range l.bindings {
		bs := CreditBindingStats{Peer: b.key.peer, Epoch: b.key.epoch, Mode: "manual", QoSClass: b.qos, Sequence: b.seq,
			Fresh: b.updated && (b.ttl == 0 || now.Sub(b.fresh) <= b.ttl), Fenced: b.fenced, LostAck: b.lostAck,
			Permits: b.permits, Open: b.open, Completed: [2]uint64{b.doneBytes, b.doneReqs},
			Waits: b.waits, Refunds: b.refunds, Ignored: b.ignored}
		if a := b.auto; a != nil {
			bs.Mode, bs.Syncs = "automatic", a.syncs
			if a.err != nil {
				bs.SyncError = a.err.Error()
			}
		}
		for r := range numCreditResources {
			x := b.res[r]
			bs.Resources = append(bs.Resources, CreditResourceStats{Resource: r.String(), Granted: x.granted,
				Reserved: x.reserved, Consumed: x.committed, Available: x.available()})
		}
		s.Bindings = append(s.Bindings, bs)
	}
	sort.Slice(s.Bindings, func(i, j int) bool { return s.Bindings[i].Peer < s.Bindings[j].Peer })
	return s
}

// creditGate reserves a remote head's credit (reserve). A head that must
// wait sleeps until a credit change pokes it or its deadline; one told
// to sync leaves the binding to the worker's syncCredit. REQUIRES: b.mu.
func (w *worker) creditGate(g *group, now time.Time) (bool, error) {
	if g.remote == nil || g.remote.credit == nil {
		return true, nil
	}
	c := g.remote.credit
	v, err := c.reserve(g, func(i int) bool { return w.b.mu.tasks[g.first+i].state == TaskPending }, w, now)
	switch {
	case err != nil:
		return false, err
	case v == creditGo:
		return true, nil
	case v == creditSync:
		w.creditSync.Store(c.b)
		w.poke() // a fill on a submitting caller leaves the sync to the worker goroutine
	}
	w.admWait = true
	if w.admUntil.IsZero() || g.deadline.Before(w.admUntil) {
		w.admUntil = g.deadline
	}
	return false, nil
}

// creditFeedLocked reserves owner i's credit as feedLocked hands it to
// its executor. false stops the feed there: the owner waits for credit
// (the worker is poked when it changes, and syncs an automatic binding),
// or the binding is fenced and the rest of g failed. REQUIRES: b.mu.
func (b *Batch) creditFeedLocked(g *group, i int, now time.Time) bool {
	if g.remote == nil || g.remote.credit == nil {
		return true
	}
	c, w := g.remote.credit, b.mu.w
	v, err := c.feed(g, i, w, now)
	switch {
	case err != nil:
		b.failRestLocked(g, i, err)
		return false
	case v == creditGo:
		return true
	case v == creditSync:
		w.creditSync.Store(c.b)
		w.poke()
	}
	if w != nil {
		w.admWait = true
		if w.admUntil.IsZero() || g.deadline.Before(w.admUntil) {
			w.admUntil = g.deadline
		}
	}
	return false
}

// creditSkipLocked refunds owner i's reservation when feedLocked skips
// it (it ended before dispatch: dropped as deadline-infeasible at the
// head, after its credit was reserved), so the group's later owners can
// use that credit at once instead of after the group ends. REQUIRES: b.mu.
func (b *Batch) creditSkipLocked(g *group, i int) {
	if g.remote == nil || g.remote.credit == nil {
		return
	}
	c := g.remote.credit
	c.l.mu.Lock()
	if c.state[i] == ocReserved {
		c.refundLocked(i)
	}
	c.l.mu.Unlock()
}

// creditUnreserve gives back g's reservation when its head waits at a
// later gate or fails there. REQUIRES: b.mu.
func (w *worker) creditUnreserve(g *group) {
	if g.remote != nil && g.remote.credit != nil {
		g.remote.credit.unreserve()
	}
}

// syncCredit performs the sync a fill asked this worker for, outside
// every lock.
func (w *worker) syncCredit() {
	if w.creditSync.Load() == nil {
		return
	}
	if c := w.creditSync.Swap(nil); c != nil {
		w.b.e.credit.sync(c)
	}
}
