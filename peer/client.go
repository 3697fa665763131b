// client.go owns the dialing side: a Conn to one peer, its control
// connection, its lanes, and READ and WRITE of the peer's exported
// regions, striped over the lanes.
//
// Invariants:
//   - At most Config.Lanes bulk lanes are open, plus one for small
//     requests (pool.go), each with a few requests in flight (lane.go);
//     a lane that failed is never used again, and an idle lane is
//     checked (stillOpen, and a ping after KeepAlive of idleness) before
//     it carries a request.
//   - A lane or a keep-alive that finds the peer with another epoch than
//     at Dial fails the whole Conn (errRestarted): its lanes and
//     descriptors are dropped, and every later request fails with
//     EffectNone without being sent.
//   - A failed slice stops the dispatch of later slices; slices already
//     running are joined before the request returns, so a returned
//     request has nothing left in flight.
//   - Nothing is ever retried or replayed here.

package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

const (
	// StripeMin is the smallest request striped over several lanes.
	StripeMin = 2 << 20
	// MinSlice is the smallest slice of a striped request.
	MinSlice = 1 << 20
	// SliceTarget bounds the slices of a large request even where the
	// peer accepts larger frames: a lane pipelines several, so throughput
	// does not need more, and a frame is also the unit that each side
	// copies without yielding its CPU (a memmove is not preempted), which
	// smaller requests on the same peer wait behind.
	SliceTarget = 4 << 20
	// DefaultMaxSlice bounds one frame's payload unless configured.
	DefaultMaxSlice = 64 << 20
)

// Config configures a client.
type Config struct {
	// noCaps: the peer is older than the regions query's capabilities
	// and refuses a query that names them (ipc.go); set by Dial.
	noCaps bool

	Name  string // this engine's name, sent in the hello
	Epoch uint64 // this engine's epoch; 0: a random one
	Key   []byte // the shared secret
	// Lanes is the number of data connections: 1 is tcp, more is
	// hp_tcp (requests of StripeMin bytes or more are striped).
	Lanes       int
	DialTimeout time.Duration
	// IOTimeout bounds a handshake, and a stall of a round trip once
	// begun: no byte of a slice or its reply moving for that long
	// (progress.go). A slow link that keeps moving is not a stall.
	IOTimeout time.Duration
	// KeepAlive is the control connection's ping interval, and how long
	// a lane may sit idle before it is pinged before use; 0 disables both.
	KeepAlive time.Duration
	// Tracker, when set, lists the Conn from Dial until Close (stats.go).
	Tracker *Tracker
	// PayloadChecksum adds a CRC32C of every payload (both directions).
	PayloadChecksum bool
	// Protection is the frame protection every connection to the peer
	// runs (protect.go); the peer must run the same.
	Protection wire.Protection
	// MaxSlice bounds one frame's payload; 0 is DefaultMaxSlice. A
	// server that accepts less (it says so at the handshake) lowers it.
	MaxSlice uint64
	Logger   *slog.Logger
	// Host identifies this machine (HostID when empty); a server on the
	// same host then sends the CUDA IPC handles of its device regions.
	Host string
	// Gate bounds the process's bulk payload copies (gate.go); nil: one
	// of the Conn's own. A process's Conns and Server should share one.
	Gate *Gate
}

// Conn is an authenticated connection to one peer. Safe for concurrent use.
type Conn struct {
	addr      string
	cfg       Config
	log       *slog.Logger
	peerName  string
	peerEpoch uint64
	session   uint64

	ctrl *lane // pipelined: control requests and notifications share it

	lanes  *pool
	nextID atomic.Uint64

	cnt     counters // shared by the control connection and the lanes
	since   time.Time
	trackID uint64

	mu struct {
		sync.Mutex
		regions map[string]wire.Descriptor
		err     error // why the Conn is unusable; nil while it is
	}
	stop chan struct{}
	wg   sync.WaitGroup

	// sliceDone, when set (tests), runs as a slice of a request has its
	// reply (or failed to take a lane: l is nil), before the request
	// records the outcome.
	sliceDone func(idx uint32, l *lane, err error)
}

// Dial connects and authenticates to the peer at addr, opening its
// control connection and fetching its region descriptors. Lanes open on
// first use.
func Dial(ctx context.Context, addr string, cfg Config) (*Conn, error) {
	if cfg.Lanes < 1 {
		cfg.Lanes = 1
	}
	if cfg.MaxSlice == 0 {
		cfg.MaxSlice = DefaultMaxSlice
	}
	if cfg.MaxSlice < MinSlice {
		return nil, &Error{Op: "dial", Peer: addr, Kind: engine.KindInvalid, Err: fmt.Errorf("max slice %d under the %d minimum", cfg.MaxSlice, MinSlice)}
	}
	if cfg.Epoch == 0 {
		cfg.Epoch = newEpoch()
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = 30 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = cfg.IOTimeout
	}
	if cfg.Host == "" {
		cfg.Host = HostID()
	}
	if cfg.Gate == nil {
		cfg.Gate = NewGate(DefaultGateLinger)
	}
	c := &Conn{addr: addr, cfg: cfg, log: cfg.Logger, lanes: newPool(cfg.Lanes), stop: make(chan struct{}), since: time.Now()}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	l, ch, w, err := dialLane(ctx, addr, &c.cfg, wire.Hello{Name: cfg.Name, Epoch: cfg.Epoch, Role: wire.RoleControl}, 0)
	var pe *errProtection
	if errors.As(err, &pe) {
		c.log.Warn("peer refused", "op", "peer", "peer", addr, "reason", err)
	}
	if err != nil {
		return nil, &Error{Op: "dial", Peer: addr, Kind: dialKind(err), Err: err}
	}
	if w.MaxPayload < MinSlice {
		l.close()
		return nil, &Error{Op: "dial", Peer: addr, Kind: engine.KindInvalid,
			Err: fmt.Errorf("the peer %q accepts frames of %d bytes, under the %d minimum", ch.Name, w.MaxPayload, MinSlice)}
	}
	// Slices fit the smaller of both limits, so a request is never cut
	// into frames the peer would refuse.
	c.cfg.MaxSlice = min(c.cfg.MaxSlice, w.MaxPayload)
	l.cnt = &c.cnt
	c.ctrl, c.peerName, c.peerEpoch, c.session = l, ch.Name, ch.Epoch, w.Session
	if err := c.Refresh(ctx); err != nil {
		l.close()
		if !cfg.noCaps && olderServer(err) {
			// It closed the connection; dial it as an older client
			// would: no capabilities, so no CUDA IPC handles (TCP).
			c.log.Info("peer speaks no regions query capabilities; dialing again without them (no cuda ipc)", "op", "peer", "peer", addr, "name", ch.Name)
			cfg.noCaps = true
			return Dial(ctx, addr, cfg)
		}
		return nil, err
	}
	if cfg.KeepAlive > 0 {
		c.wg.Add(1)
		go c.keepAlive()
	}
	cfg.Tracker.add(c)
	return c, nil
}

func dialKind(err error) engine.Kind {
	if k := kindOf(err); k != engine.KindIO {
		return k
	}
	return engine.KindUnavailable
}

// PeerName and PeerEpoch are the peer's identity as it proved it at Dial.
func (c *Conn) PeerName() string  { return c.peerName }
func (c *Conn) PeerEpoch() uint64 { return c.peerEpoch }

// Err is why the Conn is no longer usable, or nil.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

// fail makes the Conn unusable for reason (the first reason sticks) and
// closes its idle lanes and control connection; lanes in use are closed
// when they come back.
func (c *Conn) fail(reason error) {
	c.mu.Lock()
	first := c.mu.err == nil
	if first {
		c.mu.err = reason
		c.mu.regions = nil
	}
	c.mu.Unlock()
	if !first {
		return
	}
	if !errors.Is(reason, errClosed) {
		c.log.Warn("peer connection failed", "op", "peer", "peer", c.addr, "name", c.peerName, "err", reason)
	}
	close(c.stop)
	c.ctrl.kill(reason) // fails a ping or notification in flight
	c.lanes.closeAll()
}

// Close closes every connection to the peer. Requests in flight fail;
// a WRITE among them has an unknown effect.
func (c *Conn) Close() error {
	c.cfg.Tracker.remove(c)
	c.fail(errClosed)
	c.wg.Wait()
	return nil
}

// Regions returns the peer's exported regions, in name order, as of the
// last Refresh.
func (c *Conn) Regions() []wire.Descriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]wire.Descriptor, 0, len(c.mu.regions))
	for _, d := range c.mu.regions {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Refresh fetches the region descriptors again.
func (c *Conn) Refresh(ctx context.Context) error {
	var rs wire.Regions
	// CapIPCMap: this client announces its CUDA IPC mappings (ipc.go).
	q := wire.RegionsQuery{Host: c.cfg.Host, Caps: wire.CapIPCMap}
	if c.cfg.noCaps {
		q.Caps = 0
	}
	if err := c.controlFrame(ctx, "regions", &wire.Frame{Type: wire.TypeRegions, Meta: q.Marshal()}, wire.TypeRegionsOK, &rs); err != nil {
		return err
	}
	m := make(map[string]wire.Descriptor, len(rs.List))
	for _, d := range rs.List {
		m[d.Name] = d
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return &Error{Op: "regions", Peer: c.addr, Kind: kindOf(c.mu.err), Err: c.mu.err}
	}
	c.mu.regions = m
	return nil
}

// control runs one request on the control connection.
func (c *Conn) control(ctx context.Context, op string, t, want wire.Type, m interface{ Unmarshal([]byte) error }) error {
	return c.controlFrame(ctx, op, &wire.Frame{Type: t}, want, m)
}

// controlFrame runs request f (its metadata set, its id assigned here)
// on the control connection.
func (c *Conn) controlFrame(ctx context.Context, op string, f *wire.Frame, want wire.Type, m interface{ Unmarshal([]byte) error }) error {
	if err := c.Err(); err != nil {
		return &Error{Op: op, Peer: c.addr, Kind: kindOf(err), Err: err}
	}
	f.ID = c.nextID.Add(1)
	_, meta, err := c.ctrl.roundTrip(ctx, f, want, nil)
	if err == nil {
		err = m.Unmarshal(meta)
	}
	if err != nil {
		var r *remoteError
		if !errors.As(err, &r) {
			c.fail(fmt.Errorf("control connection: %s: %w", op, err))
		}
		return &Error{Op: op, Peer: c.addr, Kind: kindOf(err), Err: err}
	}
	return nil
}

// keepAlive pings on the control connection every KeepAlive; a missing
// pong or a new epoch fails the Conn.
func (c *Conn) keepAlive() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		var p wire.Pong
		if err := c.control(context.Background(), "ping", wire.TypePing, wire.TypePong, &p); err != nil {
			return // control failed the Conn
		}
		if p.Epoch != c.peerEpoch {
			c.fail(errRestarted)
			return
		}
	}
}

// getLane takes a lane for one request of n bytes (small ones on the
// small lane): an idle one that is still in step, one with room in its
// pipeline, or a new one. It fails only before anything was posted.
func (c *Conn) getLane(ctx context.Context, n uint64, rq *request) (*lane, error) {
	small := n <= SmallFrame
	for {
		if err := c.Err(); err != nil {
			return nil, err
		}
		if stop, err := rq.stopped(ctx); err != nil {
			return nil, err
		} else if stop {
			return nil, errNotSent
		}
		c.lanes.mu.Lock()
		ch := c.lanes.pick(small, n)
		c.lanes.mu.Unlock()
		switch {
		case ch.wait != nil:
			if err := wait(ctx, ch.wait); err != nil {
				return nil, err
			}
			continue
		case ch.dial:
			l, err := c.dialLane(ctx)
			c.lanes.add(small, l, n)
			if err != nil {
				return nil, err
			}
			return l, nil
		}
		if l := ch.l; !c.checkIdle(ctx, l) {
			l.close()
			c.lanes.done(l, n)
			continue
		}
		return ch.l, nil
	}
}

// checkIdle says whether l may carry a request: a lane with others in
// flight is (its reader watches it); an idle one must still be open and,
// idle longer than KeepAlive, answer a ping from the same engine.
func (c *Conn) checkIdle(ctx context.Context, l *lane) bool {
	c.lanes.mu.Lock()
	shared := l.inflight > 1
	c.lanes.mu.Unlock()
	if shared {
		return !l.isDead()
	}
	if !l.idleOpen() {
		return false
	}
	if c.cfg.KeepAlive <= 0 || time.Since(l.idleSince()) <= c.cfg.KeepAlive {
		return true
	}
	var p wire.Pong
	_, meta, err := l.roundTrip(ctx, &wire.Frame{Type: wire.TypePing, ID: c.nextID.Add(1)}, wire.TypePong, nil)
	if err == nil {
		err = p.Unmarshal(meta)
	}
	if err != nil {
		return false
	}
	if p.Epoch != c.peerEpoch {
		c.fail(errRestarted)
		return false
	}
	return true
}

func (c *Conn) dialLane(ctx context.Context) (*lane, error) {
	l, _, _, err := dialLane(ctx, c.addr, &c.cfg, wire.Hello{Name: c.cfg.Name, Epoch: c.cfg.Epoch, Role: wire.RoleLane, Session: c.session}, c.peerEpoch)
	if errors.Is(err, errRestarted) {
		c.fail(errRestarted)
		return nil, errRestarted
	}
	if err != nil {
		c.cnt.errors.Add(1)
		return nil, fmt.Errorf("opening a lane: %w", err)
	}
	l.cnt = &c.cnt
	return l, nil
}

// putLane releases a lane after a request of n bytes; a dead lane, or
// any lane of a failed Conn, is closed.
func (c *Conn) putLane(l *lane, n uint64) {
	if c.Err() != nil {
		l.close()
	}
	c.lanes.done(l, n)
}

// descriptor finds region name, refreshing once if it is not known.
func (c *Conn) descriptor(ctx context.Context, op, name string) (wire.Descriptor, error) {
	c.mu.Lock()
	d, ok := c.mu.regions[name]
	c.mu.Unlock()
	if ok {
		return d, nil
	}
	if err := c.Refresh(ctx); err != nil {
		return d, err
	}
	c.mu.Lock()
	d, ok = c.mu.regions[name]
	c.mu.Unlock()
	if !ok {
		return d, &Error{Op: op, Peer: c.addr, Region: name, Kind: engine.KindNotFound,
			Err: fmt.Errorf("the peer %q exports no region %q", c.peerName, name)}
	}
	return d, nil
}

// piece is one slice of a request.
type piece struct{ off, n uint64 }

// plan cuts n bytes into slices: one below StripeMin, else slices of at
// least MinSlice, about one per lane, at most SliceTarget and MaxSlice
// each.
func (c *Conn) plan(n uint64) []piece {
	if n == 0 {
		return nil
	}
	size := n
	if n >= StripeMin {
		size = max(MinSlice, (n+uint64(c.cfg.Lanes)-1)/uint64(c.cfg.Lanes))
	}
	size = min(size, c.cfg.MaxSlice, SliceTarget)
	ps := make([]piece, 0, (n+size-1)/size)
	for off := uint64(0); off < n; off += size {
		ps = append(ps, piece{off, min(size, n-off)})
	}
	return ps
}

var errNotSent = errors.New("not sent: an earlier slice failed")

// request is one Read or Write's state across its slices. Once one of
// its slices failed, or a lane died under one of its slices (whose
// failure its goroutine has not reported yet), the request sends no
// more slices and dials no new lane for it: its outcome is already a
// failure, and more frames would only add bytes of unknown effect. A
// lane may also die just after its slice's reply arrived: the slice was
// applied, so a dead lane only stops the request once its slices there
// have ended and one of them failed.
type request struct {
	failed atomic.Bool

	mu    sync.Mutex
	on    map[*lane]int // slices in flight, by lane
	ended chan struct{} // closed (and replaced) when a slice ends
}

func newRequest() *request {
	return &request{on: make(map[*lane]int), ended: make(chan struct{})}
}

func (rq *request) start(l *lane) {
	rq.mu.Lock()
	rq.on[l]++
	rq.mu.Unlock()
}

// end records a slice's reply (or its failure, before the slice leaves
// the lane's count, so that no other slice can see neither).
func (rq *request) end(l *lane, failed bool) {
	if failed {
		rq.failed.Store(true)
	}
	rq.mu.Lock()
	if rq.on[l]--; rq.on[l] == 0 {
		delete(rq.on, l)
	}
	close(rq.ended)
	rq.ended = make(chan struct{})
	rq.mu.Unlock()
}

// stopped says whether the request must send no more slices; a nil
// request (a lane taken for something else) never is. While a lane
// died under some of its slices, it waits for them to end (a dead
// lane's round trips end at once) and tells by their outcome.
func (rq *request) stopped(ctx context.Context) (bool, error) {
	if rq == nil {
		return false, nil
	}
	for {
		if rq.failed.Load() {
			return true, nil
		}
		rq.mu.Lock()
		dead := false
		for l := range rq.on {
			if l.isDead() {
				dead = true
				break
			}
		}
		ended := rq.ended
		rq.mu.Unlock()
		if !dead {
			return false, nil
		}
		if err := wait(ctx, ended); err != nil {
			return true, err
		}
	}
}

// Read copies len(dst) bytes at off of the peer's region into dst. On
// error dst holds an unspecified part of the bytes.
func (c *Conn) Read(ctx context.Context, region string, off uint64, dst []byte) error {
	return c.do(ctx, "read", region, off, dst)
}

// Write stores src at off of the peer's region. It returns nil only
// when every slice was acknowledged, that is, every byte is in the
// peer's memory; on error the *Error's Effect says what the peer may
// hold (EffectOf). Write never retries: an unknown effect is final.
func (c *Conn) Write(ctx context.Context, region string, off uint64, src []byte) error {
	return c.do(ctx, "write", region, off, src)
}

func (c *Conn) do(ctx context.Context, op, region string, off uint64, buf []byte) error {
	d, err := c.descriptor(ctx, op, region)
	if err != nil {
		return err
	}
	ps := c.plan(uint64(len(buf)))
	res := make([]Slice, len(ps))
	for i, p := range ps {
		res[i] = Slice{Offset: p.off, Len: p.n, Effect: EffectNone, Err: errNotSent}
	}
	var next atomic.Int64
	rq := newRequest()
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(ps) || rq.failed.Load() {
				return
			}
			res[i].Effect, res[i].Err = c.slice(ctx, op, d, off, uint32(i), ps[i], buf, rq)
		}
	}
	// As many slices in flight as the lanes pipeline: a request cut into
	// more slices than lanes keeps every lane busy across its round trips.
	// The caller is one of the workers: a request of one slice runs
	// on the caller's goroutine, with no hand-off to another and back.
	var wg sync.WaitGroup
	for range min(c.cfg.Lanes*laneDepth, len(ps)) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	if !rq.failed.Load() {
		return nil
	}
	e := &Error{Op: op, Peer: c.addr, Region: region, Effect: res[0].Effect}
	for _, r := range res {
		e.Effect = combine(e.Effect, r.Effect)
		if e.Err == nil && r.Err != nil && r.Err != errNotSent {
			e.Err = r.Err
		}
	}
	if op == "read" {
		e.Effect = EffectNone
	}
	e.Kind = kindOf(e.Err)
	if len(res) > 1 {
		e.Slices = res
	}
	return e
}

// slice runs one slice on a lane and returns its effect.
func (c *Conn) slice(ctx context.Context, op string, d wire.Descriptor, base uint64, idx uint32, p piece, buf []byte, rq *request) (Effect, error) {
	l, err := c.getLane(ctx, p.n, rq)
	if err != nil {
		if c.sliceDone != nil {
			c.sliceDone(idx, nil, err)
		}
		rq.failed.Store(true)
		return EffectNone, err
	}
	rq.start(l)
	f := wire.Frame{ID: c.nextID.Add(1), Slice: idx, PayloadCRC: c.cfg.PayloadChecksum}
	b := buf[p.off : p.off+p.n]
	var want wire.Type
	var dst []byte
	if op == "write" {
		f.Type, want, f.Payload = wire.TypeWrite, wire.TypeWriteAck, b
		f.Meta = (&wire.Write{Region: d.ID, Offset: base + p.off}).Marshal()
	} else {
		f.Type, want, dst = wire.TypeRead, wire.TypeReadData, b
		f.Meta = (&wire.Read{Region: d.ID, Offset: base + p.off, Length: p.n}).Marshal()
	}
	posted, _, err := l.roundTrip(ctx, &f, want, dst)
	if c.sliceDone != nil {
		c.sliceDone(idx, l, err)
	}
	rq.end(l, err != nil)
	c.putLane(l, p.n)
	var r *remoteError
	switch {
	case err == nil:
		return EffectApplied, nil
	case errors.As(err, &r):
		if r.m.Applied == wire.AppliedUnknown {
			return EffectUnknown, err
		}
		return EffectNone, err
	case posted:
		return EffectUnknown, err
	}
	return EffectNone, err
}
