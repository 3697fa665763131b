// notify.go owns completion notifications on both sides of the control
// plane: a submission's "notify" destinations (parsed, bounded, sent only
// after every byte of the submission succeeded, each destination's
// outcome kept for status), and the receiver's inbox read one message at
// a time from /peers/notifications.
//
//	{"op": "write", "target": "kvseg", "requests": [...],
//	 "notify": [{"peer": "tcp://10.0.0.6:7070", "message": "layer 3 ready"},
//	            {"peer": "peer://decode-3", "message": "layer 3 ready"}]}
//
// A destination is a peer listener's address, or an engine of the
// cluster by name, resolved through this daemon's view of the cluster
// when the notification is sent (not at submit): a name the view no
// longer lists is not_sent, and so is an engine at that address that is
// not the incarnation the view lists.
//
// Invariants:
//   - Nothing is sent before the submission's final report says every
//     request succeeded; a failed or cancelled submission sends nothing
//     and each destination says not_sent.
//   - Each destination is decided once: pending, then delivered, busy,
//     unknown or not_sent. While pending, a destination definitely not
//     delivered (busy, or not_sent with nothing posted) is sent again,
//     after NotifyRetryInterval doubling up to NotifyRetryMaxInterval,
//     until the submission's deadline, the batch's free or shutdown; an
//     unknown one never is (the receiver may hold it), nor one the
//     receiver refused as invalid (ErrNotifyRefused).
//   - Every attempt is bounded by the submission's deadline: the wait
//     for a dial or an answer ends there (a posted one then is unknown).
//   - The notifications waiting for their submission or for their answer
//     stay within MaxPendingNotifications and MaxPendingNotificationBytes;
//     a submission past either is refused before anything is appended.
//
// Lock order: a Batch's mu, then Service.notes.

package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// NotifyTarget is one destination of a submission's notification.
type NotifyTarget struct {
	// Peer is "tcp://HOST:PORT", the peer listener of the receiving
	// daemon, or "peer://NAME", an engine of the cluster by name.
	Peer    string `json:"peer"`
	Message string `json:"message"`
}

// MaxNotifyTargets bounds the destinations of one submission.
const MaxNotifyTargets = 16

// The [peer] defaults of the notification bounds.
const (
	defaultMaxNotificationBytes        = 64 << 10
	defaultMaxPendingNotifications     = 1024
	defaultMaxPendingNotificationBytes = 1 << 20
)

// The outcomes of one destination, as status shows them.
const (
	NotifyPending   = "pending"   // the submission has not finished, or the answer has not come
	NotifyDelivered = "delivered" // the receiver acknowledged: it is in its inbox
	NotifyBusy      = "busy"      // the receiver's inbox was full: definitely not delivered
	NotifyUnknown   = "unknown"   // sent, no answer: the receiver may hold it; never resent
	NotifyNotSent   = "not_sent"  // nothing reached the receiver (reason says why)
)

// NotifyDest is where one notification goes: the address to dial and,
// for a destination named peer://NAME, the engine the cluster lists
// there (Epoch as 16 hex digits), which the sender checks before it
// sends anything.
type NotifyDest struct {
	Addr        string
	Name, Epoch string
}

// NotifyFunc sends one notification to d and returns one of the outcomes
// above (not pending) and, unless delivered, why. It ends by ctx's
// deadline. A not_sent whose error matches ErrNotifyRefused (see
// Refused) is never sent again; busy and any other not_sent may be.
type NotifyFunc func(ctx context.Context, d NotifyDest, submission, message string) (string, error)

// ErrNotifyRefused matches a not_sent the receiver read and refused as
// invalid: sending it again would be refused again.
var ErrNotifyRefused = errors.New("notification refused by the receiver")

// Refused marks err (a not_sent's) as ErrNotifyRefused, its text kept.
func Refused(err error) error { return refusedError{err} }

type refusedError struct{ error }

func (e refusedError) Unwrap() error      { return e.error }
func (refusedError) Is(target error) bool { return target == ErrNotifyRefused }

// The defaults of the retry waits ([peer] notify_retry_interval and
// notify_retry_max_interval).
const (
	defaultNotifyRetryInterval    = 10 * time.Millisecond
	defaultNotifyRetryMaxInterval = time.Second
)

// peerDest checks a destination: tcp://HOST:PORT with a numeric port
// (addr), or peer://NAME (name).
func peerDest(s string) (addr, name string, err error) {
	if n, ok := strings.CutPrefix(s, "peer://"); ok {
		if err := peerName(n); err != nil {
			return "", "", fmt.Errorf("peer %s: %v", quoteText(s, quoteRunes), err)
		}
		return "", n, nil
	}
	rest, ok := strings.CutPrefix(s, "tcp://")
	if !ok {
		return "", "", fmt.Errorf("peer %s: want tcp://HOST:PORT or peer://NAME", quoteText(s, quoteRunes))
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || strings.ContainsAny(rest, "/?#") {
		return "", "", fmt.Errorf("peer %s: want tcp://HOST:PORT", quoteText(s, quoteRunes))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("peer %s: port %s is not a number in [1, 65535]", quoteText(s, quoteRunes), quoteText(port, quoteRunes))
	}
	return rest, "", nil
}

// validateNotify checks the destinations' shape: at most
// MaxNotifyTargets, each a tcp:// address or a peer:// name, none twice.
func validateNotify(ts []NotifyTarget) error {
	if len(ts) > MaxNotifyTargets {
		return fmt.Errorf("notify has %d destinations, more than %d", len(ts), MaxNotifyTargets)
	}
	seen := map[string]int{}
	for i, t := range ts {
		addr, name, err := peerDest(t.Peer)
		if err != nil {
			return fmt.Errorf("notify[%d]: %v", i, err)
		}
		a := "tcp://" + addr
		if name != "" {
			a = "peer://" + name
		}
		if j, dup := seen[a]; dup {
			return fmt.Errorf("notify[%d]: peer %s is also notify[%d]: give each destination once", i, quoteText(t.Peer, quoteRunes), j)
		}
		seen[a] = i
	}
	return nil
}

// notice is one submission's notification: its destinations and their
// outcomes. Guarded by its Batch's mu.
type notice struct {
	submission string    // "BATCH/INDEX", what the receiver sees
	decided    bool      // the final report was seen: sent, or marked not_sent
	deadline   time.Time // the submission's: it ends every attempt
	dests      []noticeDest
	bytes      int64 // message bytes it holds of the pending budget
}

type noticeDest struct {
	peer, addr, message string
	name                string // peer://NAME: resolved when sent
	state, reason       string
	attempts            int  // sends tried
	released            bool // its share of the pending budget is returned
}

// NotifyJSON is one destination's outcome in a submission's status.
type NotifyJSON struct {
	Peer     string `json:"peer"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	Reason   string `json:"reason,omitempty"`
}

// newNotice checks a parsed submission's notify against the message
// limit and the pending budget and reserves its share; nil when it has
// none.
func (s *Service) newNotice(sub *Submission) (*notice, error) {
	if len(sub.Notify) == 0 {
		return nil, nil
	}
	if s.opts.Notify == nil {
		return nil, detail(engine.KindUnavailable, "notify: this daemon sends no notifications ([peer] key_file is empty)")
	}
	n := &notice{}
	for i, t := range sub.Notify {
		if len(t.Message) > s.opts.MaxNotificationBytes {
			return nil, tooLarge("notify[%d]: a message of %d bytes, over peer.max_notification_bytes (%d)", i, len(t.Message), s.opts.MaxNotificationBytes)
		}
		addr, name, _ := peerDest(t.Peer) // Validate checked it
		if name != "" && s.opts.Cluster == nil {
			return nil, detail(engine.KindUnavailable, "notify[%d]: peer %s: a name resolves through the cluster, and this daemon is no member: set [cluster] etcd_endpoints, or give tcp://HOST:PORT", i, quoteText(t.Peer, quoteRunes))
		}
		n.dests = append(n.dests, noticeDest{peer: t.Peer, addr: addr, name: name, message: t.Message, state: NotifyPending})
		n.bytes += int64(len(t.Message))
	}
	s.notes.Lock()
	defer s.notes.Unlock()
	count, bytes := s.notes.count+len(n.dests), s.notes.bytes+n.bytes
	switch {
	case count > s.opts.MaxPendingNotifications:
		return nil, detail(engine.KindExhausted, "notify: %d notifications pending, %d more would pass engine.max_pending_notifications (%d)",
			s.notes.count, len(n.dests), s.opts.MaxPendingNotifications)
	case bytes > s.opts.MaxPendingNotificationBytes:
		return nil, detail(engine.KindExhausted, "notify: %d message bytes pending, %d more would pass engine.max_pending_notification_bytes (%d)",
			s.notes.bytes, n.bytes, s.opts.MaxPendingNotificationBytes)
	}
	s.notes.count, s.notes.bytes = count, bytes
	return n, nil
}

// release returns d's share of the pending budget (once).
func (s *Service) releaseDest(d *noticeDest) {
	if d.released {
		return
	}
	d.released = true
	s.notes.Lock()
	s.notes.count--
	s.notes.bytes -= int64(len(d.message))
	s.notes.Unlock()
}

// dropNotice returns a notice's whole share: its submission was refused.
func (s *Service) dropNotice(n *notice) {
	for i := range n.dests {
		s.releaseDest(&n.dests[i])
	}
}

// watchGroups makes bt report its finished groups to groupDone; once.
func (s *Service) watchGroups(bt *Batch) {
	bt.mu.Lock()
	first := bt.mu.notices == nil
	if first {
		bt.mu.notices = map[int]*notice{}
	}
	bt.mu.Unlock()
	if first {
		bt.b.OnGroupDone(func(r engine.Report) { s.groupDone(bt, r) })
	}
}

// attach records n for the group whose first task is first, then
// decides it at once if the group already finished. The engine publishes
// a group's report as done before it runs the hook, so reading the
// reports after n is recorded misses no ending: a hook that ran before
// found no notice, and then this read sees the group done (groupDone
// decides once either way).
func (s *Service) attach(bt *Batch, first int, n *notice) {
	idx := -1
	for i, r := range bt.b.Submissions() {
		if r.Tasks.First == first {
			idx = i
			break
		}
	}
	n.submission = fmt.Sprintf("%d/%d", bt.ID, idx)
	if s.beforeAttach != nil {
		s.beforeAttach(first)
	}
	bt.mu.Lock()
	bt.mu.notices[first] = n
	bt.mu.Unlock()
	if reps := bt.b.Submissions(); idx >= 0 && idx < len(reps) && reps[idx].Done {
		s.groupDone(bt, reps[idx])
	}
}

// groupDone decides a finished group's notice: send it if every request
// succeeded, else mark each destination not_sent. It must not block (an
// engine hook): sending runs on its own goroutines.
func (s *Service) groupDone(bt *Batch, r engine.Report) {
	if !r.Done {
		return
	}
	if s.groupDoneSeen != nil {
		s.groupDoneSeen(r.Tasks.First)
	}
	bt.mu.Lock()
	n := bt.mu.notices[r.Tasks.First]
	if n == nil || n.decided {
		bt.mu.Unlock()
		return
	}
	n.decided = true
	if r.Err != nil {
		for i := range n.dests {
			d := &n.dests[i]
			d.state, d.reason = NotifyNotSent, "not sent: submission failed: "+r.Err.Error()
			s.releaseDest(d)
		}
		bt.mu.Unlock()
		return
	}
	bt.mu.Unlock()
	for i := range n.dests {
		go s.send(bt, n, i)
	}
}

// send delivers one destination, sending it again while it is
// definitely not delivered and the submission's deadline allows, and
// records its outcome. Once the batch is freed or the daemon stops, no
// further attempt begins.
func (s *Service) send(bt *Batch, n *notice, i int) {
	bt.mu.Lock()
	d := n.dests[i]
	bt.mu.Unlock()
	ctx, cancel := context.WithDeadline(s.stopCtx, n.deadline)
	defer cancel()
	wait := s.opts.NotifyRetryInterval
	// ended says why no attempt may follow now, if none may.
	// REQUIRES: bt.mu.
	ended := func(attempts int, next time.Duration) string {
		switch {
		case bt.mu.freed:
			return "; not sent again: the batch was freed"
		case s.stopCtx.Err() != nil:
			return "; not sent again: the daemon is shutting down"
		case !time.Now().Add(next).Before(n.deadline):
			return fmt.Sprintf("; not sent again: the submission's deadline comes first (after %d attempts)", attempts)
		}
		return ""
	}
	var state, reason string
	for attempt := 1; ; attempt++ {
		var err error
		state, err = s.notifyOne(ctx, d, n.submission)
		reason = ""
		if err != nil {
			reason = err.Error()
		}
		bt.mu.Lock()
		dd := &n.dests[i]
		dd.attempts = attempt
		why := ""
		if retryable(state, err) {
			why = ended(attempt, wait)
		}
		if !retryable(state, err) || why != "" {
			reason += why
			dd.state, dd.reason = state, reason
			s.releaseDest(dd)
			bt.mu.Unlock()
			break
		}
		dd.reason = fmt.Sprintf("attempt %d: %s; trying again in %s", attempt, reason, wait)
		bt.mu.Unlock()
		if s.debug() {
			s.log.Debug("notification not delivered; trying again", "op", "notify", "batch", bt.ID, "submission", n.submission, "peer", d.peer, "state", state, "attempt", attempt, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, s.opts.NotifyRetryMaxInterval)
		bt.mu.Lock()
		if why = ended(attempt, 0); why != "" {
			reason += why
			dd.state, dd.reason = state, reason
			s.releaseDest(dd)
			bt.mu.Unlock()
			break
		}
		bt.mu.Unlock()
	}
	if state != NotifyDelivered {
		s.log.Warn("notification not delivered", "op", "notify", "batch", bt.ID, "submission", n.submission, "peer", d.peer, "state", state, "reason", reason)
		return
	}
	if s.debug() {
		s.log.Debug("notification delivered", "op", "notify", "batch", bt.ID, "submission", n.submission, "peer", d.peer)
	}
}

// retryable says whether an outcome is definitely not delivered and may
// be sent again: busy, or not_sent that the receiver did not refuse as
// invalid. Never delivered, and never unknown (the receiver may hold it).
func retryable(state string, err error) bool {
	return state == NotifyBusy || (state == NotifyNotSent && !errors.Is(err, ErrNotifyRefused))
}

// notifyOne sends d, resolving a peer://NAME destination through the
// cluster's view first: a name the view does not list is not_sent.
func (s *Service) notifyOne(ctx context.Context, d noticeDest, submission string) (string, error) {
	to := NotifyDest{Addr: d.addr}
	if d.name != "" {
		p, ok := s.ClusterPeer(d.name)
		if !ok {
			return NotifyNotSent, notFound("not sent: peer://%s: no engine of that name in the cluster: it left, or never joined (ls /cluster/peers)", d.name)
		}
		to = NotifyDest{Addr: p.Addr, Name: p.Name, Epoch: p.Epoch}
	}
	return s.opts.Notify(ctx, to, submission, d.message)
}

// notifyDeadline is a submission's deadline as the engine computes it
// (timeout from now, default_timeout when unset, shortened by its
// deadline), read just before the engine's own: never later than it.
func (s *Service) notifyDeadline(o engine.SubmitOptions) time.Time {
	t := o.Timeout
	if t <= 0 {
		t = s.e.Config().DefaultTimeout.D()
	}
	d := time.Now().Add(t)
	if !o.Deadline.IsZero() && o.Deadline.Before(d) {
		d = o.Deadline
	}
	return d
}

// notices copies each submission's destination outcomes, by first task.
func (bt *Batch) notices() map[int][]NotifyJSON {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if len(bt.mu.notices) == 0 {
		return nil
	}
	out := make(map[int][]NotifyJSON, len(bt.mu.notices))
	for first, n := range bt.mu.notices {
		js := make([]NotifyJSON, len(n.dests))
		for i, d := range n.dests {
			js[i] = NotifyJSON{Peer: d.peer, State: d.state, Attempts: d.attempts, Reason: d.reason}
		}
		out[first] = js
	}
	return out
}

// NextNotification waits for the next notification this daemon received
// and returns it as one JSON line. An interrupted caller gets an error
// wrapping context.Canceled (EINTR) and takes nothing from the inbox.
func (s *Service) NextNotification(ctx context.Context, c *engine.Caller) ([]byte, error) {
	sc := scope{caller: c, op: "notifications", name: "peers/notifications"}
	if s.opts.NextNotification == nil {
		return nil, s.fail(sc,
			detail(engine.KindUnavailable, "no notifications: this daemon has no peer listener ([peer] listen is empty)"))
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.stopCtx, cancel)
	defer stop()
	b, err := s.opts.NextNotification(wctx)
	switch {
	case err == nil:
		return b, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("peers/notifications: interrupted: %w", ctx.Err())
	case s.stopCtx.Err() != nil:
		return nil, s.fail(sc, errClosing())
	}
	return nil, s.fail(sc, err)
}
