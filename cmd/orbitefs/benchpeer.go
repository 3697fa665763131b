// benchpeer.go owns `orbitefs bench peer`: flag parsing, dialing the peer
// with the --config file's [peer] keys, and for --op notify an in-process
// receiver (optionally listening inside another network namespace). The
// workloads live in package bench (peer.go, peernotify.go).

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/orbitefs/orbitefs/bench"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/peer"
)

const benchPeerUsage = `usage: orbitefs bench peer --addr HOST:PORT [flags]

READ or WRITE of --size requests against a peer's exported --region by
--concurrency clients over one connection of --lanes lanes for --runtime;
reports GB/s, requests/s, latency percentiles and CPU seconds per GB
(this process, plus the serving daemon's with --server-pid). --stream
SIZE adds one client writing SIZE requests back to back on the same
connection (the foreground latencies are measured beside it).

--verify checks every byte: each client owns its slots of the region; a
WRITE carries a pattern of its offset and round and is read back, a READ
is compared with the round its slot holds (written first when unknown).
Bytes moved (read-backs and priming included) and mismatched bytes and
requests are reported; any mismatch fails the run. --total SIZE ends a
--verify run once SIZE bytes moved (--runtime still bounds it).

--op notify sends --count numbered completion notifications instead, to a
receiver this process runs at --listen (inside the network namespace file
--listen-netns, e.g. /var/run/netns/NAME, when set), and checks that each
acknowledged one arrives exactly once.

The key and timeouts come from --config's [peer] section (key_file is
required). bench/peer-compare.sh runs it beside iperf3.

flags:
`

func benchPeerMain(args []string) int {
	fs := flag.NewFlagSet("orbitefs bench peer", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, benchPeerUsage)
		fs.PrintDefaults()
	}
	var o bench.PeerOptions
	cfgPath := fs.String("config", "", "configuration file with [peer] key_file (required)")
	addr := fs.String("addr", "", "the peer's HOST:PORT (required unless --op notify)")
	fs.StringVar(&o.Region, "region", "kv", "the peer's exported region")
	fs.StringVar(&o.Op, "op", "write", "read, write or notify")
	size := fs.String("size", "1MiB", "bytes per request")
	stream := fs.String("stream", "0", "bytes per request of a background write stream (0: none)")
	fs.StringVar(&o.StreamRegion, "stream-region", "", "the region the stream writes (default: --region)")
	lanes := fs.Int("lanes", 0, "data lanes (default: [peer] lanes)")
	linger := fs.String("bulk-gate-linger", "", "how long the bulk gate stays engaged after a small request, 0s: never (default: [peer] bulk_gate_linger)")
	protection := fs.String("frame-protection", "", "none or aead: what guards frames after the handshake; the peer must run the same (default: [peer] frame_protection)")
	fs.IntVar(&o.Concurrency, "concurrency", 1, "requests in flight (clients)")
	fs.DurationVar(&o.Runtime, "runtime", 5*time.Second, "how long to measure")
	fs.IntVar(&o.Count, "count", 100000, "notifications (--op notify)")
	fs.BoolVar(&o.Verify, "verify", false, "check every byte read and written (see above)")
	total := fs.String("total", "0", "--verify: stop once this many bytes moved (0: run for --runtime)")
	fs.IntVar(&o.ServerPID, "server-pid", 0, "the serving daemon's pid, to add its CPU time")
	listen := fs.String("listen", "127.0.0.1:0", "--op notify: the receiver's listen address")
	listenNetns := fs.String("listen-netns", "", "--op notify: network namespace file the receiver listens in")
	asJSON := fs.Bool("json", false, "print one JSON object")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE` (go tool pprof)")
	traceFile := fs.String("trace", "", "write an execution trace of the run to `FILE` (go tool trace)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if *cfgPath == "" {
		errs = append(errs, errors.New("--config is required (its [peer] key_file)"))
	}
	if *addr == "" && o.Op != "notify" {
		errs = append(errs, errors.New("--addr is required"))
	}
	if n, err := config.ParseSize(*size); err != nil {
		errs = append(errs, fmt.Errorf("--size: %w", err))
	} else {
		o.Size = uint64(n)
	}
	if n, err := config.ParseSize(*stream); err != nil {
		errs = append(errs, fmt.Errorf("--stream: %w", err))
	} else {
		o.Stream = uint64(n)
	}
	if n, err := config.ParseSize(*total); err != nil {
		errs = append(errs, fmt.Errorf("--total: %w", err))
	} else {
		o.Total = uint64(n)
	}
	var gateLinger *config.Duration
	if *linger != "" {
		d, err := config.ParseDuration(*linger)
		if err != nil {
			errs = append(errs, fmt.Errorf("--bulk-gate-linger: %w", err))
		} else if err := config.CheckBulkGateLinger("--bulk-gate-linger", d); err != nil {
			errs = append(errs, err)
		} else {
			gateLinger = &d
		}
	}
	if *protection != "" {
		if err := config.CheckFrameProtection("--frame-protection", *protection); err != nil {
			errs = append(errs, err)
		}
	}
	if *lanes != 0 && (*lanes < 1 || *lanes > config.MaxPeerLanes) {
		errs = append(errs, fmt.Errorf("--lanes %d: want 1 to %d", *lanes, config.MaxPeerLanes))
	}
	// Checked again against the regions once dialed.
	o.RegionBytes, o.StreamRegionBytes = max(o.Size, o.Stream, o.Size*uint64(max(o.Concurrency, 1))), o.Stream
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "orbitefs bench peer: %v\n", errors.Join(errs...))
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "orbitefs bench peer: %v\n", err)
		return 1
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fail(err)
	}
	pc := cfg.Peer
	if *lanes != 0 {
		pc.Lanes = *lanes
	}
	if gateLinger != nil {
		pc.BulkGateLinger = *gateLinger
	}
	if *protection != "" {
		pc.FrameProtection = *protection
	}
	if pc.KeyFile == "" {
		return fail(errors.New("no key: set [peer] key_file in the --config file"))
	}
	key, err := peer.LoadKey(pc.KeyFile)
	if err != nil {
		return fail(fmt.Errorf("peer.key_file: %w", err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	gate := peer.NewGate(pc.BulkGateLinger.D()) // one per process: the receiver and the client share it
	var srv *peer.Server
	if o.Op == "notify" {
		max := max(o.Count, peer.DefaultMaxPending)
		srv = peer.NewServer(peer.ServerConfig{Name: "bench-receiver", Key: key, Protection: peerProtection(pc), IOTimeout: pc.IOTimeout.D(),
			MaxSlice: uint64(pc.MaxSliceBytes), Inbox: peer.NewInbox(peer.InboxLimits{Max: max, MaxPerSender: max, MaxBytes: 64 << 20}), Gate: gate},
			noExports{})
		listenHere := func() error { return srv.Listen(*listen) }
		if *listenNetns != "" {
			err = bench.InNetns(*listenNetns, listenHere)
		} else {
			err = listenHere()
		}
		if err != nil {
			return fail(err)
		}
		defer srv.Close()
		*addr = srv.Addr().String()
	}
	c, err := peer.Dial(ctx, *addr, peer.Config{Name: peerName(pc), Key: key, Lanes: pc.Lanes,
		DialTimeout: pc.DialTimeout.D(), IOTimeout: pc.IOTimeout.D(), KeepAlive: pc.KeepAliveInterval.D(),
		PayloadChecksum: pc.PayloadChecksum, Protection: peerProtection(pc), MaxSlice: uint64(pc.MaxSliceBytes), Gate: gate})
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	stopProfiles, err := startProfiles(*cpuprofile, *traceFile)
	if err != nil {
		return fail(err)
	}
	defer stopProfiles()
	var res bench.PeerResult
	if o.Op == "notify" {
		res, err = bench.RunPeerNotify(ctx, c, srv.Notification, o)
	} else {
		o.RegionBytes, o.StreamRegionBytes = 0, 0
		for _, d := range c.Regions() {
			if d.Name == o.Region {
				o.RegionBytes = d.Bytes
			}
			if d.Name == o.StreamRegion {
				o.StreamRegionBytes = d.Bytes
			}
		}
		if o.RegionBytes == 0 {
			return fail(fmt.Errorf("the peer %q exports no region %q (or it is empty)", c.PeerName(), o.Region))
		}
		if o.Stream > 0 && o.StreamRegion != "" && o.StreamRegionBytes == 0 {
			return fail(fmt.Errorf("the peer %q exports no region %q (or it is empty)", c.PeerName(), o.StreamRegion))
		}
		res, err = bench.RunPeer(ctx, c, o)
	}
	res.Peer, res.Lanes, res.BulkGateLinger = *addr, pc.Lanes, gate.Linger().String()
	res.FrameProtection = peerProtection(pc).String()
	if *asJSON {
		b, _ := json.Marshal(res)
		fmt.Printf("%s\n", b)
	} else {
		fmt.Println(res)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

// noExports is the notification receiver's empty set of regions.
type noExports struct{}

func (noExports) Exports() []peer.Export            { return nil }
func (noExports) Export(uint64) (peer.Export, bool) { return peer.Export{}, false }
