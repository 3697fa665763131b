// server.go owns the listening side: it accepts connections, runs the
// handshake, serves READ, WRITE, region lists and pings against the
// exported regions, and queues completion notifications in its inbox.
//
// Invariants:
//   - Nothing is served before the client proved the key (and, with
//     allowed networks, came from one); a refused peer is logged with the
//     reason and its connection closed.
//   - A region is reachable only while exported, and only with the
//     permission it was exported with; a refusal (permission, range,
//     stale id, busy) happens before any byte of the region is touched
//     and says so (AppliedNone).
//   - A WRITE is acknowledged only after its bytes are in the region's
//     memory: received in place in full (DirectMemory: cpu and pinned
//     regions, no payload checksum), or WriteAt returned (for a cuda:N
//     region, after the copy event of its pinned staging completed). A
//     payload cut part-way through an in-place receive ends the
//     connection unacknowledged (effect unknown). A failed WRITE that may have changed the region (some
//     bytes copied, or a device copy of unknown outcome) is answered with
//     effect unknown, never none.
//   - A frame that fails a check ends its connection: after a corrupt
//     header the stream cannot be trusted to be in step.
//   - A notification is answered notified only after it is in the
//     inbox, and inbox full only when it was not queued.
//   - A lane belongs to one control session; when the control connection
//     ends, its lanes are closed. An evicted session (Evict) takes no new
//     lane from the moment Evict returns.
//   - At most MaxHandshakes connections are in their handshake at once
//     (handshakes.go): a flood of silent connections displaces itself,
//     never a peer that says hello.

package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// Memory is an exported region's bytes (engine.Region satisfies it).
type Memory interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
}

// DirectMemory is Memory whose bytes a request can reach in place: the
// server then receives a WRITE's payload straight into the region and
// sends a READ's straight from it. InPlace runs f on [off, off+n) with
// the range held against unregistering and transfers (a refusal returns
// an error without running f); ok false: these bytes cannot be reached
// in place (device memory, a shared file a truncation would fault), and
// the server copies through a buffer with ReadAt/WriteAt.
type DirectMemory interface {
	Memory
	InPlace(off int64, n int, f func(b []byte) error) (ok bool, err error)
}

// Export is one exported region.
type Export struct {
	wire.Descriptor
	Mem Memory
	// IPCHandle, set for device memory, returns its CUDA IPC handle; the
	// server sends it only to clients on its own host (ipc.go).
	IPCHandle func() ([]byte, error)
	// HoldIPC and ReleaseIPC, set for device memory, record and return a
	// client's CUDA IPC mappings (engine.Region's); a handle is sent only
	// with them (ipc.go).
	HoldIPC    func(holder string) error
	ReleaseIPC func(holder string, n int)
}

// Exports is the set of regions a server may serve; it is asked on
// every request, so an unregistered region is unreachable at once.
type Exports interface {
	// Exports lists the regions with a permission other than none.
	Exports() []Export
	// Export finds one by descriptor id.
	Export(id uint64) (Export, bool)
}

// ServerConfig configures a Server.
type ServerConfig struct {
	Name string // advertised in the challenge
	Key  []byte // the shared secret
	// Protection is the frame protection every connection runs
	// (protect.go); a client that runs another is refused.
	Protection wire.Protection
	IOTimeout  time.Duration // bound on a handshake, and on a stall of a frame once begun (progress.go)
	MaxSlice   uint64        // largest payload of one frame
	// Allowed, when not empty, are the only networks peers may connect
	// from; any other address is closed before the handshake.
	Allowed []netip.Prefix
	// MaxHandshakes bounds the connections accepted and not yet
	// authenticated (handshakes.go); 0 is DefaultMaxHandshakes.
	MaxHandshakes int
	// Epoch is this engine's epoch; 0: a fresh one (NewEpoch).
	Epoch uint64
	// Inbox receives the notifications peers send (nil: a new one with
	// the default bounds); MaxNotifyBytes bounds one message (0: the
	// default).
	Inbox          *Inbox
	MaxNotifyBytes uint64
	// Superseded, when set, says whether a peer's epoch is known dead
	// (the cluster saw that name come back with a newer epoch): such a
	// handshake is refused, so nothing of an old incarnation is served.
	Superseded func(name string, epoch uint64) bool
	// Credit is the receiver credit issuer (credit.go); nil: credits off.
	Credit *Issuer
	Logger *slog.Logger
	// Host identifies this machine (HostID when empty): a client naming
	// the same host gets the CUDA IPC handles of device regions.
	Host string
	// Gate bounds the process's bulk payload copies (gate.go); nil: one
	// of the server's own. A process's Server and Conns should share one.
	Gate *Gate
	// IPCReleaseGrace is how long a session's CUDA IPC mappings stay
	// held after its control connection ended (ipc.go); 0:
	// DefaultIPCReleaseGrace.
	IPCReleaseGrace time.Duration
}

// Stats are a server's counters.
type Stats struct {
	Sessions, Lanes   int    // open now
	Refused           uint64 // connections refused at the handshake
	Reads, Writes     uint64 // requests served (including refused ones)
	BytesIn, BytesOut uint64 // payload bytes
	Corrupt           uint64 // connections ended by a frame that failed a check
	Notified, Full    uint64 // notifications queued, refused for a full inbox
	Pending           int    // notifications waiting in the inbox
	Handshaking       int    // connections in their handshake now
	Displaced         uint64 // connections closed in their handshake to make room (MaxHandshakes)
}

// Server serves exported regions to authenticated peers.
type Server struct {
	cfg   ServerConfig
	exp   Exports
	epoch uint64
	inbox *Inbox
	log   *slog.Logger
	ln    net.Listener
	wg    sync.WaitGroup
	hs    *handshakes

	mu struct {
		sync.Mutex
		closed   bool
		conns    map[net.Conn]struct{}
		sessions map[uint64]*session
		next     uint64
	}
	refused, reads, writes, bytesIn, bytesOut, corrupt, notified, full atomic.Uint64

	// hook, when set (tests), runs at the named points of a WRITE with the
	// request's header and the connection, and may close it.
	hook func(point hookPoint, h *wire.Header, c net.Conn)
	// olderRegions, when set (tests), refuses a regions query that names
	// capabilities as a server from before them does.
	olderRegions bool
	// replies, when set (tests), runs before a connection writes
	// replies, with how many go out in that write.
	replies func(n int)
	// ipcDropped, when set (tests), runs after a finished session's CUDA
	// IPC mappings were released.
	ipcDropped func(holder string)
}

type hookPoint int

const (
	hookWriteBody    hookPoint = iota // header and metadata read, payload not yet
	hookWriteApplied                  // bytes written to the region, ack not yet sent
	hookNotifyQueued                  // notification in the inbox, reply not yet sent
)

// session is one authenticated client: its control connection and lanes.
type session struct {
	id    uint64
	name  string
	epoch uint64
	ctrl  net.Conn
	lanes map[net.Conn]struct{}
	since time.Time
	cnt   counters // payload bytes and requests of the session's connections (stats.go)
	ipc   ipcHolds // CUDA IPC mappings the client announced (ipc.go); under Server.mu
	// evicted: Evict closed it; no lane joins it any more, though it
	// stays listed until its control connection's handler leaves.
	// Under Server.mu.
	evicted bool
}

// NewServer makes a server for exp with a fresh random epoch.
func NewServer(cfg ServerConfig, exp Exports) *Server {
	if cfg.Inbox == nil {
		cfg.Inbox = NewInbox(InboxLimits{Max: DefaultMaxPending, MaxPerSender: DefaultMaxPendingPerSender, MaxBytes: DefaultMaxPendingBytes})
	}
	if cfg.MaxNotifyBytes == 0 {
		cfg.MaxNotifyBytes = DefaultMaxNotifyBytes
	}
	if cfg.Epoch == 0 {
		cfg.Epoch = newEpoch()
	}
	if cfg.Host == "" {
		cfg.Host = HostID()
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.Gate == nil {
		cfg.Gate = NewGate(DefaultGateLinger)
	}
	s := &Server{cfg: cfg, exp: exp, epoch: cfg.Epoch, inbox: cfg.Inbox, log: cfg.Logger, hs: newHandshakes(cfg.MaxHandshakes)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mu.conns = map[net.Conn]struct{}{}
	s.mu.sessions = map[uint64]*session{}
	// Session ids start at random, so a lane naming a session of an
	// earlier epoch (whose ids would otherwise start at 1 again) finds no
	// session here, even from a client with the same name and epoch.
	s.mu.next = newEpoch() >> 16
	return s
}

// Epoch is this server's epoch: random, new at every start.
func (s *Server) Epoch() uint64 { return s.epoch }

// Listen starts accepting on addr (host:port). Multipath TCP is off:
// the kernel's MPTCP path adds a copy and its own scheduling to every
// byte, and peers stripe over plain lanes themselves.
func (s *Server) Listen(addr string) error {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("peer listen %s: %w", addr, err)
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		ln.Close()
		return fmt.Errorf("peer listen %s: %w", addr, errClosed)
	}
	s.ln = ln
	s.mu.Unlock()
	s.log.Info("peer listening", "op", "peer", "addr", ln.Addr().String(), "name", s.cfg.Name, "epoch", fmt.Sprintf("%016x", s.epoch))
	s.wg.Add(1)
	go s.accept(ln)
	return nil
}

// Addr is the listening address (after Listen).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops listening, closes every connection and waits for their
// goroutines. A WRITE cut by it has an unknown effect for its client.
func (s *Server) Close() error {
	s.mu.Lock()
	s.mu.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Notification removes and returns the oldest received notification,
// waiting for one until ctx ends.
func (s *Server) Notification(ctx context.Context) (Notification, error) {
	return s.inbox.Next(ctx)
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := Stats{Sessions: len(s.mu.sessions)}
	for _, ss := range s.mu.sessions {
		st.Lanes += len(ss.lanes)
	}
	s.mu.Unlock()
	st.Refused, st.Reads, st.Writes = s.refused.Load(), s.reads.Load(), s.writes.Load()
	st.BytesIn, st.BytesOut, st.Corrupt = s.bytesIn.Load(), s.bytesOut.Load(), s.corrupt.Load()
	st.Notified, st.Full, st.Pending = s.notified.Load(), s.full.Load(), s.inbox.Len()
	st.Handshaking, st.Displaced = s.hs.stats()
	return st
}

func (s *Server) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("peer accept", "op", "peer", "err", err)
			}
			return
		}
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.mu.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(c)
			s.mu.Lock()
			delete(s.mu.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

func (s *Server) handle(c net.Conn) {
	remote := c.RemoteAddr().String()
	if !s.allowed(c.RemoteAddr()) {
		s.refused.Add(1)
		s.log.Warn("peer refused", "op", "peer", "remote", remote, "reason", "its address is in none of the allowed networks")
		return
	}
	if err := setUserTimeout(c, s.cfg.IOTimeout); err != nil {
		s.log.Warn("peer connection", "op", "peer", "remote", remote, "err", err)
		return
	}
	c.SetDeadline(time.Now().Add(s.cfg.IOTimeout))
	sh := s.hs.begin(c)
	h, fs, err := serverHandshake(c, s.cfg.Key, s.cfg.Name, s.epoch, s.cfg.Protection, func() { s.hs.helloed(sh) })
	if s.hs.end(sh) {
		// Closed by a newcomer's begin, whatever the handshake returned.
		err = fmt.Errorf("closed in its handshake to make room for a newer connection: %d were in their handshake (peer.max_handshakes); %v", s.cfg.MaxHandshakes, err)
	}
	if err != nil {
		s.refused.Add(1)
		name := ""
		if h != nil {
			name = h.Name
		}
		s.log.Warn("peer refused", "op", "peer", "remote", remote, "name", name, "reason", err)
		return
	}
	var ss *session
	if s.cfg.Superseded != nil && s.cfg.Superseded(h.Name, h.Epoch) {
		err = fmt.Errorf("%q epoch %016x is superseded: the cluster lists a newer epoch of that engine", h.Name, h.Epoch)
	} else {
		ss, err = s.join(c, h)
	}
	if err != nil {
		s.refused.Add(1)
		e := wire.Error{Code: wire.CodeProtocol, Message: err.Error()}
		fs.writeMsg(c, wire.TypeError, e.Marshal())
		s.log.Warn("peer refused", "op", "peer", "remote", remote, "name", h.Name, "reason", err)
		return
	}
	defer s.leave(c, ss)
	w := wire.Welcome{Session: ss.id, MaxPayload: s.cfg.MaxSlice}
	if err := fs.writeMsg(c, wire.TypeWelcome, w.Marshal()); err != nil {
		return
	}
	if h.Role == wire.RoleControl {
		s.log.Info("peer connected", "op", "peer", "remote", remote, "name", h.Name,
			"epoch", fmt.Sprintf("%016x", h.Epoch), "session", ss.id)
	}
	if err := s.serveProtected(c, h, ss, fs); err != nil {
		s.log.Warn("peer connection ended", "op", "peer", "remote", remote, "name", h.Name, "session", ss.id, "err", err)
	}
}

// allowed says whether a peer at a may connect.
func (s *Server) allowed(a net.Addr) bool {
	if len(s.cfg.Allowed) == 0 {
		return true
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range s.cfg.Allowed {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// join records c in a new session (control) or its session (lane).
func (s *Server) join(c net.Conn, h *wire.Hello) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.Role == wire.RoleControl {
		s.mu.next++
		ss := &session{id: s.mu.next, name: h.Name, epoch: h.Epoch, ctrl: c, lanes: map[net.Conn]struct{}{}, since: time.Now()}
		s.mu.sessions[ss.id] = ss
		return ss, nil
	}
	ss := s.mu.sessions[h.Session]
	switch {
	case ss == nil:
		return nil, fmt.Errorf("lane for session %d, which is not open (its control connection ended)", h.Session)
	case ss.evicted:
		return nil, fmt.Errorf("lane for session %d of %q epoch %016x, which was evicted", h.Session, ss.name, ss.epoch)
	case ss.name != h.Name || ss.epoch != h.Epoch:
		return nil, fmt.Errorf("lane for session %d from %q epoch %016x, but the session is %q epoch %016x",
			h.Session, h.Name, h.Epoch, ss.name, ss.epoch)
	}
	ss.lanes[c] = struct{}{}
	return ss, nil
}

// Evict closes the sessions of name's epoch (its control connection and
// lanes), as when the cluster reports that incarnation superseded; a
// request being served ends with its connection. It returns how many
// sessions it closed.
func (s *Server) Evict(name string, epoch uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ss := range s.mu.sessions {
		if ss.name != name || ss.epoch != epoch || ss.evicted {
			continue
		}
		// Marked under s.mu, as join checks it: a lane dialed after this
		// (the client has not seen the close yet) is refused, not served
		// until the control connection's handler gets to leave.
		ss.evicted = true
		ss.ctrl.Close()
		for l := range ss.lanes {
			l.Close()
		}
		n++
	}
	return n
}

func (s *Server) leave(c net.Conn, ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.ctrl != c {
		delete(ss.lanes, c)
		return
	}
	delete(s.mu.sessions, ss.id)
	for l := range ss.lanes {
		l.Close()
	}
	go s.dropIPC(ss) // takes s.mu
}

// bufs recycles payload buffers, one pool per power of two: a pool of
// mixed sizes would hand a 4 KiB buffer to a 4 MiB frame, which then
// allocates (and the garbage collector's pauses land on every request).
// Each buffer has bufSlack bytes beyond its power of two, so a sealed
// payload of n bytes (n and its tag, protect.go) takes n's class.
var bufs [64]sync.Pool

const bufSlack = wire.TagLen

func getBuf(n uint64) []byte {
	if n == 0 {
		return nil
	}
	k := bits.Len64(max(n, bufSlack+1) - bufSlack - 1)
	if p, ok := bufs[k].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<k+bufSlack)
}

func putBuf(b []byte) {
	if c := uint64(cap(b)) - bufSlack; cap(b) > bufSlack && c&(c-1) == 0 {
		bufs[bits.Len64(c-1)].Put(&b)
	}
}

// serve answers requests on c until it ends. It returns nil for an
// orderly end (the client closed).
func (s *Server) serve(raw net.Conn, hello *wire.Hello, ss *session) error {
	return s.serveProtected(raw, hello, ss, nil)
}

// serveProtected is serve on a connection protected by fs (nil: none).
func (s *Server) serveProtected(raw net.Conn, hello *wire.Hello, ss *session, fs *frameSeal) error {
	role, cnt := hello.Role, &ss.cnt
	pr := &progressReader{c: raw, gate: s.cfg.Gate}
	br := bufio.NewReaderSize(pr, 64<<10)
	lim := wire.Limits{MaxPayload: s.cfg.MaxSlice}
	hb := make([]byte, wire.HeaderLen)
	var h wire.Header
	// Every write on c goes out after the replies held back (replyConn).
	rc := &replyConn{Conn: raw, seal: fs}
	c := rc
	send := func(reply *wire.Frame) error {
		hold := len(reply.Payload) == 0 && nextReady(br, lim)
		return s.sendReply(rc, cnt, &h, reply, hold)
	}
	for {
		pr.timeout = 0 // an idle connection may wait for ever
		c.SetDeadline(time.Time{})
		var err error
		h, err = wire.ReadHeader(br, hb, lim)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return s.refuseFrame(c, &h, err)
		}
		pr.timeout = s.cfg.IOTimeout // a frame begun must keep moving (progress.go)
		meta, err := fs.meta(br, &h)
		if err != nil {
			return s.refuseFrame(c, &h, err)
		}
		reply := wire.Frame{Type: wire.TypeError, ID: h.ID, Slice: h.Slice, PayloadCRC: h.Flags&wire.FlagPayloadCRC != 0}
		var buf []byte
		switch {
		case h.Type == wire.TypePing && h.PayloadLen == 0:
			reply.Type, reply.Meta = wire.TypePong, (&wire.Pong{Epoch: s.epoch}).Marshal()
		case h.Type == wire.TypeRegions && h.PayloadLen == 0:
			var q wire.RegionsQuery
			if err := q.Unmarshal(meta); err != nil {
				return s.refuseFrame(c, &h, err)
			}
			if s.olderRegions && q.Caps != 0 {
				return s.refuseFrame(c, &h, fmt.Errorf("%w: 8 trailing bytes after regions query", wire.ErrCorrupt))
			}
			rs := s.regions(q.Host, hello.Name, q.Caps)
			s.offeredIPC(ss, rs)
			reply.Type, reply.Meta = wire.TypeRegionsOK, rs.Marshal()
			if len(reply.Meta) > wire.MaxMetaLen {
				// A frame the client would refuse as corrupt: say why.
				e := wire.Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("%d exported regions take %d bytes, over the %d of one region list: export fewer or shorter names",
					len(rs.List), len(reply.Meta), wire.MaxMetaLen)}
				s.log.Warn("peer regions refused", "op", "peer", "name", hello.Name, "err", e.Message)
				reply.Type, reply.Meta = wire.TypeError, e.Marshal()
			}
		case h.Type == wire.TypeRead && role == wire.RoleLane && h.PayloadLen == 0:
			s.reads.Add(1)
			var m wire.Read
			if err := m.Unmarshal(meta); err != nil {
				return s.refuseFrame(c, &h, err)
			}
			// Within the sender's credit window or refused untouched;
			// served counts only the bytes the reply carries (credit.go).
			cs, refused := s.cfg.Credit.admit(senderKey{hello.Name, hello.Epoch}, m.Length)
			if refused != nil {
				reply.Meta = refused.Marshal()
				break
			}
			if sent, err := s.readInPlace(&m, &reply, cs, send); sent {
				if err != nil {
					return err
				}
				continue
			}
			buf, reply.Meta = s.read(&m, &reply)
			reply.Payload = buf
			s.cfg.Credit.settle(cs, m.Length, uint64(len(buf)))
		case h.Type == wire.TypeWrite && role == wire.RoleLane:
			s.writes.Add(1)
			var m wire.Write
			if err := m.Unmarshal(meta); err != nil {
				return s.refuseFrame(c, &h, err)
			}
			var err error
			cs, refused := s.cfg.Credit.admit(senderKey{hello.Name, hello.Epoch}, h.PayloadLen)
			if refused != nil {
				// Consume the refused payload so the lane stays in step.
				if err := fs.discard(br, &h); err != nil {
					return s.refuseRead(c, &h, fmt.Errorf("discarding write %d over credit: %w", h.ID, err))
				}
				reply.Meta = refused.Marshal()
			} else {
				reply.Meta, err = s.write(br, c, &h, &m, &reply)
				var carried uint64
				if reply.Type == wire.TypeWriteAck {
					carried = h.PayloadLen // only applied bytes count as served
				}
				s.cfg.Credit.settle(cs, h.PayloadLen, carried)
				if err != nil {
					return err
				}
			}
		case h.Type == wire.TypeNotify && role == wire.RoleControl:
			var m wire.Notify
			if err := m.Unmarshal(meta); err != nil {
				return s.refuseFrame(c, &h, err)
			}
			var err error
			if reply.Meta, err = s.notify(br, c, &h, &m, hello, &reply); err != nil {
				return err
			}
		case (h.Type == wire.TypeCreditConnect || h.Type == wire.TypeCreditSync || h.Type == wire.TypeCreditClose) && role == wire.RoleControl && h.PayloadLen == 0:
			if err := s.serveCredit(h.Type, meta, hello, &reply); err != nil {
				return s.refuseFrame(c, &h, err)
			}
		case (h.Type == wire.TypeIPCMap || h.Type == wire.TypeIPCUnmap) && role == wire.RoleControl && h.PayloadLen == 0:
			if err := s.serveIPC(h.Type, meta, ss, &reply); err != nil {
				return s.refuseFrame(c, &h, err)
			}
		default:
			return s.refuseFrame(c, &h, fmt.Errorf("%w: a %s frame with %d payload bytes is not a request on a %s connection",
				wire.ErrCorrupt, h.Type, h.PayloadLen, roleName(role)))
		}
		err = send(&reply)
		if buf != nil {
			putBuf(buf)
		}
		if err != nil {
			return err
		}
	}
}

// maxHeld bounds the replies a connection holds back (replyConn).
const maxHeld = 32

// replyConn is a served connection's write side, batching replies: a
// reply with no payload (a WRITE's ack, an error, a pong) may be held
// back while the next request is already buffered in full, to go out
// with the next reply in one writev; a run of pipelined small requests
// is then answered in one system call (and one wake-up of the client's
// reader) instead of one per request.
//
// Invariants:
//   - A reply is held only while the request after it is buffered in
//     full and small (nextReady): serving it waits for no network, so a
//     held reply never waits for the peer.
//   - Replies go out in order: every write on the connection (the next
//     reply, a refusal, Write) sends the held ones first.
//   - At most maxHeld replies are held.
type replyConn struct {
	net.Conn
	seal  *frameSeal // nil: frames in the clear (protect.go)
	held  []byte     // encoded replies not yet written
	nheld int
}

// Write writes the held replies, then p, in one writev.
func (r *replyConn) Write(p []byte) (int, error) {
	if len(r.held) == 0 {
		return r.Conn.Write(p)
	}
	held := len(r.held)
	bufs := net.Buffers{r.held, p}
	n, err := bufs.WriteTo(r.Conn)
	r.held, r.nheld = r.held[:0], 0
	return int(max(n-int64(held), 0)), err
}

// nextReady says whether the next request is buffered in full and is a
// small READ or WRITE (serving it waits for no network and copies at
// most SmallFrame bytes).
func nextReady(br *bufio.Reader, lim wire.Limits) bool {
	if br.Buffered() < wire.HeaderLen {
		return false
	}
	b, err := br.Peek(wire.HeaderLen)
	if err != nil {
		return false
	}
	var h wire.Header
	if h.Unmarshal(b, lim) != nil {
		return false // refused when read: the held replies go first
	}
	return (h.Type == wire.TypeRead || h.Type == wire.TypeWrite) && h.PayloadLen <= SmallFrame &&
		uint64(br.Buffered()) >= wire.HeaderLen+h.BodyLen()
}

// sendReply sends reply to request h on rc and counts it; with hold
// (nothing to wait for before the next reply: nextReady) a reply
// without payload may be held back to go out with the next.
func (s *Server) sendReply(rc *replyConn, cnt *counters, h *wire.Header, reply *wire.Frame, hold bool) error {
	// Counted before the reply goes out: a client that has its reply
	// sees its request in the figures.
	cnt.frames.Add(1)
	cnt.sent.Add(uint64(len(reply.Payload)))
	switch reply.Type {
	case wire.TypeWriteAck:
		cnt.recv.Add(h.PayloadLen)
	case wire.TypeError:
		cnt.errors.Add(1)
	}
	if (h.Type == wire.TypeRead || h.Type == wire.TypeWrite) && h.PayloadLen <= SmallFrame && len(reply.Payload) <= SmallFrame {
		// A small request: engage the gate for the next (gate.go).
		s.cfg.Gate.smallSeen()
	}
	var payload, body []byte
	rc.held, payload, body = rc.seal.encode(rc.held, reply)
	rc.nheld++
	if hold && len(reply.Payload) == 0 && rc.nheld < maxHeld {
		return nil
	}
	if s.replies != nil {
		s.replies(rc.nheld)
	}
	_, err := s.cfg.Gate.writev(rc.Conn, rc.held, payload)
	putBuf(body)
	rc.held, rc.nheld = rc.held[:0], 0
	if err != nil {
		return fmt.Errorf("%s reply to request %d slice %d: %w", reply.Type, h.ID, h.Slice, err)
	}
	s.bytesOut.Add(uint64(len(reply.Payload)))
	return nil
}

func roleName(r wire.Role) string {
	if r == wire.RoleControl {
		return "control"
	}
	return "lane"
}

// refuseFrame answers a frame that failed a check and ends the
// connection: after a bad header nothing later on it is trusted. The
// answer names the frame's request id: whichever request of the
// client's that is in flight, the server served nothing of it (it
// answers in order, and refuses before acting).
func (s *Server) refuseFrame(c *replyConn, h *wire.Header, err error) error {
	s.corrupt.Add(1)
	e := wire.Error{Code: wire.CodeCorrupt, Message: err.Error()}
	head, _, _ := c.seal.encode(nil, &wire.Frame{Type: wire.TypeError, ID: h.ID, Slice: h.Slice, Meta: e.Marshal()})
	c.Write(head)
	return fmt.Errorf("frame refused: %w", err)
}

// refuseRead ends the connection after a payload read failed: refused
// as corrupt when it failed a check, else (the connection broke) as is.
func (s *Server) refuseRead(c *replyConn, h *wire.Header, err error) error {
	if errors.Is(err, wire.ErrCorrupt) {
		return s.refuseFrame(c, h, err)
	}
	return err
}

// lookup finds the export for id and checks perm and [off, off+n).
func (s *Server) lookup(id, off, n uint64, perm wire.Perm) (Export, *wire.Error) {
	x, ok := s.exp.Export(id)
	switch {
	case !ok:
		return x, &wire.Error{Code: wire.CodeNotFound, Message: fmt.Sprintf("no exported region with id %d (unregistered, or a descriptor from before a restart)", id)}
	case x.Perm&perm == 0:
		return x, &wire.Error{Code: wire.CodeDenied, Message: fmt.Sprintf("region %q is exported %s, not %s", x.Name, x.Perm, perm)}
	case n > s.cfg.MaxSlice:
		return x, &wire.Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("%d bytes in one frame, over the server's %d", n, s.cfg.MaxSlice)}
	case off > x.Bytes || n > x.Bytes-off:
		return x, &wire.Error{Code: wire.CodeRange, Message: fmt.Sprintf("[%d, %d+%d) is outside region %q (%d bytes)", off, off, n, x.Name, x.Bytes)}
	}
	return x, nil
}

// memError is the reply for a failed ReadAt/WriteAt that moved n bytes.
// A region may have changed when bytes moved or when a device copy's
// outcome is unknown (ErrUncertain): the GPU may still be writing it.
func memError(name string, n int, err error) *wire.Error {
	e := &wire.Error{Code: wire.CodeInternal, Message: fmt.Sprintf("region %q: %v", name, err)}
	if errors.Is(err, engine.ErrBusy) {
		e.Code = wire.CodeBusy
	}
	if n > 0 || errors.Is(err, engine.ErrUncertain) {
		e.Applied = wire.AppliedUnknown
	}
	return e
}

// readInPlace serves a READ of memory reachable in place (DirectMemory)
// by sending the reply with the region's bytes as its payload, read by
// the kernel straight from the region. sent false: the caller serves it
// through a buffer (other memory, a refused request, or a payload
// checksum, which must be computed over the bytes that are sent).
//
// The admitted credit cs is settled before the reply goes out, as for a
// buffered READ.
func (s *Server) readInPlace(m *wire.Read, reply *wire.Frame, cs *creditSender, send func(*wire.Frame) error) (sent bool, err error) {
	if reply.PayloadCRC {
		return false, nil
	}
	x, bad := s.lookup(m.Region, m.Offset, m.Length, wire.PermRead)
	if bad != nil {
		return false, nil
	}
	d, ok := x.Mem.(DirectMemory)
	if !ok {
		return false, nil
	}
	ok, err = d.InPlace(int64(m.Offset), int(m.Length), func(b []byte) error {
		sent = true
		reply.Type, reply.Payload = wire.TypeReadData, b
		s.cfg.Credit.settle(cs, m.Length, uint64(len(b)))
		return send(reply)
	})
	reply.Payload = nil // not kept past the pin
	if !ok || !sent {
		return false, nil // refused (busy, unregistered): read answers it
	}
	return true, err
}

// read fills the reply to a READ: its payload buffer and metadata.
func (s *Server) read(m *wire.Read, reply *wire.Frame) ([]byte, []byte) {
	x, bad := s.lookup(m.Region, m.Offset, m.Length, wire.PermRead)
	if bad != nil {
		return nil, bad.Marshal()
	}
	buf := getBuf(m.Length)
	if n, err := x.Mem.ReadAt(buf, int64(m.Offset)); err != nil || uint64(n) != m.Length {
		putBuf(buf)
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		e := memError(x.Name, 0, err)
		return nil, e.Marshal()
	}
	reply.Type = wire.TypeReadData
	return buf, nil
}

// write serves a WRITE: it reads the payload, writes it to the region
// and returns the reply's metadata. An error ends the connection.
func (s *Server) write(br io.Reader, c *replyConn, h *wire.Header, m *wire.Write, reply *wire.Frame) ([]byte, error) {
	x, bad := s.lookup(m.Region, m.Offset, h.PayloadLen, wire.PermWrite)
	if bad != nil {
		// Consume the refused payload so the lane stays in step.
		if err := c.seal.discard(br, h); err != nil {
			return nil, s.refuseRead(c, h, fmt.Errorf("discarding refused write %d: %w", h.ID, err))
		}
		return bad.Marshal(), nil
	}
	if s.hook != nil {
		s.hook(hookWriteBody, h, c)
	}
	if d, ok := x.Mem.(DirectMemory); ok && h.Flags&(wire.FlagPayloadCRC|wire.FlagSealed) == 0 {
		// Straight into the region: no buffer, no second copy. With a
		// payload checksum or sealed, the bytes go through a buffer: a
		// checksum or tag failure must leave the region untouched, and
		// a concurrent writer of the same bytes must not fail the check.
		var got error
		ran := false
		inPlace, err := d.InPlace(int64(m.Offset), int(h.PayloadLen), func(b []byte) error {
			ran = true
			got = wire.ReadPayload(br, h, b)
			return got
		})
		switch {
		case !inPlace:
		case ran && got != nil:
			// Part of the payload may be in the region: the connection
			// ends unacknowledged, so the client's effect is unknown.
			return nil, fmt.Errorf("write %d slice %d payload: %w", h.ID, h.Slice, got)
		case err != nil:
			// Refused before any byte moved: consume the payload so the
			// lane stays in step.
			if err := c.seal.discard(br, h); err != nil {
				return nil, s.refuseRead(c, h, fmt.Errorf("discarding refused write %d: %w", h.ID, err))
			}
			return memError(x.Name, 0, err).Marshal(), nil
		default:
			s.bytesIn.Add(h.PayloadLen)
			return s.written(h, c, reply), nil
		}
	}
	// Sealed, the payload is opened in this buffer: nothing of it
	// reaches the region unless its tag checked.
	buf, err := c.seal.payloadBuf(br, h)
	if err != nil {
		if errors.Is(err, wire.ErrCorrupt) {
			return nil, s.refuseFrame(c, h, err)
		}
		return nil, fmt.Errorf("write %d slice %d payload: %w", h.ID, h.Slice, err)
	}
	defer putBuf(buf)
	s.bytesIn.Add(h.PayloadLen)
	if n, err := x.Mem.WriteAt(buf, int64(m.Offset)); err != nil {
		return memError(x.Name, n, err).Marshal(), nil
	}
	return s.written(h, c, reply), nil
}

// written makes reply a WRITE's acknowledgement, once its bytes are in
// the region.
func (s *Server) written(h *wire.Header, c *replyConn, reply *wire.Frame) []byte {
	if s.hook != nil {
		s.hook(hookWriteApplied, h, c)
	}
	reply.Type = wire.TypeWriteAck
	return nil
}

// notify serves a NOTIFY: it reads the message and queues it. The reply
// is notified only once the inbox holds it; a full inbox is answered
// inbox full (nothing queued). An error ends the connection.
func (s *Server) notify(br io.Reader, c *replyConn, h *wire.Header, m *wire.Notify, from *wire.Hello, reply *wire.Frame) ([]byte, error) {
	if h.PayloadLen > s.cfg.MaxNotifyBytes {
		if err := c.seal.discard(br, h); err != nil {
			return nil, s.refuseRead(c, h, fmt.Errorf("discarding refused notification %d: %w", m.ID, err))
		}
		e := wire.Error{Code: wire.CodeTooLarge, Message: fmt.Sprintf("a notification of %d bytes, over the receiver's %d", h.PayloadLen, s.cfg.MaxNotifyBytes)}
		return e.Marshal(), nil
	}
	buf, err := c.seal.payloadBuf(br, h)
	if err != nil {
		if errors.Is(err, wire.ErrCorrupt) {
			return nil, s.refuseFrame(c, h, err)
		}
		return nil, fmt.Errorf("notification %d payload: %w", m.ID, err)
	}
	defer putBuf(buf)
	n := Notification{Sender: from.Name, Epoch: fmt.Sprintf("%016x", from.Epoch), ID: m.ID,
		Submission: m.Submission, Message: string(buf), Received: time.Now().UTC()}
	if err := s.inbox.Put(n); err != nil {
		s.full.Add(1)
		s.log.Warn("peer notification refused", "op", "peer", "name", from.Name, "id", m.ID, "err", err)
		e := wire.Error{Code: wire.CodeFull, Message: err.Error()}
		return e.Marshal(), nil
	}
	s.notified.Add(1)
	if s.hook != nil {
		s.hook(hookNotifyQueued, h, c)
	}
	reply.Type = wire.TypeNotified
	return nil, nil
}
