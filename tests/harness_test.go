// harness_test.go owns the daemon under test: building it once per test
// binary, starting it on a temporary mountpoint, the shell helpers, and a
// cleanup that never leaves a mount behind.
//
// Invariants:
//   - The daemon is always a separate process (the built binary); nothing
//     in the test process serves or holds the mount, so a hung daemon
//     cannot deadlock the test binary.
//   - Cleanup touches the mount only through /proc/self/mountinfo,
//     umount(2) with MNT_DETACH and the fusectl abort file, never through
//     stat or open of the mountpoint, so it cannot hang on a dead daemon.
//   - Every mountpoint the harness creates is recorded; TestMain fails the
//     package and removes the mount if any is still mounted at exit.

package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	mountWait     = 10 * time.Second // daemon start until the mount appears
	defaultTerm   = 10 * time.Second // SIGTERM until the daemon must have exited
	scriptTimeout = 30 * time.Second // one sh call
	fusectlDir    = "/sys/fs/fuse/connections"
)

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
	buildDir  string

	// mountpoints created by the harness, checked again in TestMain.
	mountpointsMu sync.Mutex
	mountpoints   []string

	// fusectlMounted is set when the harness mounted fusectl itself (the
	// abort path needs it); TestMain unmounts it again.
	fusectlMu      sync.Mutex
	fusectlMounted bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	mountpointsMu.Lock()
	dirs := append([]string(nil), mountpoints...)
	mountpointsMu.Unlock()
	for _, d := range dirs {
		if len(mountsAt(d)) > 0 {
			fmt.Fprintf(os.Stderr, "tests: FUSE mount left at %s; removing it\n", d)
			if err := forceUnmount(d); err != nil {
				fmt.Fprintf(os.Stderr, "tests: %v\n", err)
			}
			code = 1
		}
		os.Remove(d)
	}
	fusectlMu.Lock()
	if fusectlMounted {
		syscall.Unmount(fusectlDir, 0)
	}
	fusectlMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// needFUSE skips the test when no FUSE mount is possible here, or fails
// it when ORBITEFS_REQUIRE names fuse (require_test.go).
func needFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		unavailable(t, "fuse", "FUSE unavailable: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			unavailable(t, "fuse", "FUSE unavailable: not root and no fusermount3 on PATH")
		}
	}
	for _, tool := range []string{"bash", "cat", "dd", "cmp", "sha256sum", "jq", "truncate", "timeout", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the e2e suite needs %s on PATH: %v", tool, err)
		}
	}
}

// repoRoot finds the module root: `go env GOMOD` from the test's working
// directory (tests/), falling back to "..".
func repoRoot() (string, error) {
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if p := strings.TrimSpace(string(out)); p != "" && p != os.DevNull {
			return filepath.Dir(p), nil
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "orbitefs")); err != nil {
		return "", fmt.Errorf("cannot find the repository root: %w", err)
	}
	return root, nil
}

// daemonBinary builds ./cmd/orbitefs once per test binary (or returns
// $ORBITEFS_BIN).
func daemonBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("ORBITEFS_BIN"); p != "" {
			buildBin, buildErr = filepath.Abs(p)
			return
		}
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "orbitefs-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = dir
		bin := filepath.Join(dir, "orbitefs")
		// The commit and dirty flag, as `make build` stamps them.
		stamp, err := exec.Command("bash", filepath.Join(root, "scripts", "buildflags.sh")).Output()
		if err != nil {
			buildErr = fmt.Errorf("scripts/buildflags.sh: %w", err)
			return
		}
		args := []string{"build", "-ldflags=-checklinkname=0 " + strings.TrimSpace(string(stamp))}
		if os.Getenv("ORBITEFS_E2E_RACE") == "1" {
			args = append(args, "-race")
		}
		args = append(args, "-o", bin, "./cmd/orbitefs")
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s (in %s): %v\n%s", strings.Join(args, " "), root, err, out)
			return
		}
		buildBin = bin
	})
	if buildErr != nil {
		t.Fatalf("building the daemon: %v", buildErr)
	}
	return buildBin
}

// mount is one running daemon and its mountpoint.
type mount struct {
	dir string // the mountpoint
	bin string // the daemon binary
	cfg string // config file passed with --config, or ""
	cwd string // the daemon's working directory (never an allowed root by default)
	log string // the daemon's stdout and stderr
	dev string // "major:minor" of the mount, recorded when it appeared
	// before holds the mount IDs at the mountpoint before the start.
	before map[string]bool
	cmd    *exec.Cmd
	done   chan struct{} // closed when the daemon has exited
	werr   error         // cmd.Wait's result; read only after done

	termWait time.Duration

	scratchMu sync.Mutex
	scratch   map[*testing.T][2]string
}

// daemonOpts configures startDaemon.
type daemonOpts struct {
	// config is TOML text written to a file and passed with --config;
	// empty means no --config (the embedded defaults).
	config string
	// mountpoint reuses an existing directory (the stale-mount test);
	// empty means a fresh one.
	mountpoint string
	// termWait bounds the wait for exit after SIGTERM in cleanup
	// (default 10 s).
	termWait time.Duration
	// noWait returns as soon as the process started, without waiting for
	// the mount (tests that expect the start to fail).
	noWait bool
	// args are more flags for `orbitefs mount` (--qos FILE, ...).
	args []string
	// netns runs the daemon in that network namespace (nsenter --net:
	// `ip netns exec` would also give it a mount namespace of its own,
	// hiding its mount from the test).
	netns string
	// ownGroup runs the daemon in a process group of its own, for a
	// daemon the test stops (SIGSTOP): in the test's group, a stopped
	// member makes the kernel send SIGHUP and SIGCONT to every member
	// when the group is orphaned and one of them exits (the test binary
	// started from a shell that exited, another package's test binary
	// ending beside it), which resumes the daemon in the middle of its
	// stall.
	ownGroup bool
}

// startDaemon starts `orbitefs mount [--config F] DIR` as a separate
// process and waits until DIR is a FUSE mount. t.Cleanup stops it and
// guarantees the mount is gone.
func startDaemon(t *testing.T, o daemonOpts) *mount {
	t.Helper()
	needFUSE(t)
	bin := daemonBinary(t)
	work := t.TempDir()
	m := &mount{bin: bin, log: filepath.Join(work, "daemon.log"), done: make(chan struct{}),
		termWait: o.termWait, scratch: map[*testing.T][2]string{}}
	if m.termWait == 0 {
		m.termWait = defaultTerm
	}
	m.dir = o.mountpoint
	if m.dir == "" {
		// Not t.TempDir: its parent is 0700, and the security test needs
		// another user to reach the mountpoint and be refused by FUSE.
		d, err := os.MkdirTemp("", "orbitefs-mnt-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		m.dir = d
		// Registered before stop, so it runs after it. Remove, never
		// RemoveAll: a mountpoint must not be walked.
		t.Cleanup(func() { os.Remove(d) })
	}
	mountpointsMu.Lock()
	mountpoints = append(mountpoints, m.dir)
	mountpointsMu.Unlock()

	// The daemon's working directory is outside /tmp and /dev/shm, so a
	// test can tell that it is not an allowed root.
	cwdParent := "/var/tmp"
	if _, err := os.Stat(cwdParent); err != nil {
		cwdParent = work
	}
	cwd, err := os.MkdirTemp(cwdParent, "orbitefs-cwd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(cwd) })
	m.cwd = cwd

	args := []string{"mount"}
	if o.config != "" {
		m.cfg = filepath.Join(work, "orbitefs.toml")
		if err := os.WriteFile(m.cfg, []byte(o.config), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", m.cfg)
	}
	args = append(args, o.args...)
	args = append(args, m.dir)
	logf, err := os.Create(m.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	m.before = map[string]bool{}
	for _, e := range mountsAt(m.dir) {
		m.before[e.id] = true
	}
	if o.netns != "" {
		// nsenter execs the daemon: the pid stays the daemon's.
		args = append([]string{"--net=/run/netns/" + o.netns, bin}, args...)
		m.cmd = exec.Command("nsenter", args...)
	} else {
		m.cmd = exec.Command(bin, args...)
	}
	m.cmd.Dir = cwd
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	// If the test binary dies without cleanup, the daemon gets SIGTERM
	// and unmounts itself.
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: o.ownGroup}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Logf("daemon pid %d: %s %s (cwd %s)", m.cmd.Process.Pid, bin, strings.Join(args, " "), cwd)
	go func() {
		m.werr = m.cmd.Wait()
		close(m.done)
	}()
	t.Cleanup(func() { m.stop(t) })
	if o.noWait {
		return m
	}
	if err := m.waitMounted(mountWait); err != nil {
		t.Fatalf("daemon did not mount %s: %v\n%s", m.dir, err, m.logText())
	}
	return m
}

// waitMounted polls /proc/self/mountinfo until a FUSE mount that was not
// there before the daemon started appears at m.dir (a stale mount
// underneath does not count), then waits for the daemon to log that it
// mounted, or for the daemon to exit. The mount appears before go-fuse's
// Mount returns: it then opens a file on its own mount (its poll hack),
// and a SIGKILL while that request is in the daemon's hands leaves the
// process unable to exit, waiting for a reply only it could give
// (TestStaleMountAtStart's "daemon still running after 5s").
func (m *mount) waitMounted(d time.Duration) error {
	before := m.before
	deadline := time.Now().Add(d)
	mounted := false
	for {
		ents := mountsAt(m.dir)
		for _, e := range ents {
			if !mounted && strings.HasPrefix(e.fstype, "fuse") && !before[e.id] {
				m.dev = e.dev
				mounted = true
			}
		}
		// A stale mount cleared by the daemon frees its mount ID, and the
		// new mount may get the same one: then ask a child process (which
		// may block, the test process must not) whether the mount answers.
		if !mounted && len(before) > 0 && len(ents) > 0 {
			if exec.Command("timeout", "1", "stat", "-c", "%i", m.dir).Run() == nil {
				m.dev = ents[len(ents)-1].dev
				mounted = true
			}
		}
		if mounted && strings.Contains(m.logText(), "msg=mounted") {
			return nil
		}
		select {
		case <-m.done:
			return fmt.Errorf("daemon exited: %v", m.werr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no FUSE mount after %s", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exited reports whether the daemon process has exited.
func (m *mount) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the daemon to exit and returns its exit
// code (-1 for a signal), or an error on timeout.
func (m *mount) waitExit(d time.Duration) (int, error) {
	select {
	case <-m.done:
	case <-time.After(d):
		return 0, fmt.Errorf("daemon still running after %s", d)
	}
	return m.cmd.ProcessState.ExitCode(), nil
}

// signal sends sig to the daemon.
func (m *mount) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := m.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// stop is the cleanup: teardown, reporting each problem, plus a data
// race check and the daemon's log when the test failed.
func (m *mount) stop(t *testing.T) {
	t.Helper()
	for _, p := range m.teardown() {
		t.Errorf("cleanup: %s", p)
	}
	logText := m.logText()
	if strings.Contains(logText, "WARNING: DATA RACE") {
		t.Errorf("the daemon reported a data race")
	}
	if t.Failed() {
		t.Logf("daemon log (%s):\n%s", m.log, tail(logText, 64<<10))
	}
}

// teardown stops the daemon and removes its mount: SIGTERM and a bounded
// wait; then, if anything is left, abort the FUSE connection, SIGKILL,
// and detach. It returns what went wrong: a daemon that ignores SIGTERM,
// exits non-zero on it, or leaves its mount behind. Calling it again is
// harmless.
func (m *mount) teardown() (problems []string) {
	terminated := false
	if !m.exited() {
		terminated = true
		m.cmd.Process.Signal(syscall.SIGTERM)
		if _, err := m.waitExit(m.termWait); err != nil {
			problems = append(problems, fmt.Sprintf("daemon did not exit within %s of SIGTERM; aborted its connection and killed it", m.termWait))
			m.abort()
			m.cmd.Process.Kill()
			if _, err := m.waitExit(5 * time.Second); err != nil {
				problems = append(problems, fmt.Sprintf("daemon pid %d survives SIGKILL", m.cmd.Process.Pid))
			}
			terminated = false
		}
	}
	if terminated {
		if code := m.cmd.ProcessState.ExitCode(); code != 0 {
			problems = append(problems, fmt.Sprintf("daemon exited with %v after SIGTERM, want exit status 0", m.cmd.ProcessState))
		}
	}
	if len(m.ownMounts()) > 0 {
		if terminated {
			problems = append(problems, fmt.Sprintf("daemon exited after SIGTERM but %s is still mounted", m.dir))
		}
		if err := m.forceUnmountOwn(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems
}

// abort writes to the fusectl abort file of the mount's connection.
func (m *mount) abort() {
	if m.dev != "" {
		abortConn(m.dev)
	}
	for _, e := range m.ownMounts() {
		if strings.HasPrefix(e.fstype, "fuse") {
			abortConn(e.dev)
		}
	}
}

// ownMounts returns the mounts at m.dir that this daemon may have made:
// those not present before it started, or with the device it mounted. A
// live mount of another daemon at the same mountpoint (TestLiveMount) is
// never touched; a stale one left underneath is the test's own business
// (the harness of the daemon that left it removes it).
func (m *mount) ownMounts() []mountEntry {
	var out []mountEntry
	for _, e := range mountsAt(m.dir) {
		if !m.before[e.id] || (m.dev != "" && e.dev == m.dev) {
			out = append(out, e)
		}
	}
	return out
}

// forceUnmountOwn detaches this daemon's mounts at m.dir, newest first,
// aborting their connections; it stops at a mount that is not its own.
func (m *mount) forceUnmountOwn() error {
	for i := 0; i < 8; i++ {
		ents := mountsAt(m.dir)
		if len(ents) == 0 {
			return nil
		}
		top := ents[len(ents)-1]
		if m.before[top.id] && (m.dev == "" || top.dev != m.dev) {
			return nil // not ours: another daemon's, or a stale one under ours
		}
		if strings.HasPrefix(top.fstype, "fuse") {
			abortConn(top.dev)
		}
		if err := syscall.Unmount(m.dir, syscall.MNT_DETACH); err != nil {
			if out, err2 := exec.Command("fusermount3", "-uz", m.dir).CombinedOutput(); err2 != nil {
				return fmt.Errorf("unmount %s: %v; fusermount3 -uz: %v %s", m.dir, err, err2, out)
			}
		}
	}
	return fmt.Errorf("%s is still mounted after 8 detaches", m.dir)
}

func (m *mount) logText() string {
	b, err := os.ReadFile(m.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	id, dev, point, fstype, source, opts, superOpts string
}

// mountsAt returns the mounts whose mountpoint is dir, oldest first.
func mountsAt(dir string) []mountEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root point opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 6 || sep < 0 || sep+3 > len(fields) {
			continue
		}
		e := mountEntry{id: fields[0], dev: fields[2], point: unescapeMountinfo(fields[4]), opts: fields[5],
			fstype: fields[sep+1], source: fields[sep+2]}
		if sep+3 < len(fields) {
			e.superOpts = fields[sep+3]
		}
		if e.point == dir {
			out = append(out, e)
		}
	}
	return out
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// forceUnmount removes every mount at dir: abort the FUSE connection
// (so nothing waits on a dead daemon), then detach.
func forceUnmount(dir string) error {
	for i := 0; i < 8; i++ {
		ents := mountsAt(dir)
		if len(ents) == 0 {
			return nil
		}
		top := ents[len(ents)-1]
		if strings.HasPrefix(top.fstype, "fuse") {
			abortConn(top.dev)
		}
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			if out, err2 := exec.Command("fusermount3", "-uz", dir).CombinedOutput(); err2 != nil {
				return fmt.Errorf("unmount %s: %v; fusermount3 -uz: %v %s", dir, err, err2, out)
			}
		}
	}
	if len(mountsAt(dir)) > 0 {
		return fmt.Errorf("%s is still mounted after 8 detaches", dir)
	}
	return nil
}

// abortConn aborts the FUSE connection of the mount with device dev
// ("major:minor"): /sys/fs/fuse/connections/<dev>/abort, where the
// directory is named by the kernel's dev_t (major<<20 | minor; major is 0
// for FUSE's anonymous devices). It mounts fusectl if nobody did.
func abortConn(dev string) {
	maj, min, ok := strings.Cut(dev, ":")
	if !ok {
		return
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return
	}
	ensureFusectl()
	p := filepath.Join(fusectlDir, strconv.FormatUint(a<<20|b, 10), "abort")
	os.WriteFile(p, []byte("1"), 0)
}

func ensureFusectl() {
	fusectlMu.Lock()
	defer fusectlMu.Unlock()
	if len(mountsAt(fusectlDir)) > 0 {
		return
	}
	if err := syscall.Mount("fusectl", fusectlDir, "fusectl", 0, ""); err == nil {
		fusectlMounted = true
	}
}

// scratchDirs returns this test's scratch directories: T on the disk
// file system (t.TempDir, ext4 here) and S on /dev/shm (tmpfs).
func (m *mount) scratchDirs(t *testing.T) (string, string) {
	m.scratchMu.Lock()
	defer m.scratchMu.Unlock()
	if d, ok := m.scratch[t]; ok {
		return d[0], d[1]
	}
	T := t.TempDir()
	S, err := os.MkdirTemp("/dev/shm", "orbitefs-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(S) })
	m.scratch[t] = [2]string{T, S}
	return T, S
}

// shResult is one script's outcome.
type shResult struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

func (r shResult) String() string {
	return fmt.Sprintf("exit %d after %s\n--- stdout:\n%s--- stderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// sh runs script with `bash -c`, M set to the mountpoint, T and S to the
// test's scratch directories on ext4 and tmpfs, BIN to the daemon binary
// and LC_ALL=C (English errno texts). It returns stdout, stderr and the
// exit code; the script is killed after 30 s.
func (m *mount) sh(t *testing.T, script string) (stdout, stderr string, code int) {
	t.Helper()
	r := m.run(t, script)
	return r.stdout, r.stderr, r.code
}

// run is sh returning the whole result.
func (m *mount) run(t *testing.T, script string) shResult {
	t.Helper()
	p := m.start(t, script)
	r, ok := p.wait(scriptTimeout)
	if !ok {
		t.Errorf("script still running after %s, killed:\n%s", scriptTimeout, script)
		p.kill()
		r, _ = p.wait(5 * time.Second)
	}
	return r
}

// ok runs script under `set -euo pipefail`, fails the test unless it
// exits 0, and returns its stdout.
func (m *mount) ok(t *testing.T, script string) string {
	t.Helper()
	r := m.run(t, "set -euo pipefail\n"+script)
	if r.code != 0 {
		t.Fatalf("script failed:\n%s\n%s", script, r)
	}
	return r.stdout
}

// line is ok with surrounding white space trimmed.
func (m *mount) line(t *testing.T, script string) string {
	t.Helper()
	return strings.TrimSpace(m.ok(t, script))
}

// proc is a script running in the background.
type proc struct {
	cmd       *exec.Cmd
	out, errb bytes.Buffer
	started   time.Time
	done      chan struct{}
	res       shResult
}

// start runs script in the background (its own process group); the
// test's cleanup kills it if it is still running.
func (m *mount) start(t *testing.T, script string) *proc {
	t.Helper()
	T, S := m.scratchDirs(t)
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command("bash", "--norc", "--noprofile", "-c", script)
	p.cmd.Env = append(os.Environ(), "M="+m.dir, "T="+T, "S="+S, "BIN="+m.bin, "LC_ALL=C", "LANG=C")
	p.cmd.Dir = T
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errb
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("bash: %v", err)
	}
	pid := p.cmd.Process.Pid
	go func() {
		err := p.cmd.Wait()
		p.res = shResult{stdout: p.out.String(), stderr: p.errb.String(), code: p.cmd.ProcessState.ExitCode(), took: time.Since(p.started)}
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.res.stderr += "\n(harness: " + err.Error() + ")"
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			syscall.Kill(-pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// wait waits up to d; ok is false if the script is still running.
func (p *proc) wait(d time.Duration) (shResult, bool) {
	select {
	case <-p.done:
		return p.res, true
	case <-time.After(d):
		return shResult{}, false
	}
}

// running reports whether the script has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the script's process group.
func (p *proc) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// signal sends sig to the script's process group.
func (p *proc) signal(sig syscall.Signal) {
	syscall.Kill(-p.cmd.Process.Pid, sig)
}

// blockedInRead waits (bounded) until the script's main process, which
// must have exec'd the reader (`exec cat ...`), sleeps in read(2), so a
// signal sent next interrupts the FUSE read rather than the start-up.
// Where /proc/PID/syscall cannot tell (other architectures), it settles
// for a short grace period.
func (p *proc) blockedInRead(t *testing.T) {
	t.Helper()
	nr := map[string]string{"amd64": "0", "arm64": "63"}[runtime.GOARCH]
	path := fmt.Sprintf("/proc/%d/syscall", p.cmd.Process.Pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if !p.running() {
			t.Fatalf("the reader exited early: %s", p.res)
		}
		b, err := os.ReadFile(path)
		if nr == "" || err != nil {
			time.Sleep(300 * time.Millisecond)
			return
		}
		if f := strings.Fields(string(b)); len(f) > 1 && f[0] == nr {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader is not blocked in read(2) after 5s: %s", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readJSON cats a file of the mount and decodes it.
func (m *mount) readJSON(t *testing.T, rel string) map[string]any {
	t.Helper()
	out := m.ok(t, `cat "$M/`+rel+`"`)
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s is not a JSON object: %v\n%s", rel, err, out)
	}
	return v
}

// eventually polls cond every 20 ms until it returns true or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
