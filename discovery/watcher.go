// watcher.go owns a view of the cluster: every engine's record under the
// prefix, kept current from etcd, and the events that tell subscribers
// who joined, left, changed or restarted.
//
// Invariants:
//   - The view is a Get at revision R followed by a Watch from R+1 (with
//     the previous values), so no change between the two is missed.
//   - When the watch breaks (compacted past our revision, cancelled for
//     lack of a leader, an error) the view is listed again and the
//     difference is reported as events: subscribers never see a gap,
//     only a coarser step.
//   - A name whose epoch differs from the last epoch this watcher saw for
//     it, live or departed, is reported as Restarted with that old record
//     as Prev: whatever was cached for the old epoch is stale. To know,
//     the watcher keeps the last record of every name that left (one
//     entry per name, however often it comes and goes).
//   - A record that does not decode counts as absent (and is logged).
//   - Events reach each subscription in the order the view changed; a
//     subscription's queue is unbounded, so a slow reader never stalls
//     the watcher or the others.
//   - Close cancels the watch, waits for run, and ends every subscription;
//     no goroutine of ours outlives it.

package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orbitefs/orbitefs/engine"
)

// EventKind says how an engine's record changed.
type EventKind uint8

// The kinds of change.
const (
	Joined    EventKind = iota + 1 // a name not seen before
	Left                           // the record is gone (closed, or its lease expired)
	Updated                        // same epoch, new address or regions
	Restarted                      // a new epoch for a known name: Prev's epoch is stale
)

func (k EventKind) String() string {
	switch k {
	case Joined:
		return "joined"
	case Left:
		return "left"
	case Updated:
		return "updated"
	case Restarted:
		return "restarted"
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is one change of the view.
type Event struct {
	Kind EventKind
	// Record is the engine's record now; for Left, the record that left.
	Record Record
	// Prev is the record replaced (Updated, Restarted); for Restarted it
	// may be one that left earlier. Nil for Joined and Left.
	Prev *Record
	// Revision is the etcd revision the view reached with this change.
	Revision int64
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s epoch %s", e.Kind, e.Record.Name, e.Record.Epoch)
	if e.Prev != nil && e.Prev.Epoch != e.Record.Epoch {
		s += " (was " + e.Prev.Epoch.String() + ")"
	}
	return s
}

// Watcher keeps a view of the engines registered under a prefix.
type Watcher struct {
	cli    *clientv3.Client
	key    string // the engines' prefix
	max    time.Duration
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	// beforeWatch, if set (tests), runs between a list and the watch
	// that follows it: the point where a compaction forces a relist.
	beforeWatch func(rev int64)

	mu struct {
		sync.Mutex
		view    map[string]Record
		gone    map[string]Record // the last record of each name that left
		rev     int64
		lists   int // how many times the view was listed (1 at start)
		subs    map[*Subscription]struct{}
		closed  bool
		badSeen map[string]int64 // name -> mod revision of an undecodable record, logged once
	}
}

// NewWatcher lists the engines under cfg.Prefix and keeps the view
// current until Close. It fails if the first list fails.
func NewWatcher(ctx context.Context, cli *clientv3.Client, cfg Config) (*Watcher, error) {
	return newWatcher(ctx, cli, cfg, nil)
}

func newWatcher(ctx context.Context, cli *clientv3.Client, cfg Config, beforeWatch func(int64)) (*Watcher, error) {
	if err := checkPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	w := &Watcher{
		cli:  cli,
		key:  enginesKey(cfg.Prefix),
		max:  cfg.RetryMax,
		log:  logger(cfg.Logger).With("op", "discovery", "watch", enginesKey(cfg.Prefix)),
		done: make(chan struct{}),

		beforeWatch: beforeWatch,
	}
	if w.max <= 0 {
		w.max = max(cfg.LeaseTTL, time.Second)
	}
	w.mu.view = map[string]Record{}
	w.mu.gone = map[string]Record{}
	w.mu.subs = map[*Subscription]struct{}{}
	w.mu.badSeen = map[string]int64{}
	rev, err := w.list(ctx)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.run(runCtx, rev)
	return w, nil
}

// Records returns the view, sorted by name.
func (w *Watcher) Records() []Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.recordsLocked()
}

func (w *Watcher) recordsLocked() []Record {
	out := make([]Record, 0, len(w.mu.view))
	for _, r := range w.mu.view {
		out = append(out, r.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the live record of name.
func (w *Watcher) Lookup(name string) (Record, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.mu.view[name]
	return r.clone(), ok
}

// Revision is the etcd revision the view reflects.
func (w *Watcher) Revision() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.rev
}

// Lists is how many times the view was listed: 1, plus one per broken
// watch (such as a compaction past the view's revision).
func (w *Watcher) Lists() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.lists
}

// Subscribe returns the view now and a subscription to every change
// after it. Close the subscription when done with it.
func (w *Watcher) Subscribe() (*Subscription, []Record) {
	s := &Subscription{w: w, ready: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.closed {
		s.closed = true
	} else {
		w.mu.subs[s] = struct{}{}
	}
	return s, w.recordsLocked()
}

// Close stops watching and ends every subscription (their queued events
// can still be read). Calling it again does nothing.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		w.cancel()
		<-w.done
		w.mu.Lock()
		w.mu.closed = true
		subs := w.mu.subs
		w.mu.subs = nil
		w.mu.Unlock()
		for s := range subs {
			s.end()
		}
	})
	return nil
}

// run watches from rev+1, and lists again whenever the watch breaks.
func (w *Watcher) run(ctx context.Context, rev int64) {
	defer close(w.done)
	for {
		w.watch(ctx, rev)
		if ctx.Err() != nil {
			return
		}
		b := backoff{max: w.max}
		for {
			var err error
			if rev, err = w.list(ctx); err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("list failed; retrying", "err", err)
			if !b.wait(ctx) {
				return
			}
		}
	}
}

// watch applies the changes after rev until the watch breaks or ctx ends.
func (w *Watcher) watch(ctx context.Context, rev int64) {
	// Its own context: cancelling it releases the watch in the client.
	// RequireLeader: a member cut off from its leader cancels the watch
	// instead of serving a view that silently stopped.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	if w.beforeWatch != nil {
		w.beforeWatch(rev)
	}
	wch := w.cli.Watch(wctx, w.key, clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				w.log.Info("watch compacted; listing again", "rev", rev, "compact_rev", resp.CompactRevision)
			} else {
				w.log.Warn("watch broke; listing again", "rev", rev, "err", err)
			}
			return
		}
		if resp.IsProgressNotify() {
			w.progress(resp.Header.Revision)
			continue
		}
		w.apply(resp.Events, resp.Header.Revision)
		rev = resp.Header.Revision
	}
}

// list replaces the view with a Get of the prefix and reports the
// difference; it returns the revision of the Get.
func (w *Watcher) list(ctx context.Context) (int64, error) {
	resp, err := w.cli.Get(ctx, w.key, clientv3.WithPrefix())
	if err != nil {
		return 0, &engine.Error{Op: "list", Name: w.key, Kind: engine.KindUnavailable, Err: err}
	}
	rev := resp.Header.Revision
	next := map[string]Record{}
	for _, kv := range resp.Kvs {
		if name, rec, ok := w.decode(kv); ok {
			next[name] = rec
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.lists++
	var evs []Event
	for _, name := range sortedNames(w.mu.view) {
		if _, ok := next[name]; !ok {
			evs = append(evs, w.leaveLocked(name, rev))
		}
	}
	for _, name := range sortedNames(next) {
		if ev, ok := w.upsertLocked(next[name], rev); ok {
			evs = append(evs, ev)
		}
	}
	w.mu.rev = rev
	w.publishLocked(evs)
	return rev, nil
}

// apply folds one watch response into the view.
func (w *Watcher) apply(events []*clientv3.Event, rev int64) {
	type change struct {
		name string
		rec  Record
		put  bool
	}
	changes := make([]change, 0, len(events))
	for _, ev := range events {
		name, ok := w.nameOf(ev.Kv.Key)
		if !ok {
			continue
		}
		if ev.Type == mvccpb.PUT {
			if _, rec, ok := w.decode(ev.Kv); ok {
				changes = append(changes, change{name, rec, true})
				continue
			}
		}
		changes = append(changes, change{name: name})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var evs []Event
	for _, c := range changes {
		if c.put {
			if ev, ok := w.upsertLocked(c.rec, rev); ok {
				evs = append(evs, ev)
			}
		} else if _, ok := w.mu.view[c.name]; ok {
			evs = append(evs, w.leaveLocked(c.name, rev))
		}
	}
	w.mu.rev = rev
	w.publishLocked(evs)
}

func (w *Watcher) progress(rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.rev = max(w.mu.rev, rev)
}

// upsertLocked sets rec in the view; ok is false when nothing changed.
// REQUIRES: w.mu.
func (w *Watcher) upsertLocked(rec Record, rev int64) (Event, bool) {
	old, live := w.mu.view[rec.Name]
	if !live {
		old, live = w.mu.gone[rec.Name]
		delete(w.mu.gone, rec.Name)
		if live && old.Epoch == rec.Epoch {
			live = false // the same incarnation back (re-registered): a join
		}
	} else if old.equal(rec) {
		return Event{}, false
	}
	w.mu.view[rec.Name] = rec
	ev := Event{Kind: Joined, Record: rec.clone(), Revision: rev}
	if live {
		prev := old.clone()
		ev.Prev = &prev
		ev.Kind = Updated
		if old.Epoch != rec.Epoch {
			ev.Kind = Restarted
		}
	}
	return ev, true
}

// leaveLocked removes name from the view. REQUIRES: w.mu.
func (w *Watcher) leaveLocked(name string, rev int64) Event {
	rec := w.mu.view[name]
	delete(w.mu.view, name)
	w.mu.gone[name] = rec
	return Event{Kind: Left, Record: rec.clone(), Revision: rev}
}

// publishLocked queues evs on every subscription and logs them.
// REQUIRES: w.mu.
func (w *Watcher) publishLocked(evs []Event) {
	for _, ev := range evs {
		w.log.Info("engine "+ev.Kind.String(), "name", ev.Record.Name, "epoch", ev.Record.Epoch.String(), "addr", ev.Record.Addr, "rev", ev.Revision)
	}
	if len(evs) == 0 {
		return
	}
	for s := range w.mu.subs {
		s.push(evs)
	}
}

// nameOf returns the engine name of a key under the prefix. A key that
// is no engine's (empty or nested name) never decodes, since a record's
// name must equal it and names hold no '/'.
func (w *Watcher) nameOf(key []byte) (string, bool) {
	return strings.CutPrefix(string(key), w.key)
}

// decode reads a stored record, logging (once per version of the key)
// one that does not decode.
func (w *Watcher) decode(kv *mvccpb.KeyValue) (string, Record, bool) {
	name, ok := w.nameOf(kv.Key)
	if !ok {
		return "", Record{}, false
	}
	rec, err := decodeRecord(name, kv.Value)
	if err != nil {
		w.mu.Lock()
		if w.mu.badSeen[name] != kv.ModRevision {
			w.mu.badSeen[name] = kv.ModRevision
			w.log.Warn("ignoring a record that does not decode", "key", string(kv.Key), "mod_rev", kv.ModRevision, "err", err)
		}
		w.mu.Unlock()
		return "", Record{}, false
	}
	return name, rec, true
}

func sortedNames(m map[string]Record) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Subscription delivers a watcher's events in order.
type Subscription struct {
	w     *Watcher
	ready chan struct{} // a token when queue may be non-empty or closed

	mu     sync.Mutex
	queue  []Event
	closed bool
}

func (s *Subscription) push(evs []Event) {
	s.mu.Lock()
	s.queue = append(s.queue, evs...)
	s.mu.Unlock()
	s.signal()
}

func (s *Subscription) end() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

func (s *Subscription) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Next returns the next event, waiting for one. After the subscription
// or its watcher is closed and the queue is drained it returns an error
// wrapping engine.ErrClosed; ctx's error if ctx ends first.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return ev, nil
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return Event{}, &engine.Error{Op: "next", Name: "discovery subscription", Kind: engine.KindClosed}
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close stops the subscription; Next then drains what was queued.
func (s *Subscription) Close() {
	s.w.mu.Lock()
	delete(s.w.mu.subs, s)
	s.w.mu.Unlock()
	s.end()
}
