// peer.go owns the daemon's peer listener (started by `orbitefs mount`
// when [peer] listen is set) and `orbitefs peer read|write`, which moves
// bytes between a local file and a peer's exported region.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/discovery"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// serviceExports shows the control Service's exported registrations to
// the peer server; a registration's Seq is its descriptor id.
type serviceExports struct{ s *control.Service }

func exportOf(m *control.Memory) peer.Export {
	perm, _ := wire.ParsePerm(m.Export) // validated at registration
	x := peer.Export{Descriptor: wire.Descriptor{ID: m.Seq(), Name: m.Name, Location: m.Location,
		Bytes: m.Len(), Perm: perm}, Mem: m}
	if strings.HasPrefix(m.Location, "cuda:") {
		x.IPCHandle, x.HoldIPC, x.ReleaseIPC = m.IPCHandle, m.HoldIPC, m.ReleaseIPC
	}
	return x
}

func (x serviceExports) Exports() []peer.Export {
	var out []peer.Export
	for _, m := range x.s.Exported() {
		out = append(out, exportOf(m))
	}
	return out
}

func (x serviceExports) Export(id uint64) (peer.Export, bool) {
	m := x.s.ExportedBySeq(id)
	if m == nil {
		return peer.Export{}, false
	}
	return exportOf(m), true
}

// peerName is [peer] name, or the host name.
// peerProtection is [peer] frame_protection (validated by config; empty,
// in a config made in code, is none).
func peerProtection(c config.Peer) wire.Protection {
	p, _ := wire.ParseProtection(c.FrameProtection)
	return p
}

func peerName(c config.Peer) string {
	if c.Name != "" {
		return c.Name
	}
	h, err := os.Hostname()
	if err != nil {
		return "orbitefs"
	}
	return h
}

// notifications is the daemon's side of completion notifications: the
// inbox its listener fills (nil without one) and the notifier its
// submissions send through (nil without a key), under one epoch. gate
// is the daemon's one bulk gate, shared by its listener and every Conn
// it dials: it bounds the process's bulk copies, whichever side.
type notifications struct {
	epoch    uint64
	key      []byte
	inbox    *peer.Inbox
	notifier *peer.Notifier
	gate     *peer.Gate
}

// newNotifications prepares both sides from [peer] and plugs them into
// the control Service's options.
// The sender's pending bound is the engine's (engine.max_pending_*: what
// its submissions still have to send); the receiver's inbox is bounded by
// [peer]'s keys of the same names.
func newNotifications(c config.Peer, e config.Engine, opts *control.Options, tr *peer.Tracker, lg *slog.Logger) (*notifications, error) {
	n := &notifications{epoch: peer.NewEpoch(), gate: peer.NewGate(c.BulkGateLinger.D())}
	opts.MaxNotificationBytes = int(c.MaxNotificationBytes)
	opts.MaxPendingNotifications = e.MaxPendingNotifications
	opts.MaxPendingNotificationBytes = int64(e.MaxPendingNotifyBytes)
	opts.NotifyRetryInterval, opts.NotifyRetryMaxInterval = c.NotifyRetryInterval.D(), c.NotifyRetryMaxInterval.D()
	if c.KeyFile == "" {
		return n, nil
	}
	key, err := peer.LoadKey(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("peer.key_file: %w", err)
	}
	n.key = key
	n.notifier = peer.NewNotifier(peer.Config{Name: peerName(c), Epoch: n.epoch, Key: key,
		DialTimeout: c.DialTimeout.D(), IOTimeout: c.IOTimeout.D(), PayloadChecksum: c.PayloadChecksum,
		Protection: peerProtection(c), MaxSlice: uint64(c.MaxSliceBytes), Logger: lg, Tracker: tr, Gate: n.gate})
	opts.Notify = func(ctx context.Context, to control.NotifyDest, submission, message string) (string, error) {
		var d peer.Delivery
		var err error
		if to.Name == "" {
			d, err = n.notifier.Notify(ctx, to.Addr, submission, message)
		} else {
			epoch, perr := strconv.ParseUint(to.Epoch, 16, 64)
			if perr != nil {
				return peer.NotSent.String(), control.Refused(fmt.Errorf("peer://%s: the cluster lists epoch %q: %w", to.Name, to.Epoch, perr))
			}
			d, err = n.notifier.NotifyEngine(ctx, to.Addr, to.Name, epoch, submission, message)
		}
		if errors.Is(err, peer.ErrRefused) {
			err = control.Refused(err) // never sent again
		}
		return d.String(), err
	}
	if c.Listen != "" {
		n.inbox = peer.NewInbox(peer.InboxLimits{Max: c.MaxPendingNotifications,
			MaxPerSender: c.MaxPendingNotificationsPerPeer, MaxBytes: int64(c.MaxPendingNotificationBytes)})
		opts.NextNotification = func(ctx context.Context) ([]byte, error) {
			m, err := n.inbox.Next(ctx)
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(m)
			return append(b, '\n'), err
		}
	}
	return n, nil
}

// close ends the notifier's connections.
func (n *notifications) close() {
	if n.notifier != nil {
		n.notifier.Close()
	}
}

// startPeerServer starts the listener when [peer] listen is set; nil
// when it is not.
func startPeerServer(c config.Peer, svc *control.Service, n *notifications, issuer *peer.Issuer, superseded func(string, uint64) bool, lg *slog.Logger) (*peer.Server, error) {
	if c.Listen == "" {
		return nil, nil
	}
	key := n.key
	var allowed []netip.Prefix
	for _, n := range c.AllowedNetworks {
		allowed = append(allowed, netip.MustParsePrefix(n)) // validated by config
	}
	s := peer.NewServer(peer.ServerConfig{Name: peerName(c), Key: key, Protection: peerProtection(c), IOTimeout: c.IOTimeout.D(),
		MaxSlice: uint64(c.MaxSliceBytes), Allowed: allowed, MaxHandshakes: c.MaxHandshakes, Logger: lg, Epoch: n.epoch,
		Inbox: n.inbox, MaxNotifyBytes: uint64(c.MaxNotificationBytes), Credit: issuer, Superseded: superseded, Gate: n.gate}, serviceExports{svc})
	if err := s.Listen(c.Listen); err != nil {
		return nil, err
	}
	return s, nil
}

// peerFigures lists the daemon's peer connections for the mount: the
// Conns it dialed (tracked) and the sessions peers opened to its
// listener (srv returns nil until it listens, or without one).
func peerFigures(tr *peer.Tracker, srv func() *peer.Server) func() []control.PeerConn {
	return func() []control.PeerConn {
		var out []control.PeerConn
		for _, c := range tr.Conns() {
			out = append(out, control.PeerConn{ID: c.ID, Direction: "out", Addr: c.Addr, Name: c.Name, Epoch: c.Epoch,
				Lanes: c.Lanes, OpenLanes: c.OpenLanes, State: c.State, BytesSent: c.BytesSent, BytesReceived: c.BytesReceived,
				Frames: c.Frames, Errors: c.Errors, RTTMicros: c.RTTMicros, Since: c.Since})
		}
		if s := srv(); s != nil {
			for _, ss := range s.Sessions() {
				out = append(out, control.PeerConn{ID: ss.ID, Direction: "in", Addr: ss.Remote, Name: ss.Name, Epoch: ss.Epoch,
					Lanes: ss.Lanes, State: "connected", BytesSent: ss.BytesSent, BytesReceived: ss.BytesReceived,
					Frames: ss.Frames, Errors: ss.Errors, Since: ss.Since})
			}
		}
		return out
	}
}

// listenerFigures is the listener's totals for /stats and /metrics; nil
// until the daemon listens.
func listenerFigures(srv func() *peer.Server) func() *control.PeerListener {
	return func() *control.PeerListener {
		s := srv()
		if s == nil {
			return nil
		}
		st := s.Stats()
		return &control.PeerListener{Sessions: st.Sessions, Lanes: st.Lanes, Handshaking: st.Handshaking,
			Refused: st.Refused, Displaced: st.Displaced, Corrupt: st.Corrupt, Reads: st.Reads, Writes: st.Writes,
			BytesIn: st.BytesIn, BytesOut: st.BytesOut, Notified: st.Notified, InboxFull: st.Full, Pending: st.Pending}
	}
}

// remoteDialer returns how the daemon opens a peer's region as a segment
// (tcp:// with one lane, hp_tcp:// and peer://NAME with [peer] lanes),
// with [peer]'s key and timeouts, under the daemon's epoch (a receiver
// counts a sender's frames by name and epoch: receiver credits); nil
// without a key_file (such segments are refused). For peer://NAME it
// sends nothing unless the engine that answers is NAME with the epoch
// the cluster lists, and the connection follows the cluster's view
// (conns).
func remoteDialer(c config.Peer, epoch uint64, gate *peer.Gate, tr *peer.Tracker, conns *namedRemotes, lg *slog.Logger) (func(context.Context, control.RemoteURI) (engine.Remote, error), error) {
	if c.KeyFile == "" {
		return nil, nil
	}
	key, err := peer.LoadKey(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("peer.key_file: %w", err)
	}
	return func(ctx context.Context, u control.RemoteURI) (engine.Remote, error) {
		lanes := 1
		if u.Scheme == "hp_tcp" {
			lanes = c.Lanes
		}
		conn, err := peer.Dial(ctx, u.Addr, peer.Config{Name: peerName(c), Epoch: epoch, Key: key, Lanes: lanes,
			DialTimeout: c.DialTimeout.D(), IOTimeout: c.IOTimeout.D(), KeepAlive: c.KeepAliveInterval.D(),
			PayloadChecksum: c.PayloadChecksum, Protection: peerProtection(c), MaxSlice: uint64(c.MaxSliceBytes), Logger: lg, Tracker: tr, Gate: gate})
		if err != nil {
			return nil, err
		}
		if u.Name != "" {
			if err := sameEngine(conn, u); err != nil {
				conn.Close()
				return nil, err
			}
		}
		r, err := peer.OpenRemote(ctx, conn, u.Region)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if u.Name != "" {
			return conns.add(u.Name, r), nil // follows the cluster's view
		}
		return r, nil
	}, nil
}

// errStaleName: the engine answering at a name's address is not the
// incarnation the cluster lists.
var errStaleName = fmt.Errorf("the cluster's record is stale: %w", engine.ErrNotFound)

// sameEngine checks that conn reached the engine u names, with the epoch
// the cluster lists; nothing has been sent on it but the handshake.
func sameEngine(conn *peer.Conn, u control.RemoteURI) error {
	got := discovery.Epoch(conn.PeerEpoch()).String()
	if conn.PeerName() == u.Name && got == u.Epoch {
		return nil
	}
	return fmt.Errorf("peer://%s: the engine at %s is %q epoch %s, but the cluster lists %q epoch %s (it restarted or left since); nothing was sent (effect none): %w",
		u.Name, u.Addr, conn.PeerName(), got, u.Name, u.Epoch, errStaleName)
}

// peerResult is the JSON line `orbitefs peer` prints.
type peerResult struct {
	Op      string  `json:"op"`
	Peer    string  `json:"peer"`
	Name    string  `json:"peer_name,omitempty"`
	Region  string  `json:"region"`
	Offset  uint64  `json:"offset"`
	Bytes   uint64  `json:"bytes"`
	Lanes   int     `json:"lanes"`
	Effect  string  `json:"effect,omitempty"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// peerUsage is `orbitefs peer`'s help.
const peerUsage = `usage: orbitefs peer read|write|regions --addr HOST:PORT|peer://NAME[/REGION] [flags]

  peer write --addr A --region R [--offset N] --file F   F's bytes into the peer's region R at N
  peer read  --addr A --region R [--offset N] [--length N] --file F
                                                         the region's bytes into F (created or truncated)
  peer regions --addr A                                  the peer's exported regions as JSON lines
The key, lanes and timeouts come from --config's [peer] section. peer://NAME
is resolved through the etcd of --config's [cluster] section; the engine
answering must be NAME with the epoch etcd lists (else nothing is sent).
N is a size (4096, "4MiB"). ` + "`orbitefs peer read -h`" + ` prints every flag.
`

// peerArgs are `orbitefs peer OP`'s flags.
type peerArgs struct {
	cfgPath, addr, region, file string
	name                        string // from --addr peer://NAME[/REGION]; "" for host:port
	offset, length              uint64
	lanes                       int
}

// parsePeerArgs parses one peer operation's flags (usage and errors to
// out); flag.ErrHelp for -h.
func parsePeerArgs(op string, args []string, out io.Writer) (peerArgs, error) {
	var a peerArgs
	var offset, length string
	fl := flag.NewFlagSet("peer "+op, flag.ContinueOnError)
	fl.SetOutput(out)
	fl.Usage = func() {
		fmt.Fprint(out, peerUsage+"\nflags:\n")
		fl.PrintDefaults()
	}
	fl.StringVar(&a.cfgPath, "config", "", "TOML config `file` whose [peer] section gives key_file, lanes and timeouts")
	fl.StringVar(&a.addr, "addr", "", "the peer's `host:port` ([peer] listen on its side), or peer://NAME[/REGION] resolved through [cluster]")
	fl.StringVar(&a.region, "region", "", "the peer's exported region `name`")
	fl.StringVar(&offset, "offset", "0", "byte `offset` in the region (a size: 4096, 4MiB)")
	fl.StringVar(&length, "length", "", "bytes to read, a `size` (4096, 4MiB; default: to the region's end)")
	fl.StringVar(&a.file, "file", "", "local `file`: the source of a write, the destination of a read")
	fl.IntVar(&a.lanes, "lanes", 0, "data lanes (default: [peer] lanes)")
	if err := fl.Parse(args); err != nil {
		return a, err
	}
	if fl.NArg() != 0 {
		return a, fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	n, err := config.ParseSize(offset)
	if err != nil {
		return a, fmt.Errorf("--offset: %v", err)
	}
	a.offset = uint64(n)
	if length != "" {
		if n, err = config.ParseSize(length); err != nil {
			return a, fmt.Errorf("--length: %v", err)
		}
		a.length = uint64(n)
	}
	target, err := parsePeerTarget(a.addr, a.region)
	if err != nil {
		return a, err
	}
	a.name, a.region = target.name, target.region
	if a.addr == "" || (op != "regions" && (a.region == "" || a.file == "")) {
		return a, errors.New("--addr, --region and --file are required (regions needs only --addr)")
	}
	return a, nil
}

func runPeer(args []string) int {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(os.Stdout, peerUsage)
		return 0
	}
	if len(args) < 1 || (args[0] != "read" && args[0] != "write" && args[0] != "regions") {
		fmt.Fprint(os.Stderr, peerUsage)
		return 2
	}
	op := args[0]
	var msg bytes.Buffer
	a, err := parsePeerArgs(op, args[1:], &msg)
	if errors.Is(err, flag.ErrHelp) {
		os.Stdout.Write(msg.Bytes())
		return 0
	}
	if err != nil {
		os.Stderr.Write(msg.Bytes())
		fmt.Fprintf(os.Stderr, "orbitefs peer %s: %v\n", op, err)
		return 2
	}
	cfgPath, addr, region, file, lanes := &a.cfgPath, &a.addr, &a.region, &a.file, &a.lanes
	offset, length := &a.offset, &a.length
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "orbitefs peer %s: %s\n", op, fmt.Sprintf(format, a...))
		return 1
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fail("%v", err)
	}
	var want *discovery.Record // the incarnation the cluster lists, for peer://NAME
	if a.name != "" {
		rec, err := resolvePeer(context.Background(), cfg.Cluster, a.name)
		if err != nil {
			return fail("%v", err)
		}
		want, *addr = &rec, rec.Addr
	}
	pc := cfg.Peer
	if *lanes != 0 {
		if *lanes < 1 || *lanes > config.MaxPeerLanes {
			return fail("--lanes %d: want 1 to %d", *lanes, config.MaxPeerLanes)
		}
		pc.Lanes = *lanes
	}
	if pc.KeyFile == "" {
		return fail("no key: set [peer] key_file in the --config file")
	}
	key, err := peer.LoadKey(pc.KeyFile)
	if err != nil {
		return fail("peer.key_file: %v", err)
	}
	ctx := context.Background()
	c, err := peer.Dial(ctx, *addr, peer.Config{Name: peerName(pc), Key: key, Lanes: pc.Lanes,
		DialTimeout: pc.DialTimeout.D(), IOTimeout: pc.IOTimeout.D(), KeepAlive: pc.KeepAliveInterval.D(),
		PayloadChecksum: pc.PayloadChecksum, Protection: peerProtection(pc), MaxSlice: uint64(pc.MaxSliceBytes)})
	if err != nil {
		return fail("%v", err)
	}
	defer c.Close()
	if want != nil && (c.PeerName() != want.Name || discovery.Epoch(c.PeerEpoch()) != want.Epoch) {
		// The name's record is stale (it restarted since, or another
		// engine took the address): nothing was sent, effect none.
		return fail("peer://%s: the engine at %s is %q epoch %s, but the cluster lists %q epoch %s; nothing was sent (effect none): try again once the cluster's record is current",
			want.Name, *addr, c.PeerName(), discovery.Epoch(c.PeerEpoch()), want.Name, want.Epoch)
	}
	out := json.NewEncoder(os.Stdout)
	if op == "regions" {
		for _, d := range c.Regions() {
			out.Encode(map[string]any{"name": d.Name, "location": d.Location, "bytes": d.Bytes, "export": d.Perm.String()})
		}
		return 0
	}
	res := peerResult{Op: op, Peer: *addr, Name: c.PeerName(), Region: *region, Offset: *offset, Lanes: pc.Lanes}
	start := time.Now()
	var buf []byte
	if op == "write" {
		if buf, err = os.ReadFile(*file); err != nil {
			return fail("%v", err)
		}
		err = c.Write(ctx, *region, *offset, buf)
		res.Effect = peer.EffectOf(err).String()
	} else {
		n := *length
		if n == 0 {
			for _, d := range c.Regions() {
				if d.Name == *region && d.Bytes > *offset {
					n = d.Bytes - *offset
				}
			}
		}
		if n == 0 {
			return fail("nothing to read: region %q is not exported by %s, or --offset %d is at its end; give --length", *region, *addr, *offset)
		}
		buf = make([]byte, n)
		if err = c.Read(ctx, *region, *offset, buf); err == nil {
			err = os.WriteFile(*file, buf, 0o644)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		res.Error = err.Error()
		out.Encode(res)
		return fail("%v", err)
	}
	res.Bytes = uint64(len(buf))
	out.Encode(res)
	return 0
}

// peerTarget is --addr: a host:port, or a name of the cluster.
type peerTarget struct {
	name   string // from peer://NAME; "" for a host:port
	region string // from peer://NAME/REGION, or --region
}

// parsePeerTarget reads --addr; a region in the URL and a different
// --region are refused.
func parsePeerTarget(addr, region string) (peerTarget, error) {
	rest, ok := strings.CutPrefix(addr, "peer://")
	if !ok {
		return peerTarget{region: region}, nil
	}
	name, reg, _ := strings.Cut(rest, "/")
	if name == "" || strings.Contains(reg, "/") {
		return peerTarget{}, fmt.Errorf("--addr %q: want peer://NAME or peer://NAME/REGION", addr)
	}
	if reg != "" && region != "" && reg != region {
		return peerTarget{}, fmt.Errorf("--addr %q names region %q but --region is %q: give one", addr, reg, region)
	}
	if reg == "" {
		reg = region
	}
	return peerTarget{name: name, region: reg}, nil
}

// resolvePeer reads name's live record from the cluster's etcd.
func resolvePeer(ctx context.Context, c config.Cluster, name string) (discovery.Record, error) {
	if !c.Enabled() {
		return discovery.Record{}, fmt.Errorf("peer://%s: no cluster to resolve it: set [cluster] etcd_endpoints in the --config file", name)
	}
	cli, err := etcdClient(ctx, c)
	if err != nil {
		return discovery.Record{}, err
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, c.DialTimeout.D())
	defer cancel()
	rec, ok, err := discovery.Lookup(lctx, cli, c.Prefix, name)
	if err != nil {
		return discovery.Record{}, fmt.Errorf("peer://%s: %w", name, err)
	}
	if !ok {
		return discovery.Record{}, fmt.Errorf("peer://%s: no engine of that name is registered under %s%s (cluster.prefix); is it running?", name, c.Prefix, "engines/")
	}
	return rec, nil
}
