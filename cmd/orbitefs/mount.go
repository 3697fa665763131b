// mount.go owns `orbitefs mount`: load the config, build the engine and
// the control Service, mount, serve in the foreground, and on SIGINT or
// SIGTERM shut down in order: refuse new work, drain (bounded by
// mount.shutdown_timeout), wake waiters, close the engine, unmount (lazily
// if busy), exit 0. The whole shutdown is bounded by mount.exit_timeout:
// a step still waiting then (on a store that stopped answering, on a
// client holding the mount) is left behind, the FUSE connection is
// aborted, what was left is logged, and the process exits 1.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/discovery"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/fusefs"
	"github.com/orbitefs/orbitefs/peer"
)

// unmountGrace is how long a detached mount may keep serving a client
// that still holds a file before the connection is aborted.
const unmountGrace = 2 * time.Second

// mountSynopsis is mount's arguments, as the help texts show them; it
// names every flag of mountFlags (TestUsageListsEverything).
const mountSynopsis = "[--config FILE] [--engine-json FILE] [--qos FILE] [--debug] MOUNTPOINT"

// mountArgs is mount's command line.
type mountArgs struct {
	cfgPath, qosPath, engineJSON string
	debug                        bool
}

// mountFlags is mount's flag set, filling a.
func mountFlags(a *mountArgs) *flag.FlagSet {
	fl := flag.NewFlagSet("mount", flag.ContinueOnError)
	fl.StringVar(&a.cfgPath, "config", "", "TOML config `file` (default: the embedded config, see docs/config.md)")
	fl.BoolVar(&a.debug, "debug", false, "log every FUSE request (very verbose)")
	fl.StringVar(&a.qosPath, "qos", "", "JSON `file` with a \"qos\" section (QoS contracts); replaces the config's engine.qos_file/qos_json")
	fl.StringVar(&a.engineJSON, "engine-json", "", "complete engine JSON `file` (engine keys, \"runtime_queue\" and \"qos\" included); replaces the config's [engine] section")
	fl.Usage = func() {
		fmt.Fprintf(fl.Output(), "usage: orbitefs mount %s\n\n"+
			"Serves the orbitefs control filesystem at MOUNTPOINT in the foreground until\n"+
			"SIGINT or SIGTERM. Root mounts directly; other users need fusermount3 (fuse3).\n\n", mountSynopsis)
		fl.PrintDefaults()
	}
	return fl
}

// mountPoint is the one argument left after the flags. Go's flag
// package stops at the first argument that is not a flag, so a flag
// written after MOUNTPOINT is an extra argument: say so, rather than
// leave the user with the usage text alone.
func mountPoint(fl *flag.FlagSet) (string, error) {
	switch args := fl.Args(); {
	case len(args) == 0:
		return "", errors.New("no MOUNTPOINT given")
	case len(args) > 1 && strings.HasPrefix(args[1], "-"):
		return "", fmt.Errorf("%s after MOUNTPOINT %s: flags go before it (orbitefs mount %s %s)", args[1], args[0], strings.Join(args[1:], " "), args[0])
	case len(args) > 1:
		return "", fmt.Errorf("one MOUNTPOINT expected, got %d arguments: %s", len(args), strings.Join(args, " "))
	default:
		return args[0], nil
	}
}

func runMount(args []string) int {
	var a mountArgs
	fl := mountFlags(&a)
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfgPath, debug, qosPath, engineJSON := &a.cfgPath, &a.debug, &a.qosPath, &a.engineJSON
	dir, err := mountPoint(fl)
	if err != nil {
		fmt.Fprintf(fl.Output(), "orbitefs mount: %v\n\n", err)
		fl.Usage()
		return 2
	}

	cfg, err := config.Load(*cfgPath)
	if err == nil {
		err = cfg.CheckMember()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
		return 1
	}
	level, _ := config.ParseLevel(cfg.Mount.LogLevel) // validated by Load
	if *debug {
		level = slog.LevelDebug
	}
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ecfg, err := engineConfig(cfg, *engineJSON, *qosPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
		return 1
	}
	ecfg.Logger = lg
	e, err := engine.New(ecfg, transports(ecfg)...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
		return 1
	}
	sopts := control.OptionsFromConfig(cfg.Mount, buildVersion(), lg)
	sopts.StoreCallTimeout = ecfg.StoreCallTimeout.D()
	if abs, err := filepath.Abs(dir); err == nil {
		sopts.OwnMount = fusefs.LeadsInto(abs)
	}
	var ownDev atomic.Pointer[string] // set once mounted
	sopts.OwnDevice = func() string {
		if d := ownDev.Load(); d != nil {
			return *d
		}
		return ""
	}
	tracker := peer.NewTracker()
	var psrvAt atomic.Pointer[peer.Server] // set once listening
	sopts.Peers = peerFigures(tracker, psrvAt.Load)
	sopts.PeerListener = listenerFigures(psrvAt.Load)
	notes, err := newNotifications(cfg.Peer, ecfg, &sopts, tracker, lg)
	if err != nil {
		e.Close(time.Second)
		fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
		return 1
	}
	defer notes.close()
	issuer := newIssuer(cfg.Peer.ReceiverCredit, &sopts)
	sopts.DialCredit = creditDialer(cfg.Peer, notes, lg)
	conns := &namedRemotes{} // peer:// segments' connections, by name
	if sopts.DialRemote, err = remoteDialer(cfg.Peer, notes.epoch, tracker, conns, lg); err != nil {
		e.Close(time.Second)
		fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
		return 1
	}
	var mem *member
	if cfg.Cluster.Enabled() {
		mem = newMember(cfg.Cluster, conns, lg)
		conns.lookup = mem.addrOf // peer:// redials follow the view
		sopts.Cluster = mem
		sopts.ExportsChanged = mem.exportsChanged
	}
	svc := control.New(e, sopts)

	var superseded func(string, uint64) bool
	if mem != nil {
		superseded = mem.superseded
	}
	psrv, err := startPeerServer(cfg.Peer, svc, notes, issuer, superseded, lg)
	if err != nil {
		e.Close(time.Second)
		fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
		return 1
	}
	if psrv != nil {
		psrvAt.Store(psrv)
		defer psrv.Close()
	}
	if mem != nil {
		mem.server = psrv
		// Registered before mounting: a mounted member is listed.
		rec := discovery.Record{Name: peerName(cfg.Peer), Epoch: discovery.Epoch(psrv.Epoch()),
			Addr: cfg.Cluster.AdvertiseAddr(psrv.Addr().String())}
		if err := mem.start(context.Background(), rec, exportedRegions(svc)); err != nil {
			psrv.Close()
			e.Close(time.Second)
			fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
			return 1
		}
		defer mem.close()
	}

	// Signals are caught before mounting, so one arriving during the
	// mount still leads to an orderly unmount.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	srv, err := fusefs.Mount(dir, svc, fusefs.Options{MaxWrite: int(cfg.Mount.MaxWrite),
		AllowOther: cfg.Mount.AllowOther, Logger: lg, Debug: *debug})
	if err != nil {
		if mem != nil {
			mem.close()
		}
		e.Close(time.Second)
		fmt.Fprintf(os.Stderr, "orbitefs mount: %v\n", err)
		return 1
	}
	dev := srv.Device()
	ownDev.Store(&dev)
	source := "embedded default config"
	if *cfgPath != "" {
		source = *cfgPath
	}
	if ecfg.QoS != nil {
		lg.Info("qos contracts loaded", "op", "mount", "source", qosSource(cfg, a), "contracts", len(e.QoSContracts()),
			"tenants", len(ecfg.QoS.Tenants))
	}
	lg.Info("mounted", "op", "mount", "dir", srv.Dir(), "version", buildVersion(), "config", source,
		"allowed_roots", cfg.Mount.AllowedRoots, "try", "cat "+srv.Dir()+"/README")

	select {
	case s := <-sigs:
		lg.Info("shutting down", "op", "shutdown", "signal", s.String(), "timeout", cfg.Mount.ShutdownTimeout.D())
	case <-srv.Done():
		lg.Warn("the mount went away (unmounted from outside); shutting down", "op", "shutdown", "dir", srv.Dir())
	}
	forced := time.AfterFunc(cfg.Mount.ExitTimeout.D(), func() { forceExit(lg, e, srv, cfg.Mount.ExitTimeout.D()) })
	defer forced.Stop()
	go func() {
		for s := range sigs {
			lg.Warn("shutdown already in progress; it is bounded by mount.shutdown_timeout", "op", "shutdown", "signal", s.String())
		}
	}()
	if mem != nil {
		mem.close() // leave the cluster first: peers stop resolving this engine
	}
	if psrv != nil {
		psrv.Close() // peers first: nothing reaches the regions while the engine drains
	}
	if err := svc.Shutdown(cfg.Mount.ShutdownTimeout.D()); err != nil {
		lg.Warn("engine close", "op", "shutdown", "err", err)
	}
	if err := srv.Unmount(unmountGrace); err != nil {
		lg.Error("unmount", "op", "unmount", "dir", srv.Dir(), "err", err)
	}
	lg.Info("stopped", "op", "shutdown")
	return 0
}

// forceExit ends a shutdown that overran mount.exit_timeout: abort the
// FUSE connection (clients waiting on the mount get ENOTCONN instead of
// waiting for a process that is going away), log what was left, exit 1.
// Nothing here may wait on the engine for long: Stats runs on a helper
// and is skipped if it does not answer within a second.
func forceExit(lg *slog.Logger, e *engine.Engine, srv *fusefs.Server, bound time.Duration) {
	if err := srv.Abort(); err != nil {
		lg.Error("forced exit: cannot abort the FUSE connection; it ends when the process exits", "op", "shutdown", "err", err)
	}
	stats := make(chan engine.Stats, 1)
	go func() { stats <- e.Stats() }()
	select {
	case st := <-stats:
		lg.Error("forced exit: shutdown did not finish within mount.exit_timeout", "op", "shutdown", "exit_timeout", bound,
			"batches", st.Batches, "workers_running", st.WorkersRunning, "unquiesced_groups", st.UnquiescedGroups,
			"segments", st.Segments, "segments_draining", st.SegmentsDraining)
	case <-time.After(time.Second):
		lg.Error("forced exit: shutdown did not finish within mount.exit_timeout; engine stats did not answer", "op", "shutdown", "exit_timeout", bound)
	}
	os.Exit(1)
}

// engineConfig is the TOML's engine section, or the --engine-json
// document instead, with the --qos document's contracts on top. Every
// document is parsed and validated here, before anything is mounted.
func engineConfig(cfg *config.Daemon, engineJSON, qosPath string) (config.Engine, error) {
	ecfg := cfg.Engine
	if engineJSON != "" {
		e, err := config.EngineFromJSONFile(engineJSON)
		if err != nil {
			return config.Engine{}, fmt.Errorf("--engine-json: %w", err)
		}
		e.AllowedRoots = cfg.Engine.AllowedRoots // confinement is the mount's
		ecfg = e
	}
	if qosPath != "" {
		q, err := config.ParseQoSFile(qosPath)
		if err != nil {
			return config.Engine{}, fmt.Errorf("--qos: %w", err)
		}
		ecfg.QoS = q
	}
	// The keys of the other sections bounded by engine keys
	// (mount.default_batch_capacity by engine.max_batch_requests, ...)
	// were checked against the TOML's [engine]: check them again
	// against the engine that will run.
	d := *cfg
	d.Engine = ecfg
	if err := d.Validate(); err != nil {
		switch {
		case engineJSON != "":
			return config.Engine{}, fmt.Errorf("--engine-json %s: %w", engineJSON, err)
		case qosPath != "":
			return config.Engine{}, fmt.Errorf("--qos %s: %w", qosPath, err)
		}
		return config.Engine{}, err
	}
	return ecfg, nil
}

// qosSource names where the QoS contracts came from, for the startup log.
func qosSource(cfg *config.Daemon, a mountArgs) string {
	switch {
	case a.qosPath != "":
		return a.qosPath
	case a.engineJSON != "":
		return a.engineJSON + " (its \"qos\" section)"
	case cfg.Engine.QoSFile != "":
		return cfg.Engine.QoSFile + " (config engine.qos_file)"
	}
	return "config engine.qos_json"
}
