// lifecycle_test.go owns the tests that stop, break or configure a
// daemon of their own: SIGTERM with a batch in flight or a file held
// open, a stale mount at start, config files (good and bad), a segment on
// the daemon's own mount, and the harness's last-resort abort.

package tests

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGTERMWhileInFlight: SIGTERM while a long batch runs and a shell
// blocks in its wait: the daemon exits 0 within mount.shutdown_timeout
// (2s in slowConfig) plus a margin, the mount is gone and the blocked
// reader returns.
func TestSIGTERMWhileInFlight(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: slowConfig})
	b := m.startSlowBatch(t)
	waiter := m.start(t, `exec cat "$M/ctl/batches/`+b.n+`/wait"`)
	waiter.blockedInRead(t)
	start := time.Now()
	m.signal(t, syscall.SIGTERM)
	// While it drains, new work is refused with ESHUTDOWN.
	var refused shResult
	eventually(t, time.Second, "clone refused while shutting down", func() bool {
		refused = m.run(t, `cat "$M/ctl/batches/clone"`)
		return refused.code != 0
	})
	if !strings.Contains(refused.stderr, "Cannot send after transport endpoint shutdown") {
		t.Errorf("clone during shutdown: %s\nwant ESHUTDOWN", refused)
	}
	code, err := m.waitExit(15 * time.Second)
	if err != nil {
		t.Fatalf("SIGTERM with a batch in flight: %v", err)
	}
	took := time.Since(start)
	t.Logf("daemon exited %d, %s after SIGTERM", code, since(start))
	if code != 0 {
		t.Errorf("daemon exit status %d after SIGTERM, want 0", code)
	}
	if took > 5*time.Second {
		t.Errorf("daemon took %s to exit, want within shutdown_timeout (2s) + 3s", took.Round(time.Millisecond))
	}
	if ents := mountsAt(m.dir); len(ents) > 0 {
		t.Errorf("mount still present after the daemon exited: %+v", ents)
	}
	r, done := waiter.wait(5 * time.Second)
	if !done {
		t.Fatalf("the blocked wait did not return after the daemon exited")
	}
	t.Logf("the blocked wait returned: %s", r)
	if strings.Contains(m.logText(), "panic") {
		t.Errorf("the daemon log shows a panic")
	}
}

// TestUnmountFromOutsideWhileInFlight: `umount` of the mount by someone
// else while a batch runs: the daemon notices, shuts down (bounded by
// shutdown_timeout, 2s in slowConfig) and exits 0.
func TestUnmountFromOutsideWhileInFlight(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: slowConfig})
	b := m.startSlowBatch(t)
	start := time.Now()
	if err := syscall.Unmount(m.dir, 0); err != nil {
		t.Fatalf("umount %s: %v", m.dir, err)
	}
	code, err := m.waitExit(10 * time.Second)
	if err != nil {
		t.Fatalf("after an outside umount with batch %s in flight: %v", b.n, err)
	}
	t.Logf("daemon exited %d, %s after the umount", code, since(start))
	if code != 0 {
		t.Errorf("daemon exit status %d, want 0", code)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("daemon took %s to exit", took.Round(time.Millisecond))
	}
	if ents := mountsAt(m.dir); len(ents) > 0 {
		t.Errorf("mount still present: %+v", ents)
	}
}

// TestSIGINT: ^C shuts down like SIGTERM: exit 0, mount gone.
func TestSIGINT(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	m.ok(t, `cat "$M/version" > /dev/null`)
	m.signal(t, syscall.SIGINT)
	code, err := m.waitExit(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("exit status %d after SIGINT, want 0", code)
	}
	if ents := mountsAt(m.dir); len(ents) > 0 {
		t.Errorf("mount still present: %+v", ents)
	}
}

// TestSIGTERMWithOpenFile: a shell holding a file of the mount open does
// not keep the daemon from exiting; the mount is detached.
func TestSIGTERMWithOpenFile(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	holder := m.start(t, `exec 3< "$M/README"; cd "$M/ctl"; exec sleep 30`)
	eventually(t, 5*time.Second, "holder has the file open", func() bool {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", holder.cmd.Process.Pid))
		return err == nil && strings.HasSuffix(l, "/README")
	})
	start := time.Now()
	m.signal(t, syscall.SIGTERM)
	code, err := m.waitExit(15 * time.Second)
	if err != nil {
		t.Fatalf("SIGTERM with an open file: %v", err)
	}
	t.Logf("daemon exited %d, %s after SIGTERM", code, since(start))
	if code != 0 {
		t.Errorf("daemon exit status %d, want 0", code)
	}
	if ents := mountsAt(m.dir); len(ents) > 0 {
		t.Errorf("mount still present after the daemon exited: %+v", ents)
	}
	holder.kill()
}

// TestStaleMountAtStart: a daemon killed with SIGKILL leaves a dead mount
// ("Transport endpoint is not connected"); a new daemon on the same
// mountpoint either clears it and serves, or refuses with a clear message.
func TestStaleMountAtStart(t *testing.T) {
	a := startDaemon(t, daemonOpts{})
	a.signal(t, syscall.SIGKILL)
	if _, err := a.waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if len(mountsAt(a.dir)) == 0 {
		t.Fatal("no stale mount after SIGKILL; nothing to test")
	}
	r := a.run(t, `stat "$M/version"`)
	if r.code == 0 || !strings.Contains(r.stderr, "Transport endpoint is not connected") {
		t.Logf("stat on the stale mount: %s", r)
	}
	b := startDaemon(t, daemonOpts{mountpoint: a.dir, noWait: true})
	if err := b.waitMounted(mountWait); err != nil {
		// Refused: must say why, and exit non-zero.
		code, werr := b.waitExit(5 * time.Second)
		log := b.logText()
		t.Logf("second daemon did not mount (%v), exit %d: %s", err, code, log)
		if werr != nil || code == 0 {
			t.Errorf("second daemon neither mounted nor exited non-zero (exit %d, %v)", code, werr)
		}
		if !strings.Contains(log, a.dir) || !(strings.Contains(log, "stale") || strings.Contains(log, "not connected")) {
			t.Errorf("second daemon's message does not name the stale mount at %s: %q", a.dir, log)
		}
		return
	}
	out := b.ok(t, `cat "$M/version"; ls "$M"`)
	if !strings.HasPrefix(out, "orbitefs ") {
		t.Errorf("second daemon serves %q", out)
	}
	if n := len(mountsAt(a.dir)); n != 1 {
		t.Errorf("%d mounts at %s after the restart, want 1 (the stale one cleared)", n, a.dir)
	}
}

// TestLiveMountRefused: a second daemon on a mountpoint where a live
// daemon serves is refused with a message, and the first keeps serving.
func TestLiveMountRefused(t *testing.T) {
	a := startDaemon(t, daemonOpts{})
	b := startDaemon(t, daemonOpts{mountpoint: a.dir, noWait: true})
	code, err := b.waitExit(10 * time.Second)
	if err != nil {
		t.Fatalf("second daemon on a live mount: %v", err)
	}
	if code == 0 {
		t.Errorf("second daemon on a live mount exited 0")
	}
	if log := b.logText(); !strings.Contains(log, a.dir) {
		t.Errorf("second daemon's message does not name the mountpoint: %q", log)
	} else {
		t.Logf("second daemon: %s", strings.TrimSpace(log))
	}
	if n := len(mountsAt(a.dir)); n != 1 {
		t.Errorf("%d mounts at %s, want 1", n, a.dir)
	}
	if out := a.ok(t, `cat "$M/version"`); !strings.HasPrefix(out, "orbitefs ") {
		t.Errorf("first daemon no longer serves: %q", out)
	}
}

// TestConfigFile: --config sets allowed roots, the document limit and the
// batch capacity.
func TestConfigFile(t *testing.T) {
	allowed, err := os.MkdirTemp("/dev/shm", "orbitefs-e2e-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(allowed) })
	m := startDaemon(t, daemonOpts{config: fmt.Sprintf(`
[mount]
allowed_roots = [%q]
max_document_bytes = "4KiB"
default_batch_capacity = 8
`, allowed)})
	m.ok(t, fmt.Sprintf(`head -c 64K /dev/urandom > %q/f; cp %q/f "$T/f"`, allowed, allowed))
	seg := m.openSegment(t, "cfg", allowed+"/f", "read")
	r := m.run(t, `echo '{"name":"cfg_tmp","uri":"file://'"$T"'/f","permission":"read"}' > "$M/segments/open"`)
	if r.code == 0 || !strings.Contains(r.stderr, eACCES) {
		t.Errorf("open under /tmp, outside the configured roots: %s\nwant %s", r, eACCES)
	}
	reg := m.register(t, "cfg", "64KiB")
	n := m.clone(t)
	wantNum(t, "status", m.readJSON(t, "ctl/batches/"+n+"/status"), "capacity", 8)
	reqs := func(k int) string {
		var out []string
		for i := 0; i < k; i++ {
			out = append(out, fmt.Sprintf(`{"memory":"%s","offset":%d,"target_offset":%d,"length":1024}`, reg, i*1024, i*1024))
		}
		return fmt.Sprintf(`{"op":"read","target":"%s","requests":[%s]}`, seg, strings.Join(out, ","))
	}
	r = m.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(reqs(9)), n))
	if r.code == 0 || !strings.Contains(r.stderr, eAGAIN) {
		t.Errorf("9 requests into a batch of capacity 8: %s\nwant %s", r, eAGAIN)
	}
	// 4 KiB limit: a 5000-byte document (padded with spaces) is too
	// large, a 4000-byte one is fine.
	// Pad inside the object (before its closing brace), so the document
	// itself has the size: whitespace after a complete object is not part
	// of it.
	pad := func(d string, size int) string { return d[:len(d)-1] + strings.Repeat(" ", size-len(d)-1) + "}" }
	r = m.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(pad(reqs(2), 5000)), n))
	if r.code == 0 || !strings.Contains(r.stderr, eFBIG) {
		t.Errorf("5000-byte document with max_document_bytes 4KiB: %s\nwant %s", r, eFBIG)
	}
	m.submit(t, n, pad(reqs(8), 4000))
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "completed" {
		t.Errorf("batch %s", st)
	}
	m.ok(t, fmt.Sprintf(`cmp -n 8192 "$M/memory/%s/data" "$T/f"`, reg))
}

// TestBadConfig: a config the daemon cannot use stops it before it
// mounts, with a message naming the problem.
func TestBadConfig(t *testing.T) {
	for _, c := range []struct{ name, config, phrase string }{
		{"unknown_key", "[mount]\nallow_others = true\n", "allow_others"},
		{"bad_value", "[mount]\nmax_write = 100\n", "max_write"},
		{"not_toml", "[mount\n", "config"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := startDaemon(t, daemonOpts{config: c.config, noWait: true})
			code, err := m.waitExit(10 * time.Second)
			if err != nil {
				t.Fatalf("daemon with a bad config: %v", err)
			}
			if code == 0 {
				t.Errorf("daemon with a bad config exited 0")
			}
			if log := m.logText(); !strings.Contains(log, c.phrase) {
				t.Errorf("daemon output %q does not name %q", log, c.phrase)
			}
			if ents := mountsAt(m.dir); len(ents) > 0 {
				t.Errorf("a mount was left at %s: %+v", m.dir, ents)
			}
		})
	}
}

// TestOwnMountNotATarget: the mount lives under /tmp, an allowed root, so
// a file of the mount itself can be named as a segment. The daemon must
// not do I/O on its own mount (it could deadlock on itself): the open is
// refused with EACCES (the daemon's documented choice; the contract is
// silent), promptly, and the mount stays responsive.
func TestOwnMountNotATarget(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	reg := m.register(t, "own", 4096)
	// A relative symlink under /tmp that stays beneath /tmp but leads into
	// the mount: a lexical check of the path does not see it.
	m.ok(t, `ln -s "../../$(basename "$M")/memory/`+reg+`/data" "$T/sneaky"; ls -l "$T/sneaky" >&2`)
	for _, uri := range []string{"file://$M/memory/" + reg + "/data", "file://$M/version", "file://$M/../$(basename $M)/version", "file://$T/sneaky"} {
		r := m.run(t, `timeout 5 bash -c 'echo "{\"name\":\"own\",\"uri\":\"`+uri+`\",\"permission\":\"read\"}" > "$M/segments/open"'`)
		switch {
		case r.code == 124:
			t.Fatalf("opening %s hung for 5s", uri)
		case r.code == 0:
			t.Errorf("a segment on the daemon's own mount was accepted: %s", uri)
			// Does I/O through it hang the daemon?
			n := m.clone(t)
			dst := m.register(t, "owndst", 4096)
			r := m.run(t, fmt.Sprintf(`B="$M/ctl/batches/%s"
timeout 5 bash -c 'echo "{\"op\":\"read\",\"target\":\"own\",\"requests\":[{\"memory\":\"%s\",\"offset\":0,\"target_offset\":0,\"length\":4096}]}" > "$0/submit"' "$B"
echo seal > "$B/ctl"; timeout 5 cat "$B/wait"`, n, dst))
			t.Logf("a read through it: %s", r)
			m.sh(t, `rmdir "$M/segments/own"`)
		case !strings.Contains(r.stderr, eACCES):
			t.Errorf("open %s: %s\nwant %s", uri, r, eACCES)
		}
	}
	if out := m.ok(t, `timeout 5 cat "$M/version"`); !strings.HasPrefix(out, "orbitefs") {
		t.Errorf("mount unresponsive afterwards")
	}
}

// TestHarnessAbortsHungDaemon checks the harness's last resort: with the
// daemon stopped (SIGSTOP) nothing answers on the mount; teardown must
// still remove the mount (fusectl abort, lazy unmount) and release a
// shell blocked on it.
func TestHarnessAbortsHungDaemon(t *testing.T) {
	m := startDaemon(t, daemonOpts{termWait: time.Second, ownGroup: true})
	m.ok(t, `cat "$M/version" > /dev/null`)
	m.signal(t, syscall.SIGSTOP)
	blocked := m.start(t, `exec cat "$M/stats"`)
	if r, done := blocked.wait(300 * time.Millisecond); done {
		t.Fatalf("a read on the stopped daemon's mount returned: %s", r)
	}
	problems := m.teardown()
	t.Logf("teardown reported: %q", problems)
	if len(problems) == 0 || !strings.Contains(problems[0], "did not exit") {
		t.Errorf("teardown did not notice the hung daemon: %q", problems)
	}
	if ents := mountsAt(m.dir); len(ents) > 0 {
		t.Errorf("mount left after teardown: %+v", ents)
	}
	if !m.exited() {
		t.Errorf("daemon still running after teardown")
	}
	r, done := blocked.wait(5 * time.Second)
	if !done {
		t.Fatalf("the blocked reader is still stuck after the abort")
	}
	t.Logf("blocked reader after abort: %s", r)
	if again := m.teardown(); len(again) != 0 {
		t.Errorf("second teardown: %q", again)
	}
}
