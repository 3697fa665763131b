// txn_test.go owns the one-file transaction, /ctl/batches/txn, as a shell
// user meets it: open read-write (exec 3<>), write a submission (echo >&3),
// read the terminal status back (cat <&3, or dd for one read(2)), close
// (exec 3<&-) frees the batch.

package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// txnSetup registers a 1 MiB region and opens a 1 MiB file of random
// bytes on ext4 as a read-write segment; it returns their names and the
// file's path.
func (m *mount) txnSetup(t *testing.T) (region, seg, file string) {
	t.Helper()
	T, _ := m.scratchDirs(t)
	file = T + "/txn.bin"
	m.ok(t, `head -c 1M /dev/urandom > "`+file+`"`)
	region = m.register(t, "txn", "1MiB")
	seg = m.openSegment(t, "txn", file, "read_write")
	return region, seg, file
}

// noBatches waits (bounded) until /ctl/batches lists only clone and txn
// and the engine holds no batch and reserves no capacity. It polls
// because the kernel sends RELEASE, which frees a transaction's batch,
// in the background after close(2) returned.
func (m *mount) noBatches(t *testing.T, what string) {
	t.Helper()
	var ls, stats string
	deadline := time.Now().Add(10 * time.Second)
	for {
		ls = strings.Join(m.ls(t, "ctl/batches"), " ")
		stats = m.line(t, `jq -c '[.batches, .reserved_requests]' "$M/stats"`)
		if ls == "clone txn" && stats == "[0,0]" {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s: after 10s ls ctl/batches = %q and /stats [batches, reserved_requests] = %s, want \"clone txn\" and [0,0]", what, ls, stats)
}

// TestTxnShell: the happy path from bash, two transactions on one
// descriptor, bytes checked; the batch is listed while its transaction
// is open and gone after close.
func TestTxnShell(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	region, seg, file := m.txnSetup(t)
	out := m.ok(t, fmt.Sprintf(`F=%s
exec 3<>"$M/ctl/batches/txn"
echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":65536}]}' >&3
cat <&3 > "$T/st1.json"
ls "$M/ctl/batches" | tr '\n' ' '; echo
echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":65536,"target_offset":65536,"length":4096},{"memory":"%s","offset":1044480,"target_offset":1044480,"length":4096}]}' >&3
cat <&3 > "$T/st2.json"
ls "$M/ctl/batches" | tr '\n' ' '; echo
exec 3<&-
cmp -n 69632 "$M/memory/%s/data" "$F" && echo same-prefix
cmp -i 1044480 "$M/memory/%s/data" "$F" && echo same-tail
jq -r '"\(.id) \(.state) \(.sealed) \(.tasks.total) \(.tasks.completed) \(.submissions[0].target)"' "$T/st1.json" "$T/st2.json"`,
		file, seg, region, seg, region, region, region, region))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("output:\n%s", out)
	}
	var id1, id2 string
	fmt.Sscan(lines[4], &id1)
	fmt.Sscan(lines[5], &id2)
	if lines[0] != id1+" clone txn " || lines[1] != id2+" clone txn " || id1 == id2 {
		t.Errorf("ls while open: %q then %q, want batch %s then only batch %s", lines[0], lines[1], id1, id2)
	}
	if lines[2] != "same-prefix" || lines[3] != "same-tail" {
		t.Errorf("memory differs from the file: %q %q", lines[2], lines[3])
	}
	if want := id1 + " completed true 1 1 " + seg; lines[4] != want {
		t.Errorf("first status: %q, want %q", lines[4], want)
	}
	if want := id2 + " completed true 2 2 " + seg; lines[5] != want {
		t.Errorf("second status: %q, want %q", lines[5], want)
	}
	m.noBatches(t, "after close")

	// A write through the transaction file lands in the file.
	m.ok(t, fmt.Sprintf(`printf 'txn-write' | dd of="$M/memory/%s/data" conv=notrunc status=none
(echo '{"op":"write","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":512,"length":9}]}' >&3; jq -e '.state == "completed"' <&3 >/dev/null) 3<>"$M/ctl/batches/txn"
[ "$(dd if=%s bs=1 skip=512 count=9 status=none)" = txn-write ]`, region, seg, region, file))
	m.noBatches(t, "after a one-shot write transaction")
}

// TestTxnSingleRead: one read(2) of a large enough buffer returns the
// whole status, the same JSON as the batch's status file; the next read
// is end of file.
func TestTxnSingleRead(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	region, seg, _ := m.txnSetup(t)
	out := m.ok(t, fmt.Sprintf(`exec 3<>"$M/ctl/batches/txn"
echo '{"op":"read","target":"%s","requests":[{"memory":"%s","length":4096}]}' >&3
dd bs=65536 count=1 status=none <&3 > "$T/one.json"
N=$(jq .id "$T/one.json")
cat "$M/ctl/batches/$N/status" > "$T/file.json"
dd bs=65536 count=1 status=none <&3 | wc -c
cmp "$T/one.json" "$T/file.json" && echo same
exec 3<&-`, seg, region))
	if out != "0\nsame\n" {
		t.Errorf("second read and comparison with the status file: %q, want \"0\\nsame\\n\"", out)
	}
	var st map[string]any
	T, _ := m.scratchDirs(t)
	if err := json.Unmarshal([]byte(m.ok(t, `cat "`+T+`/one.json"`)), &st); err != nil || st["state"] != "completed" {
		t.Errorf("one read: %v %v", st, err)
	}
	m.noBatches(t, "after close")
}

// TestTxnRefused: opens other than read-write, read before write, a bad
// document and a second document before the first was read: each fails
// with its errno, its text is in /error, nothing changes and no batch is
// left behind.
func TestTxnRefused(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	region, seg, _ := m.txnSetup(t)
	good := fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","length":4096}]}`, seg, region)
	for _, c := range []struct {
		name, script, stderr, errText string
	}{
		{"read-only open", `cat "$M/ctl/batches/txn"`, eACCES, ""},
		{"write-only open", `echo x > "$M/ctl/batches/txn"`, eACCES, ""},
		{"read before write", `exec 3<>"$M/ctl/batches/txn"; cat <&3`, eINVAL, "read before write"},
		{"bad JSON", `exec 3<>"$M/ctl/batches/txn"; echo 'not json' >&3`, eINVAL, "want a JSON object"},
		{"unknown field", `exec 3<>"$M/ctl/batches/txn"; echo '{"op":"read","target":"` + seg + `","requests":[{"memory":"` + region + `","length":1}],"x":1}' >&3`, eINVAL, `unknown field "x"`},
		{"missing target", `exec 3<>"$M/ctl/batches/txn"; echo '{"op":"read","target":"nope","requests":[{"memory":"` + region + `","length":1}]}' >&3`, eNOENT, `target "nope"`},
		{"beyond the file", `exec 3<>"$M/ctl/batches/txn"; echo '{"op":"read","target":"` + seg + `","requests":[{"memory":"` + region + `","target_offset":1048575,"length":2}]}' >&3`, "Numerical result out of range", "beyond"},
		{"dead after a bad write", `exec 3<>"$M/ctl/batches/txn"; echo 'not json' >&3 2>/dev/null; cat <&3`, eINVAL, "want a JSON object"},
		{"second document before reading", `exec 3<>"$M/ctl/batches/txn"; echo '` + good + `' >&3; echo '` + good + `' >&3`, eBUSY, "has not been read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := m.run(t, c.script)
			if r.code == 0 || !strings.Contains(r.stderr, c.stderr) {
				t.Errorf("%s\nwant a failure with %q", r, c.stderr)
			}
			if c.errText != "" {
				if got := m.line(t, `cat "$M/error"`); !strings.Contains(got, "batches/txn") || !strings.Contains(got, c.errText) {
					t.Errorf("/error = %q, want batches/txn and %q", got, c.errText)
				}
			}
			m.noBatches(t, c.name)
		})
	}
	// The first transaction of the refused second document still reads.
	out := m.ok(t, `exec 3<>"$M/ctl/batches/txn"; echo '`+good+`' >&3; echo '`+good+`' >&3 2>/dev/null || true; jq -r '"\(.state) \(.tasks.total)"' <&3`)
	if out != "completed 1\n" {
		t.Errorf("first transaction after a refused second: %q", out)
	}
	m.noBatches(t, "after the refused second document")
}

// TestTxnCloseBeforeTerminal: closing the descriptor of a running
// transaction cancels what has not started, lets the running transfer
// finish, then frees the batch: it stays listed until then and nothing is
// leaked (the region can be unregistered afterwards). A signal ends a
// blocked read with EINTR and changes nothing.
func TestTxnCloseBeforeTerminal(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: slowConfig})
	_, S := m.scratchDirs(t)
	m.ok(t, `truncate -s 256M "$S/sparse"`)
	region := m.register(t, "slow", "256MiB")
	seg := m.openSegment(t, "slow", S+"/sparse", "read")
	m.ok(t, fmt.Sprintf(`jq -nc --arg r %s --arg s %s '{op:"read",target:$s,requests:[range(4096)|{memory:$r,offset:0,target_offset:0,length:268435456}]}' > "$T/slow.json"`, region, seg))
	// The holder keeps the descriptor open until told to close it.
	p := m.start(t, `exec 3<>"$M/ctl/batches/txn"
cat "$T/slow.json" >&3
touch "$T/submitted"
timeout 1 cat <&3; echo "interrupted $?" > "$T/interrupted"
while [ ! -e "$T/close" ]; do sleep 0.02; done
exec 3<&-
touch "$T/closed"
sleep 600`)
	eventually(t, 20*time.Second, "the transaction was submitted", func() bool {
		return m.run(t, `[ -e "$T/interrupted" ]`).code == 0
	})
	if got := m.line(t, `cat "$T/interrupted"`); got != "interrupted 124" {
		t.Errorf("timeout 1 cat <&3 on a running transaction: %q, want exit 124", got)
	}
	ids := m.ls(t, "ctl/batches")
	if len(ids) != 3 {
		t.Fatalf("ls ctl/batches while the transaction runs: %v", ids)
	}
	n := ids[0]
	if st := m.state(t, n); st != "open" {
		t.Fatalf("batch %s after the interrupted read: %s, want open", n, st)
	}
	if last := m.taskState(t, n, 4095); last != "pending" {
		t.Fatalf("last task after the interrupted read: %s, want pending", last)
	}
	m.ok(t, `touch "$T/close"`)
	eventually(t, 20*time.Second, "the holder closed the descriptor", func() bool {
		return m.run(t, `[ -e "$T/closed" ]`).code == 0
	})
	eventually(t, 30*time.Second, "the closed transaction's batch is freed", func() bool {
		return !contains(m.ls(t, "ctl/batches"), n)
	})
	m.noBatches(t, "after close before terminal")
	// No loan is left on the region.
	m.ok(t, `rmdir "$M/memory/`+region+`"`)
	p.kill()
}

// TestTxnConcurrent: several shells run transactions at once, each on
// its own descriptor and its own part of the region; every transaction
// completes with the right bytes, and nothing is left.
func TestTxnConcurrent(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	region, seg, file := m.txnSetup(t)
	const clients, trips = 6, 15
	var procs []*proc
	for c := 0; c < clients; c++ {
		procs = append(procs, m.start(t, fmt.Sprintf(`set -e
exec 3<>"$M/ctl/batches/txn"
for i in $(seq %d); do
  echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":%d,"target_offset":%d,"length":4096}]}' >&3
  st=$(cat <&3)
  [ "$(echo "$st" | jq -r .state)" = completed ] || { echo "trip $i: $st"; exit 1; }
done
exec 3<&-
echo ok`, trips, seg, region, c*4096, c*4096)))
	}
	for c, p := range procs {
		r, done := p.wait(scriptTimeout)
		if !done {
			t.Fatalf("client %d still running after %s", c, scriptTimeout)
		}
		if r.code != 0 || r.stdout != "ok\n" {
			t.Errorf("client %d: %s", c, r)
		}
	}
	m.ok(t, fmt.Sprintf(`cmp -n %d "$M/memory/%s/data" %s`, clients*4096, region, file))
	m.noBatches(t, "after the concurrent clients")
}

// TestTxnEchoFullBuffer: bash's echo writes 4 KiB at a time, so a
// document of exactly 4096 bytes arrives in one write and its newline in
// the next, before the status was read; the newline is not a second
// document (EBUSY) and the transaction reads back whole.
func TestTxnEchoFullBuffer(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	region, seg, _ := m.txnSetup(t)
	doc := fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","length":4096}]`, seg, region)
	doc += strings.Repeat(" ", 4095-len(doc)) + "}"
	if len(doc) != 4096 {
		t.Fatalf("document of %d bytes", len(doc))
	}
	out := m.ok(t, `exec 3<>"$M/ctl/batches/txn"
echo '`+doc+`' >&3
jq -r '"\(.state) \(.tasks.total)"' <&3`)
	if out != "completed 1\n" {
		t.Errorf("state of a 4096-byte document's transaction: %q", out)
	}
	m.noBatches(t, "after close")
}

// TestTxnSIGTERMWhileReading: SIGTERM while a shell blocks reading a
// running transaction's status: the daemon exits 0 within
// mount.shutdown_timeout (2s in slowConfig) plus a margin, its mount is
// gone, and the blocked read returns ESHUTDOWN.
func TestTxnSIGTERMWhileReading(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: slowConfig})
	_, S := m.scratchDirs(t)
	m.ok(t, `truncate -s 256M "$S/sparse"`)
	region := m.register(t, "slow", "256MiB")
	seg := m.openSegment(t, "slow", S+"/sparse", "read")
	m.ok(t, fmt.Sprintf(`jq -nc --arg r %s --arg s %s '{op:"read",target:$s,requests:[range(4096)|{memory:$r,offset:0,target_offset:0,length:268435456}]}' > "$T/slow.json"`, region, seg))
	reader := m.start(t, `exec 3<>"$M/ctl/batches/txn"
cat "$T/slow.json" >&3
exec cat <&3`)
	reader.blockedInRead(t)
	start := time.Now()
	m.signal(t, syscall.SIGTERM)
	code, err := m.waitExit(15 * time.Second)
	if err != nil {
		t.Fatalf("SIGTERM with a transaction being read: %v", err)
	}
	if code != 0 {
		t.Errorf("daemon exit status %d after SIGTERM, want 0", code)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("daemon took %s to exit, want within shutdown_timeout (2s) + 3s", took.Round(time.Millisecond))
	}
	if ents := mountsAt(m.dir); len(ents) > 0 {
		t.Errorf("mount still present after the daemon exited: %+v", ents)
	}
	r, done := reader.wait(5 * time.Second)
	if !done {
		t.Fatalf("the blocked transaction read did not return after the daemon exited")
	}
	// Shutdown wakes it with ESHUTDOWN after the drain.
	if r.code == 0 || !strings.Contains(r.stderr, "Cannot send after transport endpoint shutdown") {
		t.Errorf("the blocked transaction read: %s\nwant ESHUTDOWN", r)
	}
}
