// credit.go owns the receiver's credit issuer: the windows this engine
// grants the engines that send to it, over the credit frames of the
// control connection (connect, sync, close).
//
// Each sender engine (a name and epoch, as proved at the handshake) that
// connects gets a fixed window of bytes and requests (and, when
// configured, remote Pin staging and consumer slots), carved from the
// aggregate bounds; its grant is always window + completed_total, where
// completed_total is what the sender reports at its syncs: the bytes and
// requests of its owners that completed successfully. The issuer also
// counts, from its own side, the bytes each connected sender's READ and
// WRITE frames carried (served): served - completed is the sender's
// outstanding bytes as this receiver sees them. An honest sender keeps
// them within its window; a frame that would take them past it is
// refused before the region is touched (admit), so the receiver holds
// the bound itself, whatever the sender does. The peaks are in the
// stats.
//
// Invariants:
//   - The sum of the windows never exceeds max_bytes, max_requests and
//     the slot bounds; a connect that would is refused (nothing held).
//   - One window per sender engine: connecting again (a lost reply)
//     returns the same window; a sender's completed totals never
//     decrease and never exceed the bytes its frames carried.
//   - Close returns the window and leaves a tombstone, so a repeated
//     close (a lost reply) succeeds; at most maxTombstones are kept (an
//     arbitrary old one goes first). A crashed sender's window is
//     returned when its name connects at a new epoch (its next start),
//     unless Pin slots of it are still held.
//   - A connected sender's outstanding bytes plus those of its frames
//     being served never exceed its window: a frame past it is refused
//     with nothing done (admit). A frame counts as served only for the
//     bytes it moved (settle), so completed claims stay bounded by what
//     was really carried. Requests are not counted here: frames do not
//     mark physical owners.
//   - A remote Pin takes its depth of staging slots plus one consumer
//     slot from its sender's window at once, or nothing; a missing,
//     closing or stale binding is refused before anything is allocated.

package peer

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// maxTombstones bounds the closed senders remembered.
const maxTombstones = 4096

// IssuerLimits are the issuer's bounds ([peer.receiver_credit]).
type IssuerLimits struct {
	MaxSessions                                   int
	MaxBytes, MaxRequests                         uint64
	BytesPerSender, RequestsPerSender             uint64
	MaxStagingSlots, MaxConsumerSlots             uint64
	StagingSlotsPerSender, ConsumerSlotsPerSender uint64
}

type senderKey struct {
	name  string
	epoch uint64
}

// creditSender is one connected sender. Guarded by Issuer.mu.
type creditSender struct {
	qos                uint8
	window             wire.CreditGrant
	done               wire.CreditDone
	served             uint64 // bytes its READ and WRITE frames carried
	serving            uint64 // bytes of its frames admitted and not yet settled
	peak               uint64 // largest served - done.Bytes seen
	syncs              uint64
	staging, consumers uint64 // Pin slots held now
	closing            bool
	gone               bool // removed (closed or retired): settle leaves the totals alone
}

func (s *creditSender) outstanding() uint64 { return s.served - s.done.Bytes }

// Issuer grants receiver credit. Safe for concurrent use.
type Issuer struct {
	lim IssuerLimits

	mu      sync.Mutex
	senders map[senderKey]*creditSender
	tombs   map[senderKey]wire.CreditDone
	sum     wire.CreditGrant // windows reserved
	out     uint64           // outstanding bytes of every sender now
	peak    uint64           // its largest
	st      struct{ connects, syncs, closes, refused, overruns, retired uint64 }
}

// NewIssuer makes an issuer with lim.
func NewIssuer(lim IssuerLimits) *Issuer {
	return &Issuer{lim: lim, senders: map[senderKey]*creditSender{}, tombs: map[senderKey]wire.CreditDone{}}
}

// errCredit is a refusal the sender sees as an error reply.
func creditRefusal(code wire.Code, format string, args ...any) *wire.Error {
	return &wire.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// connect reserves a window for the sender, or returns the one it holds.
func (x *Issuer) connect(k senderKey, m *wire.CreditConnect) (wire.CreditGrant, *wire.Error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.senders[k]; s != nil {
		if s.closing {
			return wire.CreditGrant{}, creditRefusal(wire.CodeBusy, "the credit session of %s epoch %016x is closing", k.name, k.epoch)
		}
		return s.grant(), nil // a retry after a lost reply
	}
	x.retireLocked(k)
	l := x.lim
	w := wire.CreditGrant{Bytes: l.BytesPerSender, Requests: l.RequestsPerSender, StagingSlots: l.StagingSlotsPerSender, ConsumerSlots: l.ConsumerSlotsPerSender}
	switch {
	case len(x.senders) >= l.MaxSessions:
		x.st.refused++
		return wire.CreditGrant{}, creditRefusal(wire.CodeBusy, "%d credit sessions, the receiver's max_sessions", l.MaxSessions)
	case x.sum.Bytes+w.Bytes > l.MaxBytes || x.sum.Requests+w.Requests > l.MaxRequests,
		x.sum.StagingSlots+w.StagingSlots > l.MaxStagingSlots || x.sum.ConsumerSlots+w.ConsumerSlots > l.MaxConsumerSlots:
		x.st.refused++
		return wire.CreditGrant{}, creditRefusal(wire.CodeBusy, "a window of %d bytes and %d requests does not fit: %d bytes and %d requests of %d, %d are reserved",
			w.Bytes, w.Requests, x.sum.Bytes, x.sum.Requests, l.MaxBytes, l.MaxRequests)
	}
	x.sum.Bytes += w.Bytes
	x.sum.Requests += w.Requests
	x.sum.StagingSlots += w.StagingSlots
	x.sum.ConsumerSlots += w.ConsumerSlots
	x.senders[k] = &creditSender{qos: m.QoSClass, window: w}
	delete(x.tombs, k)
	x.st.connects++
	return w, nil
}

// retireLocked returns the windows of k's name at other epochs: an
// engine draws a new epoch at every start, so a new epoch connecting
// means the old incarnation is gone (crashed, or stopped without its
// close), and its window would otherwise stay reserved until this
// receiver restarts. A window whose Pin slots are still held stays.
func (x *Issuer) retireLocked(k senderKey) {
	for old, s := range x.senders {
		if old.name != k.name || old.epoch == k.epoch || s.staging > 0 || s.consumers > 0 {
			continue
		}
		x.removeLocked(old, s)
		x.st.retired++
	}
}

// removeLocked returns s's window and leaves a tombstone for k.
func (x *Issuer) removeLocked(k senderKey, s *creditSender) {
	x.sum.Bytes -= s.window.Bytes
	x.sum.Requests -= s.window.Requests
	x.sum.StagingSlots -= s.window.StagingSlots
	x.sum.ConsumerSlots -= s.window.ConsumerSlots
	x.out -= s.outstanding()
	s.gone = true
	delete(x.senders, k)
	if len(x.tombs) >= maxTombstones {
		for old := range x.tombs {
			delete(x.tombs, old)
			break
		}
	}
	x.tombs[k] = s.done
}

func (s *creditSender) grant() wire.CreditGrant {
	g := s.window
	g.Bytes += s.done.Bytes
	g.Requests += s.done.Requests
	return g
}

// report checks and records a sender's completed totals.
func (x *Issuer) reportLocked(k senderKey, s *creditSender, d wire.CreditDone) *wire.Error {
	switch {
	case d.Bytes < s.done.Bytes || d.Requests < s.done.Requests:
		return creditRefusal(wire.CodeProtocol, "completed totals went back: %d bytes, %d requests after %d, %d", d.Bytes, d.Requests, s.done.Bytes, s.done.Requests)
	case d.Bytes > s.served:
		return creditRefusal(wire.CodeProtocol, "%d bytes reported completed, but %s's frames carried %d", d.Bytes, k.name, s.served)
	}
	x.out -= d.Bytes - s.done.Bytes
	s.done = d
	return nil
}

// sync records the sender's completed totals and answers its grant.
func (x *Issuer) sync(k senderKey, d wire.CreditDone) (wire.CreditGrant, *wire.Error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.senders[k]
	if s == nil {
		return wire.CreditGrant{}, creditRefusal(wire.CodeNotFound, "no credit session for %s epoch %016x: connect first", k.name, k.epoch)
	}
	if err := x.reportLocked(k, s, d); err != nil {
		return wire.CreditGrant{}, err
	}
	s.syncs++
	x.st.syncs++
	return s.grant(), nil
}

// close returns the sender's window and leaves a tombstone; closing a
// tombstone again succeeds.
func (x *Issuer) close(k senderKey, d wire.CreditDone) *wire.Error {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.senders[k]
	if s == nil {
		if _, ok := x.tombs[k]; ok {
			return nil
		}
		return creditRefusal(wire.CodeNotFound, "no credit session for %s epoch %016x", k.name, k.epoch)
	}
	if err := x.reportLocked(k, s, d); err != nil {
		return err
	}
	if s.staging > 0 || s.consumers > 0 {
		return creditRefusal(wire.CodeBusy, "%d staging and %d consumer slots of %s are still held by remote Pin sessions", s.staging, s.consumers, k.name)
	}
	x.removeLocked(k, s)
	x.st.closes++
	return nil
}

// admit checks a READ or WRITE frame of n bytes from the sender before
// the server touches the region. A connected sender's frames may carry
// at most its window beyond what it has reported completed (an honest
// sender commits an owner only within its grant, window + completed, so
// it never meets this); a frame past that is refused with CodeCredit,
// counted in overruns and nothing else. An admitted frame holds n of
// the window until settle. A sender without a credit session is not
// gated: admit returns nil, nil.
func (x *Issuer) admit(k senderKey, n uint64) (*creditSender, *wire.Error) {
	if x == nil {
		return nil, nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.senders[k]
	if s == nil {
		return nil, nil
	}
	if used := s.outstanding() + s.serving; used > s.window.Bytes || n > s.window.Bytes-used {
		x.st.overruns++
		return nil, &wire.Error{Code: wire.CodeCredit, Message: fmt.Sprintf(
			"a frame of %d bytes from %s would take its outstanding bytes to %d, past its receiver credit window of %d (%d served, %d completed); nothing was done",
			n, k.name, used+n, s.window.Bytes, s.served, s.done.Bytes)}
	}
	s.serving += n
	return s, nil
}

// settle ends an admitted frame of n bytes that moved carried of them:
// only those count as served (a refused READ's length is the sender's
// claim, and completed totals are checked against what was served).
func (x *Issuer) settle(s *creditSender, n, carried uint64) {
	if s == nil {
		return
	}
	x.mu.Lock()
	s.serving -= n
	s.served += carried
	s.peak = max(s.peak, s.outstanding())
	if !s.gone {
		x.out += carried
		x.peak = max(x.peak, x.out)
	}
	x.mu.Unlock()
}

// ErrNoCreditBinding is why a remote Pin was refused before allocation.
var ErrNoCreditBinding = errors.New("no credit binding")

// AcquirePin takes depth staging slots and one consumer slot of the
// sender's window for one remote Pin session, all or nothing, before
// anything is allocated. release returns them; release(true) (uncertain
// cleanup) keeps both charges for good.
func (x *Issuer) AcquirePin(name string, epoch uint64, depth uint64) (release func(uncertain bool), err error) {
	k := senderKey{name, epoch}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.senders[k]
	switch {
	case s == nil:
		return nil, fmt.Errorf("%w: %s epoch %016x has no credit session (or an old epoch's)", ErrNoCreditBinding, name, epoch)
	case s.closing:
		return nil, fmt.Errorf("%w: the credit session of %s is closing", ErrNoCreditBinding, name)
	case s.staging+depth > s.window.StagingSlots || s.consumers+1 > s.window.ConsumerSlots:
		return nil, fmt.Errorf("a Pin of depth %d needs %d staging and 1 consumer slot; %s holds %d of %d and %d of %d",
			depth, depth, name, s.staging, s.window.StagingSlots, s.consumers, s.window.ConsumerSlots)
	}
	s.staging += depth
	s.consumers++
	var once sync.Once
	return func(uncertain bool) {
		once.Do(func() {
			if uncertain {
				return
			}
			x.mu.Lock()
			s.staging -= depth
			s.consumers--
			x.mu.Unlock()
		})
	}, nil
}

// SenderStats is one connected sender.
type SenderStats struct {
	Name                 string `json:"name"`
	Epoch                string `json:"epoch"`
	QoSClass             uint8  `json:"qos_class"`
	WindowBytes          uint64 `json:"window_bytes"`
	WindowRequests       uint64 `json:"window_requests"`
	WindowStagingSlots   uint64 `json:"window_staging_slots"`
	WindowConsumerSlots  uint64 `json:"window_consumer_slots"`
	CompletedBytes       uint64 `json:"completed_bytes"`
	CompletedRequests    uint64 `json:"completed_requests"`
	GrantedBytes         uint64 `json:"granted_bytes"`
	ServedBytes          uint64 `json:"served_bytes"`
	OutstandingBytes     uint64 `json:"outstanding_bytes"`
	PeakOutstandingBytes uint64 `json:"peak_outstanding_bytes"`
	StagingSlotsHeld     uint64 `json:"staging_slots_held"`
	ConsumerSlotsHeld    uint64 `json:"consumer_slots_held"`
	Syncs                uint64 `json:"syncs"`
}

// IssuerStats reports the issuer (the spec's receiver_credit_issuer_stats).
type IssuerStats struct {
	Enabled              bool          `json:"enabled"`
	Senders              int           `json:"senders"`
	Tombstones           int           `json:"tombstones"`
	MaxSessions          int           `json:"max_sessions"`
	MaxBytes             uint64        `json:"max_bytes"`
	MaxRequests          uint64        `json:"max_requests"`
	WindowBytes          uint64        `json:"window_bytes"` // reserved by every window
	WindowRequests       uint64        `json:"window_requests"`
	WindowStagingSlots   uint64        `json:"window_staging_slots"`
	WindowConsumerSlots  uint64        `json:"window_consumer_slots"`
	OutstandingBytes     uint64        `json:"outstanding_bytes"`
	PeakOutstandingBytes uint64        `json:"peak_outstanding_bytes"`
	Overruns             uint64        `json:"overruns"` // frames refused: they would have taken a sender past its window
	Connects             uint64        `json:"connects"`
	Syncs                uint64        `json:"syncs"`
	Closes               uint64        `json:"closes"`
	Retired              uint64        `json:"retired"` // windows of a sender's earlier epoch, returned when a new one connected
	Refused              uint64        `json:"refused"`
	List                 []SenderStats `json:"list"`
}

// Stats reports the issuer; a nil issuer reports it off.
func (x *Issuer) Stats() IssuerStats {
	if x == nil {
		return IssuerStats{List: []SenderStats{}}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	s := IssuerStats{Enabled: true, Senders: len(x.senders), Tombstones: len(x.tombs), MaxSessions: x.lim.MaxSessions,
		MaxBytes: x.lim.MaxBytes, MaxRequests: x.lim.MaxRequests, WindowBytes: x.sum.Bytes, WindowRequests: x.sum.Requests,
		WindowStagingSlots: x.sum.StagingSlots, WindowConsumerSlots: x.sum.ConsumerSlots,
		OutstandingBytes: x.out, PeakOutstandingBytes: x.peak, Overruns: x.st.overruns,
		Connects: x.st.connects, Syncs: x.st.syncs, Closes: x.st.closes, Retired: x.st.retired, Refused: x.st.refused, List: []SenderStats{}}
	for k, c := range x.senders {
		g := c.grant()
		s.List = append(s.List, SenderStats{Name: k.name, Epoch: fmt.Sprintf("%016x", k.epoch), QoSClass: c.qos,
			WindowBytes: c.window.Bytes, WindowRequests: c.window.Requests, WindowStagingSlots: c.window.StagingSlots,
			WindowConsumerSlots: c.window.ConsumerSlots, CompletedBytes: c.done.Bytes, CompletedRequests: c.done.Requests,
			GrantedBytes: g.Bytes, ServedBytes: c.served, OutstandingBytes: c.outstanding(), PeakOutstandingBytes: c.peak,
			StagingSlotsHeld: c.staging, ConsumerSlotsHeld: c.consumers, Syncs: c.syncs})
	}
	sort.Slice(s.List, func(i, j int) bool {
		if s.List[i].Name != s.List[j].Name {
			return s.List[i].Name < s.List[j].Name
		}
		return s.List[i].Epoch < s.List[j].Epoch
	})
	return s
}

// serveCredit answers one credit request on a control connection from
// the sender that proved hello.
func (s *Server) serveCredit(t wire.Type, meta []byte, hello *wire.Hello, reply *wire.Frame) error {
	x := s.cfg.Credit
	k := senderKey{hello.Name, hello.Epoch}
	var werr *wire.Error
	if x == nil {
		werr = creditRefusal(wire.CodeDenied, "receiver credits are off on %s ([peer.receiver_credit] enabled = false)", s.cfg.Name)
	} else {
		switch t {
		case wire.TypeCreditConnect:
			var m wire.CreditConnect
			if err := m.Unmarshal(meta); err != nil {
				return err
			}
			var g wire.CreditGrant
			if g, werr = x.connect(k, &m); werr == nil {
				reply.Type, reply.Meta = wire.TypeCreditGrant, g.Marshal()
			}
		case wire.TypeCreditSync:
			var m wire.CreditDone
			if err := m.Unmarshal(meta); err != nil {
				return err
			}
			var g wire.CreditGrant
			if g, werr = x.sync(k, m); werr == nil {
				reply.Type, reply.Meta = wire.TypeCreditGrant, g.Marshal()
			}
		case wire.TypeCreditClose:
			var m wire.CreditDone
			if err := m.Unmarshal(meta); err != nil {
				return err
			}
			if werr = x.close(k, m); werr == nil {
				reply.Type = wire.TypeCreditClosed
			}
		}
	}
	if werr != nil {
		s.log.Warn("peer credit refused", "op", "peer", "name", hello.Name, "request", t.String(), "err", werr.Message)
		reply.Type, reply.Meta = wire.TypeError, werr.Marshal()
	}
	return nil
}
