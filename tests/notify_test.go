// notify_test.go: completion notifications between two real daemons, as
// a script sees them. A's submission carries a notify to B; B reads
// /peers/notifications, which blocks until one arrives and returns one
// line per read. The message comes only after A's data is in place;
// a failed submission sends nothing; a full inbox answers busy.

package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startNotifyDaemon starts a daemon on slowConfig listening for peers
// on loopback, with extra [peer] keys, and returns it with its address.
func startNotifyDaemon(t *testing.T, name, keyFile, extra string) (*mount, string) {
	t.Helper()
	return startNotifyDaemonConf(t, name, keyFile, slowConfig, extra)
}

// startNotifyDaemonConf is startNotifyDaemon on base (which has no [peer]).
func startNotifyDaemonConf(t *testing.T, name, keyFile, base, extra string) (*mount, string) {
	t.Helper()
	m := startDaemon(t, daemonOpts{config: base + fmt.Sprintf("\n[peer]\nlisten = \"127.0.0.1:0\"\nname = %q\nkey_file = %q\n%s", name, keyFile, extra)})
	sub := peerAddrRE.FindStringSubmatch(m.logText())
	if sub == nil {
		t.Fatalf("daemon %s did not log its peer address:\n%s", name, m.logText())
	}
	return m, sub[1]
}

// notifyOf is destination i of submission sub in batch n's status.
func (m *mount) notifyOf(t *testing.T, n string, sub, i int) map[string]any {
	t.Helper()
	s := m.readJSON(t, "ctl/batches/"+n+"/status")
	subs, _ := s["submissions"].([]any)
	if sub >= len(subs) {
		t.Fatalf("batch %s has %d submissions, want %d+", n, len(subs), sub+1)
	}
	ds, _ := subs[sub].(map[string]any)["notify"].([]any)
	if i >= len(ds) {
		t.Fatalf("batch %s submission %d has notify %v", n, sub, ds)
	}
	return ds[i].(map[string]any)
}

// waitNotify waits until destination 0 of submission sub leaves pending
// and returns it.
func (m *mount) waitNotify(t *testing.T, n string, sub int) map[string]any {
	t.Helper()
	var d map[string]any
	eventually(t, mountWait, "the notification leaves pending", func() bool {
		d = m.notifyOf(t, n, sub, 0)
		return d["state"] != "pending"
	})
	return d
}

// holdingBatch clones a batch on m whose first submission (64 reads of
// 256 MiB of a sparse file into region big, queue depth 1: seconds,
// and handed to the kernel, so not cancellable) holds a memory
// submission after it that reads big.
func (m *mount) holdingBatch(t *testing.T, big, seg string) string {
	t.Helper()
	n := m.clone(t)
	m.ok(t, fmt.Sprintf(`jq -nc --arg r %s --arg s %s '{op:"read",target:$s,requests:[range(64)|{memory:$r,offset:0,target_offset:0,length:268435456}]}' > "$M/ctl/batches/%s/submit"`, big, seg, n))
	return n
}

func TestNotifyBetweenDaemons(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startNotifyDaemon(t, "alpha", key, "max_notification_bytes = 64\n")
	// B's inbox holds one notification at most.
	b, addrB := startNotifyDaemon(t, "beta", key, "max_pending_notifications = 1\nmax_pending_notifications_per_peer = 1\n")

	_, S := a.scratchDirs(t)
	a.ok(t, `truncate -s 256M "$S/sparse"`)
	big := a.register(t, "big", "256MiB")
	seg := a.openSegment(t, "sparse", S+"/sparse", "read")
	out := a.register(t, "out", 4096)
	outseg := uniq("outseg")
	a.ok(t, fmt.Sprintf(`echo '{"name":"%s","uri":"mem://%s","permission":"read_write"}' > "$M/segments/open"`, outseg, out))
	t.Cleanup(func() { a.sh(t, `rmdir "$M/segments/`+outseg+`" 2>/dev/null`) })
	notifyDoc := func(msg string) string {
		return fmt.Sprintf(`{"op":"write","target":"%s","requests":[{"memory":"%s","offset":0,"length":4096}],"notify":[{"peer":"tcp://%s","message":"%s"}]}`,
			outseg, big, addrB, msg)
	}

	t.Run("after the data", func(t *testing.T) {
		// out holds 0xff; the submission copies big's zeros over it.
		a.ok(t, fmt.Sprintf(`head -c 4096 /dev/zero | tr '\0' '\377' > "$M/memory/%s/data"`, out))
		n := a.holdingBatch(t, big, seg)
		a.submit(t, n, notifyDoc("kv ready"))
		reader := b.start(t, `exec head -n 1 "$M/peers/notifications"`)
		// Held behind the first submission: nothing is sent yet.
		reader.blockedInRead(t)
		time.Sleep(200 * time.Millisecond)
		if !reader.running() {
			t.Fatalf("B read a notification while A's submission was still held: %s", reader.res)
		}
		if d := a.notifyOf(t, n, 1, 0); d["state"] != "pending" {
			t.Fatalf("held submission's notify: %v, want pending", d)
		}
		// The first submission ends by itself; then the second runs.
		r, done := reader.wait(60 * time.Second)
		if !done || r.code != 0 {
			t.Fatalf("B's reader: done %v: %s", done, r)
		}
		// The data was in place when the notification arrived.
		a.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" <(head -c 4096 /dev/zero)`, out))
		var got struct {
			Sender, Epoch, Submission, Message string
			ID                                 uint64
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("B's line %q: %v", r.stdout, err)
		}
		if got.Sender != "alpha" || got.Message != "kv ready" || got.Submission != n+"/1" || len(got.Epoch) != 16 || got.ID == 0 {
			t.Fatalf("B read %+v", got)
		}
		if d := a.waitNotify(t, n, 1); d["state"] != "delivered" || d["peer"] != "tcp://"+addrB {
			t.Fatalf("A's status: %v, want delivered", d)
		}
	})

	t.Run("failed submission sends nothing", func(t *testing.T) {
		n := a.holdingBatch(t, big, seg)
		a.submit(t, n, notifyDoc("never"))
		a.ctl(t, n, "cancel_all") // the pending memory submission: cancelled
		d := a.waitNotify(t, n, 1)
		if d["state"] != "not_sent" || !strings.Contains(fmt.Sprint(d["reason"]), "not sent: submission failed") {
			t.Fatalf("cancelled submission's notify: %v", d)
		}
		if r := b.run(t, `timeout 1 head -n 1 "$M/peers/notifications"`); r.code != 124 {
			t.Fatalf("B read after a cancelled submission: %s (want nothing: timeout's 124)", r)
		}
		a.ctl(t, n, "seal")
		if st := a.waitBatch(t, n); st != "cancelled" && st != "failed" {
			t.Fatalf("batch %s", st)
		}
	})

	// A full inbox answers busy, definitely not delivered: the sender
	// sends it again until the submission's deadline, then says busy.
	t.Run("full inbox is busy until the deadline", func(t *testing.T) {
		first, _ := a.run1(t, notifyDoc("first"))
		if d := a.waitNotify(t, first, 0); d["state"] != "delivered" {
			t.Fatalf("first: %v", d)
		}
		doc := strings.Replace(notifyDoc("second"), `"notify"`, `"timeout":"1500ms","notify"`, 1)
		start := time.Now()
		second, _ := a.run1(t, doc)
		d := a.waitNotify(t, second, 0)
		if d["state"] != "busy" || !strings.Contains(fmt.Sprint(d["reason"]), "inbox full") ||
			!strings.Contains(fmt.Sprint(d["reason"]), "not sent again: the submission's deadline comes first") {
			t.Fatalf("second, into a full inbox: %v, want busy at its deadline", d)
		}
		if n, _ := d["attempts"].(float64); n < 2 {
			t.Fatalf("second: %v attempts, want it sent again while busy", d["attempts"])
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("busy after %s: the 1.5 s deadline did not bound the attempts", took)
		}
		if line := b.line(t, `head -n 1 "$M/peers/notifications"`); !strings.Contains(line, `"message":"first"`) {
			t.Fatalf("B read %s, want the first", line)
		}
		if r := b.run(t, `timeout 1 head -n 1 "$M/peers/notifications"`); r.code != 124 {
			t.Fatalf("B read the busy one: %s", r)
		}
	})

	// Once the receiver reads, the busy one is delivered by a later attempt.
	t.Run("busy is delivered once there is room", func(t *testing.T) {
		first, _ := a.run1(t, notifyDoc("room1"))
		if d := a.waitNotify(t, first, 0); d["state"] != "delivered" {
			t.Fatalf("room1: %v", d)
		}
		second, _ := a.run1(t, notifyDoc("room2"))
		eventually(t, mountWait, "room2 is sent again while B's inbox is full", func() bool {
			d := a.notifyOf(t, second, 0, 0)
			n, _ := d["attempts"].(float64)
			return d["state"] == "pending" && n >= 2 && strings.Contains(fmt.Sprint(d["reason"]), "inbox full")
		})
		if line := b.line(t, `head -n 1 "$M/peers/notifications"`); !strings.Contains(line, `"message":"room1"`) {
			t.Fatalf("B read %s, want room1", line)
		}
		if d := a.waitNotify(t, second, 0); d["state"] != "delivered" {
			t.Fatalf("room2 after B read: %v, want delivered", d)
		}
		if line := b.line(t, `head -n 1 "$M/peers/notifications"`); !strings.Contains(line, `"message":"room2"`) {
			t.Fatalf("B read %s, want room2", line)
		}
		if r := b.run(t, `timeout 1 head -n 1 "$M/peers/notifications"`); r.code != 124 {
			t.Fatalf("B read a third one (room2 twice?): %s", r)
		}
	})

	t.Run("a signal ends a blocked read and takes nothing", func(t *testing.T) {
		reader := b.start(t, `exec cat "$M/peers/notifications"`)
		reader.blockedInRead(t)
		reader.signal(syscall.SIGINT)
		if r, done := reader.wait(5 * time.Second); !done || r.code == 0 {
			t.Fatalf("cat after SIGINT: done %v: %s", done, r)
		}
		n, _ := a.run1(t, notifyDoc("after the signal"))
		if d := a.waitNotify(t, n, 0); d["state"] != "delivered" {
			t.Fatalf("%v", d)
		}
		if line := b.line(t, `head -n 1 "$M/peers/notifications"`); !strings.Contains(line, `"message":"after the signal"`) {
			t.Fatalf("B read %s", line)
		}
	})

	t.Run("bad notify changes nothing", func(t *testing.T) {
		n := a.clone(t)
		fileDoc := fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","length":4096}],"notify":[{"peer":"tcp://%s","message":"x"}]}`, seg, big, addrB)
		for _, c := range []struct{ doc, errno, text string }{
			{fileDoc, eINVAL, "is a file segment; a notification rides a memory submission"},
			{strings.Replace(notifyDoc("x"), "tcp://", "http://", 1), eINVAL, "want tcp://HOST:PORT"},
			{strings.Replace(notifyDoc("x"), `"message"`, `"mesage"`, 1), eINVAL, `unknown field "mesage"`},
			{notifyDoc(strings.Repeat("x", 65)), eFBIG, "a message of 65 bytes, over peer.max_notification_bytes (64)"},
			{strings.Replace(notifyDoc("x"), `}]}`, fmt.Sprintf(`},{"peer":"tcp://%s","message":"y"}]}`, addrB), 1), eINVAL, "give each destination once"},
		} {
			r := a.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(c.doc), n))
			if r.code == 0 || !strings.Contains(r.stderr, c.errno) {
				t.Errorf("%s: %s, want %s", c.doc, r, c.errno)
			}
			if e := a.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/error"`, n)); !strings.Contains(e, c.text) {
				t.Errorf("%s: error file %q, want %q", c.doc, e, c.text)
			}
		}
		if k := a.taskCount(t, n); k != 0 {
			t.Errorf("refused submissions appended %d tasks", k)
		}
	})
}

// A daemon without a peer listener has no inbox: reading it says so.
func TestNotificationsWithoutListener(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	r := m.run(t, `cat "$M/peers/notifications"`)
	if r.code == 0 || !strings.Contains(r.stderr, eOPNOTSUPP) {
		t.Fatalf("cat peers/notifications without a listener: %s, want %s", r, eOPNOTSUPP)
	}
	if e := m.ok(t, `cat "$M/error"`); !strings.Contains(e, "no peer listener") {
		t.Fatalf("/error: %q", e)
	}
	// And a submission with notify is refused: no key, nothing to send with.
	reg := m.register(t, "nk", 4096)
	seg := uniq("nkseg")
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","uri":"mem://%s","permission":"read_write"}' > "$M/segments/open"`, seg, reg))
	t.Cleanup(func() { m.sh(t, `rmdir "$M/segments/`+seg+`" 2>/dev/null`) })
	n := m.clone(t)
	r = m.run(t, fmt.Sprintf(`echo '{"op":"write","target":"%s","requests":[{"memory":"%s","length":4096}],"notify":[{"peer":"tcp://127.0.0.1:9","message":"x"}]}' > "$M/ctl/batches/%s/submit"`, seg, reg, n))
	if r.code == 0 || !strings.Contains(r.stderr, eOPNOTSUPP) {
		t.Fatalf("notify without a key: %s, want %s", r, eOPNOTSUPP)
	}
}

// A notification is sent with the daemon's key, so it is the daemon's
// user's and root's alone: another user of a shared mount (allow_other)
// who may submit to its own memory still sends nothing to any peer.
func TestNotifyNotForOtherUsers(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startPeerDaemonConf(t, "alpha", key, "")
	b, addrB := startNotifyDaemon(t, "beta", key, "")
	r := a.run(t, asNobody+"bash -c "+shq(fmt.Sprintf(`set -e
M=%s
echo '{"name":"nb","location":"cpu","bytes":4096}' > $M/memory/register
echo '{"name":"nbseg","uri":"mem://nb","permission":"read_write"}' > $M/segments/open
B=$(cat $M/ctl/batches/clone)
echo '{"op":"write","target":"nbseg","requests":[{"memory":"nb","length":4096}],"notify":[{"peer":"tcp://%s","message":"forged"}]}' > $M/ctl/batches/$B/submit || { cat $M/ctl/batches/$B/error; exit 1; }
echo seal > $M/ctl/batches/$B/ctl
cat $M/ctl/batches/$B/wait`, a.dir, addrB)))
	if r.code == 0 || !strings.Contains(r.stderr, "Permission denied") {
		t.Errorf("nobody's notify: %s, want EACCES", r)
	}
	if !strings.Contains(r.stdout, "a notification is sent with the daemon's peer key; only root or the daemon's user") {
		t.Errorf("nobody's notify: the batch's error file lacks the reason: %s", r)
	}
	if r := b.run(t, `timeout 2 head -n 1 "$M/peers/notifications"`); r.code != 124 {
		t.Errorf("B received nobody's notification: %s", r)
	}
}

// A sender whose pending budget is one notification: a destination
// where nothing listens yet is not_sent at each attempt and sent again,
// holding the budget (a second submission with notify gets EAGAIN and
// appends nothing); a daemon started on that address then receives it
// once; the budget is free again; a message the receiver refuses as too
// large is not_sent after one attempt, never sent again.
func TestNotifyRetriesUntilReceiverListens(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	// The sender's bound is the engine's key, not the inbox's [peer] one.
	a, _ := startNotifyDaemonConf(t, "alpha", key, strings.Replace(slowConfig, "[engine]\n", "[engine]\nmax_pending_notifications = 1\n", 1), "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addrC := l.Addr().String()
	l.Close() // nothing listens there until C starts

	out := a.register(t, "out", 4096)
	seg := uniq("outseg")
	a.ok(t, fmt.Sprintf(`echo '{"name":"%s","uri":"mem://%s","permission":"read_write"}' > "$M/segments/open"`, seg, out))
	t.Cleanup(func() { a.sh(t, `rmdir "$M/segments/`+seg+`" 2>/dev/null`) })
	docTo := func(addr, msg string) string {
		return fmt.Sprintf(`{"op":"write","target":"%s","requests":[{"memory":"%s","length":4096}],"notify":[{"peer":"tcp://%s","message":"%s"}]}`, seg, out, addr, msg)
	}
	doc := func(msg string) string { return docTo(addrC, msg) }

	early, st := a.run1(t, doc("early"))
	if st != "completed" {
		t.Fatalf("early: %s", st)
	}
	eventually(t, mountWait, "early is sent again while nothing listens", func() bool {
		d := a.notifyOf(t, early, 0, 0)
		n, _ := d["attempts"].(float64)
		return d["state"] == "pending" && n >= 2 && strings.Contains(fmt.Sprint(d["reason"]), "refused")
	})

	// The budget is held by early's attempts.
	n := a.clone(t)
	r := a.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(doc("second")), n))
	if r.code == 0 || !strings.Contains(r.stderr, eAGAIN) {
		t.Fatalf("a second notify past engine.max_pending_notifications: %s, want %s", r, eAGAIN)
	}
	if e := a.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/error"`, n)); !strings.Contains(e, "would pass engine.max_pending_notifications (1)") {
		t.Fatalf("error file %q", e)
	}
	if k := a.taskCount(t, n); k != 0 {
		t.Fatalf("the refused submission appended %d tasks", k)
	}

	c := startDaemon(t, daemonOpts{config: slowConfig + fmt.Sprintf("\n[peer]\nlisten = %q\nname = \"gamma\"\nkey_file = %q\nmax_notification_bytes = 8\n", addrC, key)})
	if d := a.waitNotify(t, early, 0); d["state"] != "delivered" {
		t.Fatalf("early once C listens: %v, want delivered", d)
	}
	if line := c.line(t, `head -n 1 "$M/peers/notifications"`); !strings.Contains(line, `"message":"early"`) || !strings.Contains(line, `"sender":"alpha"`) {
		t.Fatalf("C read %s", line)
	}
	if r := c.run(t, `timeout 1 head -n 1 "$M/peers/notifications"`); r.code != 124 {
		t.Fatalf("C read early twice: %s", r)
	}

	// The budget is free again; C refuses a message over its 8 bytes:
	// one attempt, never another.
	big, _ := a.run1(t, doc("ten bytes!"))
	d := a.waitNotify(t, big, 0)
	if d["state"] != "not_sent" || !strings.Contains(fmt.Sprint(d["reason"]), "over the receiver's 8") || d["attempts"] != 1.0 {
		t.Fatalf("a message C refuses: %v, want not_sent after 1 attempt", d)
	}

	// The deadline bounds an attempt: a listener that accepts and never
	// answers the handshake holds the dial for peer.dial_timeout (5s),
	// but a submission with a 1s timeout ends at 1s.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	start := time.Now()
	muted, _ := a.run1(t, strings.Replace(docTo(mute.Addr().String(), "mute"), `"notify"`, `"timeout":"1s","notify"`, 1))
	d = a.waitNotify(t, muted, 0)
	if took := time.Since(start); d["state"] != "not_sent" || took > 3*time.Second {
		t.Fatalf("a notification to a listener that never answers, in a 1s submission: %v after %s; want not_sent within about 1s", d, took)
	}

	// Freeing the batch ends the attempts and gives the budget back.
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	orphan, _ := a.run1(t, docTo(dead, "orphan"))
	eventually(t, mountWait, "orphan is sent again while nothing listens", func() bool {
		d := a.notifyOf(t, orphan, 0, 0)
		n, _ := d["attempts"].(float64)
		return d["state"] == "pending" && n >= 2
	})
	a.ok(t, `rmdir "$M/ctl/batches/`+orphan+`"`)
	n = a.clone(t)
	eventually(t, mountWait, "a notify is accepted once the freed batch's attempts end", func() bool {
		return a.run(t, fmt.Sprintf(`echo %s > "$M/ctl/batches/%s/submit"`, shq(doc("after")), n)).code == 0
	})
	if !strings.Contains(a.logText(), "not sent again: the batch was freed") {
		t.Fatalf("the log does not say why orphan's attempts ended")
	}
}
