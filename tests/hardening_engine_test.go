package tests

// hardening_engine_test.go: engine defects found in review, where the user meets
// them, through the mount: a shared region truncated by another process,
// the bound on registered memory, the io_uring probe in /stats, and a
// write that fills the filesystem.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
)

const (
	eIO     = "Input/output error"
	eNOSPC  = "No space left on device"
	eFAULTs = "bad address"
)

// TestTruncatedShmRegion: `truncate -s 0` on the file behind a shm region
// used to kill the daemon with SIGBUS on the next `cat data`. Now reads
// and writes of data fail with EIO naming the region and offset, transfers
// into the cut range fail per task, and the daemon keeps serving.
func TestTruncatedShmRegion(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	name := uniq("shm")
	m.ok(t, fmt.Sprintf(`head -c 1M /dev/urandom > "$S/x"
		echo "{\"name\":\"%s\",\"location\":\"cpu\",\"bytes\":\"1MiB\",\"shm\":\"$S/x\"}" > "$M/memory/register"
		cmp "$S/x" "$M/memory/%s/data"`, name, name))
	t.Cleanup(func() { m.sh(t, `rmdir "$M/memory/`+name+`"`) })

	m.ok(t, `truncate -s 64K "$S/x"`) // another process cuts the file
	r := m.run(t, `cat "$M/memory/`+name+`/data" > /dev/null`)
	if r.code == 0 || !strings.Contains(r.stderr, eIO) {
		t.Fatalf("cat data of a truncated shm region: %s\nwant %s", r, eIO)
	}
	if m.exited() {
		t.Fatalf("the daemon died: %v", m.werr)
	}
	msg := m.line(t, `cat "$M/error"`)
	t.Logf("/error: %s", msg)
	for _, w := range []string{"memory/" + name, "memory fault", "at offset 65536"} {
		if !strings.Contains(msg, w) {
			t.Errorf("/error %q lacks %q", msg, w)
		}
	}
	// A write into the cut range fails the same way; one before it works.
	r = m.run(t, `printf abc | dd of="$M/memory/`+name+`/data" bs=4096 seek=32 conv=notrunc status=none`)
	if r.code == 0 || !strings.Contains(r.stderr, eIO) {
		t.Errorf("write into the cut range: %s\nwant %s", r, eIO)
	}
	m.ok(t, `printf abc | dd of="$M/memory/`+name+`/data" conv=notrunc status=none; [ "$(head -c 3 "$S/x")" = abc ]`)

	// io_uring transfers: the task into the cut range fails, the one
	// before it completes.
	p := m.line(t, `head -c 64K /dev/urandom > "$T/f"; echo "$T/f"`)
	seg := m.openSegment(t, "shmseg", p, "read")
	n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[
		{"memory":"%s","offset":0,"target_offset":0,"length":"32KiB"},
		{"memory":"%s","offset":"512KiB","target_offset":0,"length":"64KiB"}]}`, seg, name, name))
	if st != "failed" {
		t.Fatalf("batch %s: %s, want failed", n, st)
	}
	if v := m.task(t, n, 0); v["state"] != "completed" {
		t.Errorf("task 0 (before the cut): %v", v)
	}
	v := m.task(t, n, 1)
	wantStr(t, "task 1 (beyond the cut)", v, "state", "failed")
	if e, _ := v["error"].(string); !strings.Contains(e, eFAULTs) {
		t.Errorf("task 1 error %q lacks %q", e, eFAULTs)
	}

	// Still serving: a fresh region round-trips through a segment.
	r2 := m.register(t, "after", "64KiB")
	m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","target_offset":0,"length":"64KiB"}]}`, seg, r2))
	m.ok(t, `cmp "$T/f" "$M/memory/`+r2+`/data"`)
}

// TestRegisteredMemoryLimit: registrations past engine.max_registered_bytes
// fail with EAGAIN and a message naming the key and the figures, instead
// of populating pages until the OOM killer ends the daemon.
func TestRegisteredMemoryLimit(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: "[engine]\nmax_registered_bytes = \"8MiB\"\n"})
	a := m.register(t, "lim", "4MiB")
	m.register(t, "lim", "4MiB")
	before := m.ls(t, "memory")
	r := m.run(t, `echo '{"name":"over","location":"cpu","bytes":"1MiB"}' > "$M/memory/register"`)
	if r.code == 0 || !strings.Contains(r.stderr, eAGAIN) {
		t.Fatalf("registration past the limit: %s\nwant %s", r, eAGAIN)
	}
	msg := m.line(t, `cat "$M/error"`)
	for _, w := range []string{"engine.max_registered_bytes (8MiB", "9MiB registered", "8MiB already registered"} {
		if !strings.Contains(msg, w) {
			t.Errorf("/error %q lacks %q", msg, w)
		}
	}
	if after := m.ls(t, "memory"); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("a refused registration changed memory/: %v -> %v", before, after)
	}
	m.ok(t, `rmdir "$M/memory/`+a+`"`)
	m.register(t, "lim", "4MiB")
}

// TestIOUringAvailableInStats: /stats and the metric report the io_uring
// probe's verdict, before and after io_uring did the I/O (both used to
// stay false/0).
func TestIOUringAvailableInStats(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	check := func(when string) {
		if got := m.line(t, `jq -c '.io_uring | [.available, .probe_error]' "$M/stats"`); got != "[true,null]" {
			t.Errorf("%s: /stats io_uring [available, probe_error] = %s, want [true,null]", when, got)
		}
		if got := m.line(t, `grep '^orbitefs_io_uring_available ' "$M/metrics"`); got != "orbitefs_io_uring_available 1" {
			t.Errorf("%s: metric %q, want orbitefs_io_uring_available 1", when, got)
		}
	}
	check("before any transfer")
	p := m.line(t, `head -c 64K /dev/urandom > "$T/f"; echo "$T/f"`)
	seg := m.openSegment(t, "st", p, "read")
	r := m.register(t, "st", "64KiB")
	if _, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","target_offset":0,"length":"64KiB"}]}`, seg, r)); st != "completed" {
		t.Fatalf("transfer: %s", st)
	}
	if got := m.line(t, `jq '.io_uring.cqes_completed' "$M/stats"`); got == "0" {
		t.Fatal("no io_uring completion: the check after proves nothing")
	}
	check("after io_uring did the I/O")
}

// TestWriteFillsFilesystem: a write larger than the free space of a real
// small tmpfs fails with the filesystem's reason (ENOSPC), not ERANGE
// "file is shorter than at submit", and reports exactly the bytes that
// reached the file.
func TestWriteFillsFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	m := startDaemon(t, daemonOpts{})
	dir, err := os.MkdirTemp("/tmp", "orbitefs-e2e-full-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	f := dir + "/f"
	m.ok(t, `truncate -s 1M `+shq(f)) // sparse: no space used yet
	seg := m.openSegment(t, "full", f, "read_write")
	r := m.register(t, "full", "1MiB")
	m.ok(t, `head -c 1M /dev/urandom > "$M/memory/`+r+`/data"`)
	n, st := m.run1(t, fmt.Sprintf(`{"op":"write","target":"%s","requests":[{"memory":"%s","target_offset":0,"length":"512KiB"}]}`, seg, r))
	if st != "failed" {
		t.Fatalf("batch %s: %s, want failed", n, st)
	}
	v := m.task(t, n, 0)
	e, _ := v["error"].(string)
	got, _ := num(v, "transferred_bytes")
	if !strings.Contains(strings.ToLower(e), strings.ToLower(eNOSPC)) || strings.Contains(e, "shorter than at submit") {
		t.Fatalf("task error %q, want %s", e, eNOSPC)
	}
	// The error is "OP OBJECT: KIND: DETAIL": its kind must be the one the
	// errno table gives ENOSPC, not an i/o error that merely quotes the
	// kernel's text.
	if errno := kindErrno(t, e); errno != syscall.ENOSPC {
		t.Fatalf("task error %q: its kind maps to %v (%d), want ENOSPC", e, errno, int(errno))
	}
	if got <= 0 || got >= 512<<10 || !strings.Contains(e, strconv.Itoa(int(got))+" of 524288 bytes") {
		t.Fatalf("transferred_bytes %v, error %q: want the exact partial count", got, e)
	}
	// The file holds exactly those bytes and nothing after them.
	m.ok(t, fmt.Sprintf(`cmp -n %d %s "$M/memory/%s/data"
		[ "$(tail -c +%d %s | tr -d '\0' | wc -c)" -eq 0 ]`, int(got), shq(f), r, int(got)+1, shq(f)))
}

// TestSizeGrammarAtTheMount: mount documents take the one size grammar;
// lowercase, one-letter and spaced forms are EINVAL instead of guessed.
func TestSizeGrammarAtTheMount(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	for _, bad := range []string{"1m", "4k", "1kb", "1 MiB", "1mib"} {
		r := m.run(t, `echo '{"name":"`+uniq("g")+`","location":"cpu","bytes":"`+bad+`"}' > "$M/memory/register"`)
		if r.code == 0 || !strings.Contains(r.stderr, eINVAL) {
			t.Errorf("bytes %q: %s\nwant %s", bad, r, eINVAL)
		}
	}
	for _, good := range []string{"4KB", "4KiB", "4096B", "4096"} {
		name := m.register(t, "g", good)
		if got := m.line(t, `stat -c %s "$M/memory/`+name+`/data"`); got != "4096" {
			t.Errorf("bytes %q: data is %s bytes, want 4096", good, got)
		}
	}
}

// TestConfigProblemsAtOnce: a config file with several problems makes the
// daemon exit non-zero, before mounting, naming every one of them.
func TestConfigProblemsAtOnce(t *testing.T) {
	m := startDaemon(t, daemonOpts{noWait: true, config: `[mount]
max_write = "1m"
[engine]
default_timeout = 5
max_file_segment = 7
max_file_segments = 0
`})
	code, err := m.waitExit(10 * time.Second)
	if err != nil || code == 0 {
		t.Fatalf("daemon with a bad config: exit %d, %v", code, err)
	}
	log := m.logText()
	for _, w := range []string{`mount.max_write (line 2): size "1m"`, "engine.default_timeout (line 4): duration 5: want a duration like 5s",
		"engine.max_file_segment: unknown key", "engine.max_file_segments (0) must be in [1, 4096]"} {
		if !strings.Contains(log, w) {
			t.Errorf("daemon output lacks %q:\n%s", w, log)
		}
	}
}

// kindErrno returns the errno that the mount's errno table gives the
// kind named in a task error "OP OBJECT: KIND: DETAIL".
func kindErrno(t *testing.T, msg string) syscall.Errno {
	t.Helper()
	parts := strings.SplitN(msg, ": ", 3)
	if len(parts) < 3 {
		t.Fatalf("task error %q is not OP OBJECT: KIND: DETAIL", msg)
	}
	for _, row := range control.ErrnoTable() {
		if row.Kind != engine.KindUnknown && row.Kind.String() == parts[1] {
			return row.Errno
		}
	}
	t.Fatalf("task error %q: kind %q is no row of the errno table", msg, parts[1])
	return 0
}
