// credit.go owns receiver credits at the control plane: the documents
// written into /peers/credit/{activate,update,deactivate,connect,
// disconnect} and the JSON of /peers/credit/status (this engine as a
// sender) and /peers/credit/issuer (this engine as a receiver).
//
//	activate    {"peer": "HOST:PORT", "epoch": N, "qos_class": 0}
//	update      {"peer": "HOST:PORT", "epoch": N, "sequence": N,
//	             "freshness_ttl_ms": 0,
//	             "totals": [{"resource": "data_bytes", "total": N}, ...]}
//	deactivate  {"peer": "HOST:PORT", "epoch": N}
//	connect     {"peer": "HOST:PORT", "qos_class": 0, "timeout": "3s"}
//	disconnect  {"peer": "HOST:PORT", "timeout": "3s"}
//
// peer may also be peer://NAME, a live member of the daemon's cluster:
// its advertised address, and (when epoch is left out) its epoch.
//
// Invariants:
//   - Only privileged callers (owner.go) run them: a binding authorizes
//     the daemon's own peer traffic, for every user.
//   - A refused document changes nothing and its text goes to /error.

package control

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// CreditDialFunc opens the daemon's issuer connection to the peer at
// addr and returns it with the receiver's epoch.
type CreditDialFunc func(ctx context.Context, addr string) (engine.CreditIssuer, uint64, error)

// The credit commands, named as their files.
const (
	CreditActivate   = "activate"
	CreditUpdate     = "update"
	CreditDeactivate = "deactivate"
	CreditConnect    = "connect"
	CreditDisconnect = "disconnect"
)

// CreditCommands lists them in the order ls shows them.
var CreditCommands = []string{CreditActivate, CreditUpdate, CreditDeactivate, CreditConnect, CreditDisconnect}

type creditDoc struct {
	Peer           string        `json:"peer"`
	Epoch          *uint64       `json:"epoch"`
	QoSClass       *uint8        `json:"qos_class"`
	Sequence       *uint64       `json:"sequence"`
	FreshnessTTLMs *uint64       `json:"freshness_ttl_ms"`
	Totals         []creditTotal `json:"totals"`
	Timeout        *string       `json:"timeout"`
}

type creditTotal struct {
	Resource string  `json:"resource"`
	Total    *uint64 `json:"total"`
}

// creditKeys says which keys each command takes (peer always).
var creditKeys = map[string]struct{ epoch, qos, update, timeout bool }{
	CreditActivate:   {epoch: true, qos: true},
	CreditUpdate:     {epoch: true, update: true},
	CreditDeactivate: {epoch: true},
	CreditConnect:    {qos: true, timeout: true},
	CreditDisconnect: {timeout: true},
}

// parseCredit decodes and checks one command's document.
func parseCredit(verb string, data []byte, max int) (*creditDoc, time.Duration, error) {
	var d creditDoc
	if err := decodeStrict(data, max, &d); err != nil {
		return nil, 0, err
	}
	k := creditKeys[verb]
	member := strings.HasPrefix(d.Peer, memberPrefix)
	if member {
		if err := ValidateName(strings.TrimPrefix(d.Peer, memberPrefix)); err != nil {
			return nil, 0, invalid("peer %s: %v", quoteText(d.Peer, 300), err)
		}
	} else {
		host, port, err := net.SplitHostPort(d.Peer)
		if p, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || p == 0 {
			return nil, 0, invalid("peer %s: want the HOST:PORT its segments were opened with (tcp://HOST:PORT/REGION), or peer://NAME", quoteText(d.Peer, 300))
		}
	}
	switch {
	case k.epoch && d.Epoch == nil && !member:
		return nil, 0, invalid("%s needs epoch: the peer's epoch as its segments show it (remote.epoch in segments/NAME/info)", verb)
	case !k.epoch && d.Epoch != nil:
		return nil, 0, invalid("%s takes no epoch: the receiver's is learned when connecting", verb)
	case !k.qos && d.QoSClass != nil:
		return nil, 0, invalid("%s takes no qos_class", verb)
	case !k.update && (d.Sequence != nil || d.FreshnessTTLMs != nil || d.Totals != nil):
		return nil, 0, invalid("%s takes no sequence, freshness_ttl_ms or totals (they belong to update)", verb)
	case k.update && d.Sequence == nil:
		return nil, 0, invalid("update needs sequence: updates with a sequence not above the last applied one are ignored")
	case k.update && len(d.Totals) == 0:
		return nil, 0, invalid("update needs totals: [{\"resource\": \"data_bytes\", \"total\": N}, ...]")
	case !k.timeout && d.Timeout != nil:
		return nil, 0, invalid("%s takes no timeout", verb)
	}
	var timeout time.Duration
	if d.Timeout != nil {
		t, err := time.ParseDuration(*d.Timeout)
		if err != nil || t <= 0 {
			return nil, 0, invalid("timeout %s is not a positive duration such as 3s", quoteText(*d.Timeout, quoteRunes))
		}
		timeout = t
	}
	for i, t := range d.Totals {
		if _, err := engine.ParseCreditResource(t.Resource); err != nil {
			return nil, 0, invalid("totals[%d]: %v", i, err)
		}
		if t.Total == nil {
			return nil, 0, invalid("totals[%d]: total is missing: the cumulative grant of %s", i, t.Resource)
		}
	}
	return &d, timeout, nil
}

// CreditWriter is the writer of /peers/credit/VERB.
func (s *Service) CreditWriter(c *engine.Caller, verb string) *DocWriter {
	sc := scope{caller: c, op: "credit " + verb, name: "peers/credit/" + verb}
	return &DocWriter{doc: s.newDocument(c), commit: func(doc []byte) error { return s.Credit(c, verb, doc) },
		fail: func(err error) error { return s.fail(sc, err) }}
}

// Credit runs one credit command's document for c.
func (s *Service) Credit(c *engine.Caller, verb string, doc []byte) error {
	sc := scope{caller: c, op: "credit " + verb, name: "peers/credit/" + verb}
	if _, ok := creditKeys[verb]; !ok {
		return s.fail(sc, invalid("unknown credit command %s", quoteText(verb, quoteRunes)))
	}
	if s.closing.Load() {
		return s.fail(sc, errClosing())
	}
	if !s.privileged(c) {
		return s.fail(sc, detail(engine.KindPermission, "receiver credits bind the daemon's peer traffic; only root or the daemon's user (uid %d) may change them, not uid %d", s.euid, c.UID))
	}
	d, timeout, err := parseCredit(verb, doc, s.opts.MaxDocumentBytes)
	if err != nil {
		return s.fail(sc, err)
	}
	sc.logKey, sc.logName = "peer", d.Peer
	if err := s.resolveMember(d, creditKeys[verb].epoch); err != nil {
		return s.fail(sc, err)
	}
	if timeout == 0 {
		timeout = s.opts.CloseTimeout
	}
	var qos uint8
	if d.QoSClass != nil {
		qos = *d.QoSClass
	}
	switch verb {
	case CreditActivate:
		err = s.e.ActivateReceiverCredit(d.Peer, *d.Epoch, qos)
	case CreditDeactivate:
		err = s.e.DeactivateReceiverCredit(d.Peer, *d.Epoch)
	case CreditUpdate:
		u := engine.CreditUpdate{Peer: d.Peer, Epoch: *d.Epoch, Sequence: *d.Sequence}
		if d.FreshnessTTLMs != nil {
			u.FreshnessTTL = time.Duration(*d.FreshnessTTLMs) * time.Millisecond
		}
		for _, t := range d.Totals {
			r, _ := engine.ParseCreditResource(t.Resource) // checked by parseCredit
			u.Totals = append(u.Totals, engine.CreditTotal{Resource: r, Total: *t.Total})
		}
		err = s.e.ApplyReceiverCredit(u)
	case CreditConnect:
		err = s.connectCredit(d.Peer, qos, timeout)
	case CreditDisconnect:
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = s.e.DisconnectReceiverCredit(ctx, d.Peer)
		cancel()
	}
	if err != nil {
		return s.fail(sc, kinded(err))
	}
	s.log.Info("credit "+verb, "peer", d.Peer)
	return nil
}

// memberPrefix names a cluster member instead of an address.
const memberPrefix = "peer://"

// resolveMember turns peer://NAME into the member's address and, when
// the command takes an epoch and none was given, its epoch.
func (s *Service) resolveMember(d *creditDoc, wantEpoch bool) error {
	name, ok := strings.CutPrefix(d.Peer, memberPrefix)
	if !ok {
		return nil
	}
	if s.opts.Cluster == nil {
		return detail(engine.KindUnavailable, "peer %s: this daemon is no cluster member ([cluster] etcd_endpoints is empty); give HOST:PORT", quoteText(d.Peer, 300))
	}
	p, found := s.ClusterPeer(name)
	if !found {
		return notFound("peer %s: no live member of that name (ls /cluster/peers)", quoteText(d.Peer, 300))
	}
	d.Peer = p.Addr
	if wantEpoch && d.Epoch == nil {
		e, err := strconv.ParseUint(p.Epoch, 16, 64)
		if err != nil {
			return detail(engine.KindIO, "member %s has epoch %q, not a hex number", name, p.Epoch)
		}
		d.Epoch = &e
	}
	return nil
}

// connectCredit dials the peer's issuer and binds it.
func (s *Service) connectCredit(peer string, qos uint8, timeout time.Duration) error {
	if s.opts.DialCredit == nil {
		return detail(engine.KindUnavailable, "peers are not configured: set [peer] key_file in the daemon's config")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	is, epoch, err := s.opts.DialCredit(ctx, peer)
	if err != nil {
		return kinded(err)
	}
	if err := s.e.ConnectReceiverCredit(ctx, peer, epoch, is, qos); err != nil {
		is.Release()
		return err
	}
	return nil
}

// CreditStatus is /peers/credit/status: this engine's bindings as a
// sender.
func (s *Service) CreditStatus() []byte { return marshal(s.e.ReceiverCreditStats()) }

// CreditIssuerStatus is /peers/credit/issuer: this engine's issuer as a
// receiver (enabled false without one).
func (s *Service) CreditIssuerStatus() []byte {
	if s.opts.CreditIssuer == nil {
		return marshal(struct {
			Enabled bool `json:"enabled"`
		}{})
	}
	return marshal(s.opts.CreditIssuer())
}

// creditMetrics are the sender side's receiver credit counters in
// /metrics (the issuer's are in /stats and /peers/credit/issuer).
var creditMetrics = []metric{
	{"receiver_credit_sessions", "gauge", "Receiver credit bindings held (manual and automatic).", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Sessions) }},
	{"receiver_credit_waiting", "gauge", "Batch workers whose head waits for receiver credit.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Waiting) }},
	{"receiver_credit_missing_total", "counter", "Submissions refused for want of a credit binding.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Missing) }},
	{"receiver_credit_waits_total", "counter", "Times a head started waiting for receiver credit.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Waits) }},
	{"receiver_credit_reserved_total", "counter", "Owners that reserved receiver credit.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Reserved) }},
	{"receiver_credit_committed_total", "counter", "Owners whose credit was committed at handoff.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Committed) }},
	{"receiver_credit_refunded_total", "counter", "Owners refunded before handoff.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Refunded) }},
	{"receiver_credit_syncs_total", "counter", "Credit syncs with a receiver's issuer.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.Syncs) }},
	{"receiver_credit_sync_errors_total", "counter", "Credit syncs that failed.", func(s *engine.Stats) float64 { return float64(s.ReceiverCredit.SyncErrors) }},
}
