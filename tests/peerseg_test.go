// peerseg_test.go: a peer's exported region opened as a segment through
// the mount (tcp://HOST:PORT/REGION) and moved by the batch API: two real
// daemons on loopback, READ and WRITE through ctl/batches, bytes checked
// with cmp through the other daemon's memory/X/data; the open's refusals;
// a WRITE to a daemon killed mid-transfer ends with remote effect unknown
// and is never retried; a WRITE held mid-frame by a relay is cut by
// `cancel 0` (cancelled, unknown, not retried).

package tests

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startPeerDaemonConf is startPeerDaemon with more [peer] keys, shared
// with other users (allow_other).
func startPeerDaemonConf(t *testing.T, name, keyFile, more string) (*mount, string) {
	t.Helper()
	m := startDaemon(t, daemonOpts{config: fmt.Sprintf("[mount]\nallow_other = true\n[peer]\nlisten = \"127.0.0.1:0\"\nname = %q\nkey_file = %q\n%s", name, keyFile, more)})
	sub := peerAddrRE.FindStringSubmatch(m.logText())
	if sub == nil {
		t.Fatalf("daemon %s did not log its peer address:\n%s", name, m.logText())
	}
	return m, sub[1]
}

// batchScript runs one submission in a fresh batch of A's mount and
// prints the wait word, then task 0's file.
const batchScript = `B=$(cat $M/ctl/batches/clone)
echo '%s' > $M/ctl/batches/$B/submit
echo seal > $M/ctl/batches/$B/ctl
cat $M/ctl/batches/$B/wait
cat $M/ctl/batches/$B/tasks/0
cat $M/ctl/batches/$B/status
`

func TestPeerSegmentBatch(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startPeerDaemonConf(t, "alpha", key, "lanes = 4\n")
	b, addrB := startPeerDaemon(t, "beta", key)
	b.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"8MiB","export":"read_write"}' > $M/memory/register
echo '{"name":"ro","location":"cpu","bytes":4096,"export":"read"}' > $M/memory/register
echo '{"name":"private","location":"cpu","bytes":4096}' > $M/memory/register
head -c 8388608 /dev/urandom > $M/memory/kv/data`)
	a.ok(t, fmt.Sprintf(`echo '{"name":"buf","location":"cpu","bytes":"8MiB"}' > $M/memory/register
echo '{"name":"r","uri":"tcp://%[1]s/kv","permission":"read_write"}' > $M/segments/open
echo '{"name":"h","uri":"hp_tcp://%[1]s/kv","permission":"read"}' > $M/segments/open`, addrB))
	info := a.ok(t, `cat $M/segments/r/info; cat $M/segments/h/info`)
	for _, want := range []string{`"peer": "beta"`, `"region": "kv"`, `"size": 8388608`, `"export": "read_write"`,
		`"lanes": 1`, `"lanes": 4`, `"address": "` + addrB + `"`, `"epoch": `} {
		if !strings.Contains(info, want) {
			t.Errorf("segment info lacks %s:\n%s", want, info)
		}
	}

	// READ: B's region into A's memory in two requests, checked with cmp
	// against B's memory through B's mount.
	out := a.ok(t, fmt.Sprintf(batchScript, `{"op":"read","target":"r","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"3MiB"},{"memory":"buf","offset":"3MiB","target_offset":"3MiB","length":"5MiB"}]}`)+
		fmt.Sprintf(`cmp $M/memory/buf/data %s/memory/kv/data`, b.dir))
	if !strings.HasPrefix(out, "completed") || !strings.Contains(out, `"transport": "tcp"`) || !strings.Contains(out, `"transferred_bytes": 3145728`) {
		t.Fatalf("READ batch:\n%s", out)
	}
	// The same over hp_tcp (4 lanes, striped).
	a.ok(t, `head -c 8388608 /dev/zero > $M/memory/buf/data`)
	out = a.ok(t, fmt.Sprintf(batchScript, `{"op":"read","target":"h","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"8MiB"}]}`)+
		fmt.Sprintf(`cmp $M/memory/buf/data %s/memory/kv/data`, b.dir))
	if !strings.HasPrefix(out, "completed") {
		t.Fatalf("hp_tcp READ batch:\n%s", out)
	}

	// WRITE: new bytes from A's memory into B's region, a slice at an
	// offset, checked through B's mount.
	tmp := strings.TrimSpace(a.ok(t, `echo $T`))
	out = a.ok(t, fmt.Sprintf(`head -c 8388608 /dev/urandom > $M/memory/buf/data
cp $M/memory/buf/data %[1]s/want
cp %[2]s/memory/kv/data %[1]s/before
`, tmp, b.dir)+fmt.Sprintf(batchScript, `{"op":"write","target":"r","requests":[{"memory":"buf","offset":"1MiB","target_offset":"1MiB","length":"6MiB"}]}`))
	if !strings.HasPrefix(out, "completed") || !strings.Contains(out, `"remote_effect": "applied"`) {
		t.Fatalf("WRITE batch:\n%s", out)
	}
	b.ok(t, fmt.Sprintf(`cmp <(head -c 1048576 %[1]s/before) <(head -c 1048576 $M/memory/kv/data)
cmp <(tail -c +1048577 %[1]s/want | head -c 6291456) <(tail -c +1048577 $M/memory/kv/data | head -c 6291456)
cmp <(tail -c 1048576 %[1]s/before) <(tail -c 1048576 $M/memory/kv/data)`, tmp))

	// Refusals, each from the write itself with its reason in /error;
	// nothing opened, nothing moved.
	r := a.run(t, fmt.Sprintf(`try() { if echo "$1" > $2 2>$T/err; then echo "ok"; else sed 's/.*: //' $T/err; fi; cat $M/error 2>/dev/null | tail -n 1; }
try '{"name":"w","uri":"tcp://%[1]s/ro","permission":"write"}' $M/segments/open
try '{"name":"p","uri":"tcp://%[1]s/private","permission":"read"}' $M/segments/open
try '{"name":"n","uri":"tcp://%[1]s","permission":"read"}' $M/segments/open
try '{"name":"q","uri":"tcp://127.0.0.1:1/kv","permission":"read"}' $M/segments/open
B=$(cat $M/ctl/batches/clone)
try '{"op":"read","target":"r","requests":[{"memory":"buf","offset":0,"target_offset":"8MiB","length":1}]}' $M/ctl/batches/$B/submit
cat $M/ctl/batches/$B/error
echo SEGMENTS $(ls $M/segments)`, addrB))
	t.Logf("refusals:\n%s", r)
	for _, want := range []string{
		"Permission denied", `permission write asked, but beta exports region "ro" with permission read`,
		"No such file or directory", `exports no region "private"`,
		"Invalid argument", "no region: want tcp://HOST:PORT/REGION",
		"unavailable",
		"Numerical result out of range", `target_offset 8388608 + length 1 = 8388609 is beyond region "kv" of beta (8388608 bytes)`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("refusals: no %q in\n%s", want, r)
		}
	}
	if strings.Contains(r.stdout, "ok\n") || !strings.Contains(r.stdout, "SEGMENTS h open r\n") {
		t.Errorf("a refused open was accepted or left a segment:\n%s", r)
	}
	// The daemon's key is not every user's: nobody opens no peer segment.
	r = a.run(t, asNobody+"bash -c "+shq(fmt.Sprintf(`echo '{"name":"x","uri":"tcp://%s/kv","permission":"read"}' > %s/segments/open`, addrB, a.dir)))
	if r.code == 0 || !strings.Contains(r.stderr, "Permission denied") {
		t.Errorf("nobody's peer segment: %s", r)
	}
	if got := a.line(t, `cat "$M/error"`); !strings.Contains(got, "a peer segment uses the daemon's peer key; only root or the daemon's user") {
		t.Errorf("nobody's peer segment: /error = %q", got)
	}
	a.ok(t, `rmdir $M/segments/r $M/segments/h; test ! -e $M/segments/r`)
}

// kill -9 of the receiving daemon in the middle of a batch WRITE: the
// task ends failed with remote effect unknown, within the timeout, and
// the relay sees no second lane (nothing retried).
func TestPeerSegmentKilledMidWriteIsUnknown(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startPeerDaemon(t, "alpha", key)
	b, addrB := startPeerDaemon(t, "beta", key)
	b.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"64MiB","export":"write"}' > $M/memory/register`)
	rl := startRelay(t, addrB, 16<<20, func() { b.signal(t, syscall.SIGKILL) })
	a.ok(t, fmt.Sprintf(`echo '{"name":"buf","location":"cpu","bytes":"64MiB"}' > $M/memory/register
head -c 67108864 /dev/urandom > $M/memory/buf/data
echo '{"name":"r","uri":"tcp://%s/kv","permission":"write"}' > $M/segments/open`, rl.ln.Addr()))
	start := time.Now()
	out := a.ok(t, fmt.Sprintf(batchScript, `{"op":"write","target":"r","timeout":"20s","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"64MiB"}]}`))
	t.Logf("WRITE to a daemon killed mid-frame:\n%s", out)
	if !strings.HasPrefix(out, "failed") || !strings.Contains(out, `"remote_effect": "unknown"`) || !strings.Contains(out, `"state": "failed"`) {
		t.Fatalf("WRITE to a daemon killed mid-frame:\n%s", out)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("the failure took %v", d)
	}
	if code, err := b.waitExit(5 * time.Second); err != nil || code != -1 {
		t.Fatalf("the daemon was not killed: exit %d, %v", code, err)
	}
	time.Sleep(200 * time.Millisecond) // room for a retry that must not come
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.accepted != 2 || rl.sent != 16<<20 {
		t.Fatalf("relay: %d connections (want control and one lane: no retry), %d bytes", rl.accepted, rl.sent)
	}
}

// A relay that stops forwarding mid-frame holds a batch WRITE (no ack
// comes); `cancel 0` cuts it at once: the task ends cancelled with remote
// effect unknown, long before the peer's io_timeout, and nothing is sent
// again.
func TestPeerSegmentCancelRunning(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startPeerDaemonConf(t, "alpha", key, "io_timeout = \"60s\"\n")
	b, addrB := startPeerDaemon(t, "beta", key)
	b.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"64MiB","export":"write"}' > $M/memory/register`)
	held := make(chan struct{})
	rl := startRelay(t, addrB, 16<<20, func() { close(held) })
	a.ok(t, fmt.Sprintf(`echo '{"name":"buf","location":"cpu","bytes":"64MiB"}' > $M/memory/register
head -c 67108864 /dev/urandom > $M/memory/buf/data
echo '{"name":"r","uri":"tcp://%s/kv","permission":"write"}' > $M/segments/open
B=$(cat $M/ctl/batches/clone)
echo '{"op":"write","target":"r","timeout":"50s","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"64MiB"}]}' > $M/ctl/batches/$B/submit
echo seal > $M/ctl/batches/$B/ctl`, rl.ln.Addr()))
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the WRITE never reached the relay's limit")
	}
	start := time.Now()
	out := a.ok(t, `echo "cancel 0" > $M/ctl/batches/1/ctl
timeout 10 cat $M/ctl/batches/1/wait
cat $M/ctl/batches/1/tasks/0`)
	t.Logf("cancelled mid-frame:\n%s", out)
	if !strings.HasPrefix(out, "cancelled") || !strings.Contains(out, `"state": "cancelled"`) || !strings.Contains(out, `"remote_effect": "unknown"`) || !strings.Contains(out, "cancelled while running") {
		t.Fatalf("a WRITE cancelled mid-frame:\n%s", out)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the cancel took %v", d)
	}
	time.Sleep(200 * time.Millisecond) // room for a retry that must not come
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.accepted != 2 || rl.sent != 16<<20 {
		t.Fatalf("relay: %d connections (want control and one lane: no retry), %d bytes", rl.accepted, rl.sent)
	}
}

// Every peer's dial fetches the list of exported regions in one frame of
// at most 64 KiB of metadata. Registrations that would make the list
// longer are refused (EFBIG), so the daemon stays reachable: before,
// 300 exports with long names made every dial fail with a corrupt frame.
func TestExportListStaysSendable(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startPeerDaemonConf(t, "alpha", key, "")
	b, addrB := startPeerDaemon(t, "beta", key)
	out := b.ok(t, `long=$(printf 'x%.0s' $(seq 240))
ok=0
for i in $(seq 300); do
  if echo "{\"name\":\"r$i-$long\",\"location\":\"cpu\",\"bytes\":4096,\"export\":\"read\"}" > $M/memory/register 2>$T/err; then
    ok=$((ok+1))
  else
    echo "refused $i: $(sed 's/.*: //' $T/err)"; tail -n 1 $M/error; break
  fi
done
echo "registered $ok"`)
	t.Logf("%s", out)
	if !strings.Contains(out, "refused ") || !strings.Contains(out, eFBIG) || !strings.Contains(out, "exported regions take") {
		t.Errorf("300 long exports: none refused with EFBIG:\n%s", out)
	}
	a.ok(t, `echo '{"name":"buf","location":"cpu","bytes":4096}' > $M/memory/register`)
	a.ok(t, fmt.Sprintf(`echo '{"name":"r","uri":"tcp://%s/r1-%s","permission":"read"}' > $M/segments/open`, addrB, strings.Repeat("x", 240)))
	// The refused registration left nothing behind.
	if n := b.line(t, `ls $M/memory | grep -c '^r[0-9]'`); !strings.Contains(out, "registered "+n+"\n") {
		t.Errorf("%s registrations listed, the loop says:\n%s", n, out)
	}
	a.ok(t, `rmdir $M/segments/r`)
}
