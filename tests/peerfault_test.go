// peerfault_test.go: faults between two real daemons. The peer (B,
// exporting region kv) runs in a network namespace the test made, on
// one end of a veth pair; the client (A) runs on the other end and opens
// B's region as segments through its mount. Faults are made only inside
// that namespace and on that veth pair: loss and resets with nftables,
// a rate with tc tbf, a partition (nft drops everything both ways), a
// relay in the test process that delays or blackholes what B sends, a
// restart of B (kill -9, a new epoch), and a long idle period. Each case
// checks the task's outcome and remote effect, that it ended within its
// bound (no hang), the bytes on the other side for every success, and
// that nothing changed where the effect is none.

package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const faultPort = 7070

// slack is what a bound allows beyond the timeout it checks: the fault
// tests run in parallel on a small, shared machine, and each bound
// includes a shell, the mount and the batch's own bookkeeping.
const slack = 3 * time.Second

// faultNet is a veth pair with B's namespace on one end, and the key
// both daemons share.
type faultNet struct {
	vethPair
	key   string
	addrB string // B's peer address, nsIP:7070
}

func newFaultNet(t *testing.T) *faultNet {
	t.Helper()
	v := makeVethPair(t)
	for _, tool := range []string{"nsenter", "nft", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			unavailable(t, "netns", "no %s: the peer fault tests need it", tool)
		}
	}
	f := &faultNet{vethPair: v, addrB: fmt.Sprintf("%s:%d", v.nsIP, faultPort)}
	f.key = writeKey(t, t.TempDir(), "peer.key", "the shared key of the fault tests")
	return f
}

// startB starts the peer in its namespace with kv (size bytes, read and
// write) exported; before, more registrations made first (so kv's
// descriptor id differs between starts).
func (f *faultNet) startB(t *testing.T, size string, before ...string) *mount {
	t.Helper()
	b := startDaemon(t, daemonOpts{netns: f.ns, config: fmt.Sprintf("[peer]\nlisten = %q\nname = \"beta\"\nkey_file = %q\n", f.addrB, f.key)})
	var sb strings.Builder
	for _, n := range before {
		fmt.Fprintf(&sb, "echo '{\"name\":%q,\"location\":\"cpu\",\"bytes\":4096,\"export\":\"read_write\"}' > $M/memory/register\n", n)
	}
	fmt.Fprintf(&sb, "echo '{\"name\":\"kv\",\"location\":\"cpu\",\"bytes\":%q,\"export\":\"read_write\"}' > $M/memory/register\n", size)
	b.ok(t, sb.String())
	return b
}

// startA starts the client with [peer] key_file, lanes 4 and more, a
// buf of size bytes of random data, and segments r (tcp://) and h
// (hp_tcp://) on uri's host:port (B's address or a relay's).
func (f *faultNet) startA(t *testing.T, size, more, hostport string) *mount {
	t.Helper()
	a := startDaemon(t, daemonOpts{config: fmt.Sprintf("[peer]\nname = \"alpha\"\nkey_file = %q\nlanes = 4\n%s", f.key, more)})
	a.ok(t, fmt.Sprintf(`echo '{"name":"buf","location":"cpu","bytes":%[1]q}' > $M/memory/register
head -c %[1]s /dev/urandom > $M/memory/buf/data
echo '{"name":"r","uri":"tcp://%[2]s/kv","permission":"read_write"}' > $M/segments/open
echo '{"name":"h","uri":"hp_tcp://%[2]s/kv","permission":"read_write"}' > $M/segments/open`, bytesOf(size), hostport))
	return a
}

// bytesOf turns "8MiB" into "8388608" for head -c.
func bytesOf(s string) string {
	var n int64
	var unit string
	fmt.Sscanf(s, "%d%s", &n, &unit)
	switch unit {
	case "KiB":
		n <<= 10
	case "MiB":
		n <<= 20
	}
	return fmt.Sprint(n)
}

// nsRun runs a command in B's namespace.
func (f *faultNet) nsRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", f.ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s: %v\n%s", f.ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nft installs rules for B's peer port in B's namespace: in for what
// reaches B, out for what B sends. They replace earlier ones.
func (f *faultNet) nft(t *testing.T, in, out string) {
	t.Helper()
	exec.Command("ip", "netns", "exec", f.ns, "nft", "delete", "table", "inet", "orbfault").Run()
	rule := func(dir, r string) string {
		if r == "" {
			return ""
		}
		return fmt.Sprintf("\t\ttcp %s %d %s\n", dir, faultPort, r)
	}
	rules := "table inet orbfault {\n\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n" + rule("dport", in) +
		"\t}\n\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n" + rule("sport", out) + "\t}\n}\n"
	cmd := exec.Command("ip", "netns", "exec", f.ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f:\n%s%v\n%s", rules, err, b)
	}
}

// nftClear removes the rules.
func (f *faultNet) nftClear(t *testing.T) { f.nsRun(t, "nft", "delete", "table", "inet", "orbfault") }

var nftPackets = regexp.MustCompile(`counter packets (\d+)`)

// nftDropped sums the packets counted by the rules.
func (f *faultNet) nftDropped(t *testing.T) int {
	t.Helper()
	n := 0
	for _, m := range nftPackets.FindAllStringSubmatch(f.nsRun(t, "nft", "list", "table", "inet", "orbfault"), -1) {
		var k int
		fmt.Sscan(m[1], &k)
		n += k
	}
	return n
}

// rate limits both directions of the veth pair to r with tbf: B's end
// (what B sends) in its namespace, A's end (what A sends) here.
func (f *faultNet) rate(t *testing.T, r string) {
	t.Helper()
	f.nsRun(t, "tc", "qdisc", "replace", "dev", f.nsIf, "root", "tbf", "rate", r, "burst", "64kb", "latency", "400ms")
	if out, err := exec.Command("tc", "qdisc", "replace", "dev", f.hostIf, "root", "tbf", "rate", r, "burst", "64kb", "latency", "400ms").CombinedOutput(); err != nil {
		t.Fatalf("tc on %s: %v\n%s", f.hostIf, err, out)
	}
}

var tcSent = regexp.MustCompile(`Sent (\d+) bytes`)

// inFlight waits until at least n bytes went from A toward B through the
// rate limit (tc's counter on A's end), so a fault made next lands in
// the middle of a WRITE.
func (f *faultNet) inFlight(t *testing.T, n int64) {
	t.Helper()
	eventually(t, 20*time.Second, "the transfer is under way", func() bool { return f.sent(t, false) >= n })
}

// readInFlight is inFlight for a READ: at least n bytes went from B
// toward A through the rate limit on B's end.
func (f *faultNet) readInFlight(t *testing.T, n int64) {
	t.Helper()
	eventually(t, 20*time.Second, "the READ is under way", func() bool { return f.sent(t, true) >= n })
}

// sent is tc's count of the bytes that left through the rate limit on
// A's end (toward B), or on B's end (toward A) when fromB.
func (f *faultNet) sent(t *testing.T, fromB bool) int64 {
	t.Helper()
	args := []string{"tc", "-s", "qdisc", "show", "dev", f.hostIf}
	if fromB {
		args = []string{"ip", "netns", "exec", f.ns, "tc", "-s", "qdisc", "show", "dev", f.nsIf}
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	m := tcSent.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var n int64
	fmt.Sscan(string(m[1]), &n)
	return n
}

// unrate removes the limits.
func (f *faultNet) unrate(t *testing.T) {
	t.Helper()
	f.nsRun(t, "tc", "qdisc", "del", "dev", f.nsIf, "root")
	exec.Command("tc", "qdisc", "del", "dev", f.hostIf, "root").Run()
}

// faultTask is a batch's wait word and its task 0.
type faultTask struct {
	Word   string
	State  string  `json:"state"`
	Bytes  uint64  `json:"transferred_bytes"`
	Effect string  `json:"remote_effect"`
	Error  *string `json:"error"`
	Took   time.Duration
}

func (r faultTask) String() string {
	e := ""
	if r.Error != nil {
		e = *r.Error
	}
	return fmt.Sprintf("%s: state %s, effect %s, %d bytes, after %s, error %q", r.Word, r.State, r.Effect, r.Bytes, r.Took.Round(time.Millisecond), e)
}

// faultBatch is one submission's script: a fresh batch, sealed, waited
// for; it prints the wait word and task 0.
func faultBatch(op, seg, length, timeout string) string {
	return faultBatchAt(op, seg, 0, length, timeout)
}

// faultBatchAt is faultBatch with the request at offset memOff of buf.
func faultBatchAt(op, seg string, memOff int64, length, timeout string) string {
	return fmt.Sprintf(`B=$(cat $M/ctl/batches/clone)
echo '{"op":%q,"target":%q,"timeout":%q,"requests":[{"memory":"buf","offset":%d,"target_offset":0,"length":%q}]}' > $M/ctl/batches/$B/submit
echo seal > $M/ctl/batches/$B/ctl
cat $M/ctl/batches/$B/wait
cat $M/ctl/batches/$B/tasks/0
`, op, seg, timeout, memOff, length)
}

func parseFaultTask(t *testing.T, out string, took time.Duration) faultTask {
	t.Helper()
	word, rest, _ := strings.Cut(out, "\n")
	r := faultTask{Word: strings.TrimSpace(word), Took: took}
	if err := json.Unmarshal([]byte(rest), &r); err != nil {
		t.Fatalf("task 0: %v\n%s", err, out)
	}
	return r
}

// batch runs one submission on A and returns its outcome.
func batch(t *testing.T, a *mount, op, seg, length, timeout string) faultTask {
	t.Helper()
	start := time.Now()
	out := a.ok(t, faultBatch(op, seg, length, timeout))
	return parseFaultTask(t, out, time.Since(start))
}

// want checks a task's outcome and its time bound.
func (r faultTask) want(t *testing.T, what, state, effect string, within time.Duration) {
	t.Helper()
	t.Logf("%s: %s", what, r)
	if r.State != state || r.Effect != effect {
		t.Fatalf("%s: %s; want state %s, effect %s", what, r, state, effect)
	}
	if r.Took > within {
		t.Fatalf("%s: took %s, bound %s", what, r.Took.Round(time.Millisecond), within)
	}
}

// sameBytes checks that A's buf and B's kv hold the same n bytes.
func sameBytes(t *testing.T, a, b *mount, n string) {
	t.Helper()
	a.ok(t, fmt.Sprintf(`cmp -n %s $M/memory/buf/data %s/memory/kv/data`, bytesOf(n), b.dir))
}

// snapshot copies B's kv to a file, for unchanged.
func snapshot(t *testing.T, b *mount) string {
	t.Helper()
	p := t.TempDir() + "/kv"
	b.ok(t, fmt.Sprintf(`cp $M/memory/kv/data %s`, p))
	return p
}

func unchanged(t *testing.T, b *mount, snap string) {
	t.Helper()
	b.ok(t, fmt.Sprintf(`cmp %s $M/memory/kv/data`, snap))
}

// newData gives A's buf fresh random bytes.
func newData(t *testing.T, a *mount, size string) {
	t.Helper()
	a.ok(t, fmt.Sprintf(`head -c %s /dev/urandom > $M/memory/buf/data`, bytesOf(size)))
}

var epochRE = regexp.MustCompile(`msg="peer listening".* epoch=([0-9a-f]{16})`)

func logEpoch(t *testing.T, m *mount) string {
	t.Helper()
	s := epochRE.FindStringSubmatch(m.logText())
	if s == nil {
		t.Fatalf("no epoch in the log:\n%s", m.logText())
	}
	return s[1]
}

// kill -9 of the peer in the middle of a WRITE, and a new daemon on the
// same address (a new epoch, kv registered after a decoy, so the old
// descriptor id names the decoy): the cut WRITE ends unknown and is never
// sent to the new epoch; A's segments, never closed, move bytes to and
// from the new epoch on their next transfer, the decoy is untouched
// (nothing went under the old descriptor), and the segments' info shows
// the new epoch.
func TestPeerSegmentRedialsRestartedPeer(t *testing.T) {
	t.Parallel() // beside the idle test's sleep
	f := newFaultNet(t)
	b := f.startB(t, "32MiB")
	a := f.startA(t, "32MiB", "", f.addrB)
	batch(t, a, "write", "r", "8MiB", "20s").want(t, "WRITE before the restart", "completed", "applied", 20*time.Second)
	sameBytes(t, a, b, "8MiB")
	old := logEpoch(t, b)

	f.rate(t, "100mbit") // 32 MiB takes 2.7 s: room to kill the peer under it
	p := a.start(t, faultBatch("write", "r", "32MiB", "20s"))
	f.inFlight(t, 8<<20) // a quarter of it went out: the peer dies under it
	b.signal(t, syscall.SIGKILL)
	killed := time.Now()
	res, ok := p.wait(10 * time.Second)
	if !ok {
		t.Fatal("the WRITE to the killed peer still runs after 10 s")
	}
	parseFaultTask(t, res.stdout, time.Since(killed)).want(t, "WRITE to the peer killed under it", "failed", "unknown", slack)
	if _, err := b.waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	f.unrate(t)
	b2 := f.startB(t, "32MiB", "decoy")
	if logEpoch(t, b2) == old {
		t.Fatal("the restarted peer kept its epoch")
	}
	time.Sleep(300 * time.Millisecond) // room for a replay that must not come
	b2.ok(t, `cmp <(head -c 33554432 /dev/zero) $M/memory/kv/data`)
	newData(t, a, "8MiB")
	batch(t, a, "write", "r", "8MiB", "20s").want(t, "WRITE after the restart (tcp)", "completed", "applied", 20*time.Second)
	sameBytes(t, a, b2, "8MiB")
	b2.ok(t, `cmp <(head -c 4096 /dev/zero) $M/memory/decoy/data`)
	a.ok(t, `head -c 8388608 /dev/zero > $M/memory/buf/data`)
	batch(t, a, "read", "h", "8MiB", "20s").want(t, "READ after the restart (hp_tcp)", "completed", "none", 20*time.Second)
	sameBytes(t, a, b2, "8MiB")
	info := a.ok(t, `cat $M/segments/r/info $M/segments/h/info`)
	var epochs []string
	for _, m := range regexp.MustCompile(`"epoch": (\d+)`).FindAllStringSubmatch(info, -1) {
		var e uint64
		fmt.Sscan(m[1], &e)
		epochs = append(epochs, fmt.Sprintf("%016x", e))
	}
	if want := logEpoch(t, b2); len(epochs) != 2 || epochs[0] != want || epochs[1] != want {
		t.Fatalf("segments' epochs %v after the restart, want %s:\n%s", epochs, want, info)
	}
	if n := strings.Count(a.logText(), `msg="peer redialed"`); n != 2 {
		t.Fatalf("%d redials logged, want one per segment:\n%s", n, a.logText())
	}
}

// 3 % of the packets to and from the peer port dropped (jumbo frames,
// no GSO, so a drop is one packet) on a 200 Mbit/s link, with io_timeout
// 1 s: a striped WRITE and a one-lane READ of 32 MiB (each frame takes
// longer than io_timeout there, with retransmissions) complete with every
// byte right, within their timeout.
func TestPeerFaultLoss(t *testing.T) {
	t.Parallel() // beside the idle test's sleep
	f := newFaultNet(t)
	for _, c := range [][]string{
		{"ip", "link", "set", "dev", f.hostIf, "mtu", "9000", "gso_max_segs", "1", "gso_max_size", "9000"},
		{"ip", "netns", "exec", f.ns, "ip", "link", "set", "dev", f.nsIf, "mtu", "9000", "gso_max_segs", "1", "gso_max_size", "9000"},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	b := f.startB(t, "32MiB")
	a := f.startA(t, "32MiB", "io_timeout = \"1s\"\n", f.addrB)
	// Open every lane before the loss: a handshake is bounded by
	// io_timeout as a whole, and a lost SYN alone costs TCP's 1 s initial
	// retransmission timeout. What is tested is frames under loss.
	batch(t, a, "write", "h", "32MiB", "60s").want(t, "striped WRITE before the loss", "completed", "applied", 60*time.Second)
	f.nft(t, "numgen random mod 100 < 3 counter drop", "numgen random mod 100 < 3 counter drop")
	f.rate(t, "200mbit")
	batch(t, a, "write", "h", "32MiB", "60s").want(t, "striped WRITE at 3 % loss", "completed", "applied", 60*time.Second)
	sameBytes(t, a, b, "32MiB")
	a.ok(t, `head -c 33554432 /dev/zero > $M/memory/buf/data`)
	batch(t, a, "read", "r", "32MiB", "60s").want(t, "READ at 3 % loss", "completed", "none", 60*time.Second)
	sameBytes(t, a, b, "32MiB")
	if n := f.nftDropped(t); n == 0 {
		t.Fatal("no packet was dropped: the loss rule did not apply")
	} else {
		t.Logf("%d packets dropped", n)
	}
}

// Both directions limited to 100 Mbit/s with tbf: a 16 MiB WRITE and
// READ (one frame each, 1.34 s at that rate) take at least the time the
// rate allows (the limit held) and complete with every byte right,
// although each frame takes longer than io_timeout: the timeout bounds a
// stall, not a slow link that keeps moving.
func TestPeerFaultRate(t *testing.T) {
	t.Parallel() // beside the idle test's sleep
	f := newFaultNet(t)
	b := f.startB(t, "16MiB")
	a := f.startA(t, "16MiB", "io_timeout = \"1s\"\n", f.addrB)
	f.rate(t, "100mbit")
	const least = 1200 * time.Millisecond // 16 MiB at 100 Mbit/s is 1.34 s
	r := batch(t, a, "write", "r", "16MiB", "30s")
	r.want(t, "WRITE at 100 Mbit/s", "completed", "applied", 30*time.Second)
	sameBytes(t, a, b, "16MiB")
	a.ok(t, `head -c 16777216 /dev/zero > $M/memory/buf/data`)
	r2 := batch(t, a, "read", "r", "16MiB", "30s")
	r2.want(t, "READ at 100 Mbit/s", "completed", "none", 30*time.Second)
	sameBytes(t, a, b, "16MiB")
	if r.Took < least || r2.Took < least {
		t.Fatalf("WRITE %s, READ %s: faster than 100 Mbit/s allows; the limit did not apply", r.Took, r2.Took)
	}
}

// A partition (nft drops everything to and from the peer port, both
// ways) in the middle of a WRITE: the task ends failed with effect
// unknown within io_timeout of the cut; a WRITE and a READ during the
// partition fail within their bound with nothing changed (effect none);
// once the partition heals, the next WRITE completes on a new connection.
func TestPeerFaultPartition(t *testing.T) {
	t.Parallel() // beside the idle test's sleep
	f := newFaultNet(t)
	b := f.startB(t, "32MiB")
	a := f.startA(t, "32MiB", "io_timeout = \"2s\"\ndial_timeout = \"1s\"\nkeepalive_interval = \"500ms\"\n", f.addrB)
	f.rate(t, "100mbit") // 32 MiB takes 2.7 s: room to cut it
	p := a.start(t, faultBatch("write", "r", "32MiB", "30s"))
	f.inFlight(t, 8<<20)
	f.nft(t, "counter drop", "counter drop")
	cut := time.Now()
	res, ok := p.wait(10 * time.Second)
	if !ok {
		t.Fatal("the WRITE cut by the partition still runs after 10 s")
	}
	r := parseFaultTask(t, res.stdout, time.Since(cut))
	r.want(t, "WRITE cut by a partition", "failed", "unknown", 2*time.Second+slack)
	f.unrate(t)

	snap := snapshot(t, b)
	batch(t, a, "write", "r", "1MiB", "30s").want(t, "WRITE during the partition", "failed", "none", 2*time.Second+slack)
	batch(t, a, "read", "h", "1MiB", "30s").want(t, "READ during the partition", "failed", "none", 2*time.Second+slack)
	f.nftClear(t)
	unchanged(t, b, snap)
	newData(t, a, "32MiB")
	batch(t, a, "write", "h", "32MiB", "30s").want(t, "WRITE after the partition healed", "completed", "applied", 30*time.Second)
	sameBytes(t, a, b, "32MiB")
}

// TCP resets (nft rejects every packet to the peer port with a reset):
// a WRITE in flight ends unknown at once (long before io_timeout), a new
// WRITE ends with effect none and nothing changed, and once the rule is
// gone the next WRITE completes.
func TestPeerFaultReset(t *testing.T) {
	t.Parallel() // beside the idle test's sleep
	f := newFaultNet(t)
	b := f.startB(t, "32MiB")
	a := f.startA(t, "32MiB", "io_timeout = \"20s\"\n", f.addrB)
	f.rate(t, "100mbit")
	p := a.start(t, faultBatch("write", "r", "32MiB", "30s"))
	f.inFlight(t, 8<<20)
	f.nft(t, "counter reject with tcp reset", "")
	cut := time.Now()
	res, ok := p.wait(10 * time.Second)
	if !ok {
		t.Fatal("the WRITE cut by resets still runs after 10 s")
	}
	parseFaultTask(t, res.stdout, time.Since(cut)).want(t, "WRITE cut by a reset", "failed", "unknown", slack)
	f.unrate(t)

	snap := snapshot(t, b)
	batch(t, a, "write", "r", "1MiB", "30s").want(t, "WRITE while resets", "failed", "none", slack)
	unchanged(t, b, snap)
	if f.nftDropped(t) == 0 {
		t.Fatal("no reset was sent: the rule did not apply")
	}
	f.nftClear(t)
	newData(t, a, "32MiB")
	batch(t, a, "write", "r", "32MiB", "30s").want(t, "WRITE after the resets stopped", "completed", "applied", 30*time.Second)
	sameBytes(t, a, b, "32MiB")
}

// A READ of 16 MiB from the peer into A's buf (at 2 MiB of a 20 MiB
// registration), at 50 Mbit/s so it takes 2.7 s, is cut once B has sent
// 4 MiB of it (tc's counter on B's end: the fault lands while the bytes
// stream; its four 4 MiB slices were all requested at its start, so A
// sends nothing after the cut and only the READ's own progress timeout
// can end it in a partition): by a partition, within io_timeout of the
// cut; by TCP
// resets, at once; by kill -9 of the peer, at once. Each ends failed
// with effect none (a READ never changes the peer's region); in A's
// buf, the bytes outside the request are as before, its first
// transferred_bytes are the peer's, and every byte of the rest of its
// range is either as before or the peer's (a cut unit may have
// received part of its bytes, nothing else lands there); the peer's
// region is unchanged. Once the fault is gone (a restart for the kill,
// on the same address) the next READ on the same segment completes
// with every byte right.
func TestPeerFaultReadMidTransfer(t *testing.T) {
	cases := []struct {
		name  string
		more  string        // A's [peer] keys
		bound time.Duration // from the cut to the task's end
		gone  bool          // the fault ends the peer (its region cannot be read after)
		fault func(t *testing.T, f *faultNet, b *mount)
		heal  func(t *testing.T, f *faultNet, b *mount) *mount // the peer to read from next
	}{
		{
			// No keep-alive: the READ's own progress timeout ends it, not
			// a failed control connection.
			name: "partition", more: "io_timeout = \"2s\"\nkeepalive_interval = \"0s\"\n", bound: 2*time.Second + slack,
			fault: func(t *testing.T, f *faultNet, _ *mount) { f.nft(t, "counter drop", "counter drop") },
			heal: func(t *testing.T, f *faultNet, b *mount) *mount {
				if f.nftDropped(t) == 0 {
					t.Fatal("no packet was dropped: the partition did not apply")
				}
				f.nftClear(t)
				return b
			},
		},
		{
			name: "reset", more: "io_timeout = \"20s\"\n", bound: slack,
			fault: func(t *testing.T, f *faultNet, _ *mount) { f.nft(t, "counter reject with tcp reset", "") },
			heal: func(t *testing.T, f *faultNet, b *mount) *mount {
				if f.nftDropped(t) == 0 {
					t.Fatal("no reset was sent: the rule did not apply")
				}
				f.nftClear(t)
				return b
			},
		},
		{
			name: "kill", more: "io_timeout = \"20s\"\n", bound: slack, gone: true,
			fault: func(t *testing.T, _ *faultNet, b *mount) { b.signal(t, syscall.SIGKILL) },
			heal: func(t *testing.T, f *faultNet, b *mount) *mount {
				if _, err := b.waitExit(5 * time.Second); err != nil {
					t.Fatal(err)
				}
				b2 := f.startB(t, "16MiB")
				b2.ok(t, `head -c 16777216 /dev/urandom > $M/memory/kv/data`)
				return b2
			},
		},
	}
	const memOff, length, size = 2 << 20, 16 << 20, 20 << 20
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFaultNet(t)
			b := f.startB(t, "16MiB")
			b.ok(t, `head -c 16777216 /dev/urandom > $M/memory/kv/data`)
			a := f.startA(t, "20MiB", c.more, f.addrB)
			kv := readFile(t, b.dir+"/memory/kv/data", length)
			before := readFile(t, a.dir+"/memory/buf/data", size)

			f.rate(t, "50mbit") // 16 MiB takes 2.7 s: room to cut it
			p := a.start(t, faultBatchAt("read", "r", memOff, "16MiB", "30s"))
			f.readInFlight(t, 4<<20)
			c.fault(t, f, b)
			cut := time.Now()
			res, ok := p.wait(10 * time.Second)
			if !ok {
				t.Fatalf("the READ cut by the %s still runs after 10 s", c.name)
			}
			r := parseFaultTask(t, res.stdout, time.Since(cut))
			r.want(t, "READ cut by the "+c.name, "failed", "none", c.bound)
			f.unrate(t)

			after := readFile(t, a.dir+"/memory/buf/data", size)
			if !bytes.Equal(after[:memOff], before[:memOff]) || !bytes.Equal(after[memOff+length:], before[memOff+length:]) {
				t.Fatal("the failed READ changed A's memory outside its request")
			}
			got := after[memOff : memOff+length]
			if r.Bytes > length || !bytes.Equal(got[:r.Bytes], kv[:r.Bytes]) {
				t.Fatalf("the failed READ reports %d bytes transferred, but they are not the peer's", r.Bytes)
			}
			landed := 0
			for i := range got {
				switch got[i] {
				case before[memOff+i]:
				case kv[i]:
					landed++
				default:
					t.Fatalf("byte %d of the failed READ's range is %#x: neither what was there (%#x) nor the peer's (%#x)", i, got[i], before[memOff+i], kv[i])
				}
			}
			t.Logf("the failed READ left %d bytes of its range changed to the peer's", landed)
			if !c.gone {
				unchanged := readFile(t, b.dir+"/memory/kv/data", length)
				if !bytes.Equal(unchanged, kv) {
					t.Fatal("the failed READ changed the peer's region")
				}
			}

			b = c.heal(t, f, b)
			batch(t, a, "read", "r", "16MiB", "30s").want(t, "READ after the "+c.name, "completed", "none", 30*time.Second)
			sameBytes(t, a, b, "16MiB")
		})
	}
}

// readFile reads n bytes of a file of a mount (the daemons are other
// processes: the test may read their mounts directly).
func readFile(t *testing.T, path string, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != n {
		t.Fatalf("%s has %d bytes, want %d", path, len(b), n)
	}
	return b
}

// ackRelay forwards connections to target in both directions; what the
// target sends back is delayed by delay, or swallowed while blackhole
// is set (the acks never arrive; the requests still do).
type ackRelay struct {
	ln        net.Listener
	target    string
	mu        sync.Mutex
	delay     time.Duration
	blackhole bool
	accepted  int
	toTarget  int64
}

func startAckRelay(t *testing.T, target string) *ackRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &ackRelay{ln: ln, target: target}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.accepted++
			r.mu.Unlock()
			conns.Add(1)
			go func() { defer conns.Done(); r.serve(t, c) }()
		}
	}()
	return r
}

func (r *ackRelay) set(delay time.Duration, blackhole bool) {
	r.mu.Lock()
	r.delay, r.blackhole = delay, blackhole
	r.mu.Unlock()
}

func (r *ackRelay) counts() (int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted, r.toTarget
}

func (r *ackRelay) serve(t *testing.T, c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { // to the target: everything, counted
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				r.mu.Lock()
				r.toTarget += int64(n)
				r.mu.Unlock()
				if _, werr := up.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	go func() { // back: delayed or swallowed
		buf := make([]byte, 256<<10)
		for {
			n, err := up.Read(buf)
			r.mu.Lock()
			delay, hole := r.delay, r.blackhole
			r.mu.Unlock()
			if n > 0 && !hole {
				time.Sleep(delay)
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}

// A relay between A and the peer: acks delayed by 500 ms (under
// io_timeout) still complete, every byte right; acks blackholed end the
// WRITE with effect unknown within io_timeout (the bytes did reach the
// peer: unknown is not none), a READ with effect none, and nothing is
// sent again (no new connection, no second copy of the frame).
func TestPeerFaultRelayAcks(t *testing.T) {
	t.Parallel() // beside the idle test's sleep
	f := newFaultNet(t)
	b := f.startB(t, "8MiB")
	rl := startAckRelay(t, f.addrB)
	a := f.startA(t, "8MiB", "io_timeout = \"2s\"\nkeepalive_interval = \"0s\"\n", rl.ln.Addr().String())

	// Open the lanes before the delay: a lane's handshake, bounded by
	// io_timeout as a whole, would wait out two delayed answers (1 s of
	// the 2 s) and leave a loaded machine 1 s for everything else. What
	// is tested is acks, delayed and lost.
	batch(t, a, "write", "r", "8MiB", "20s").want(t, "WRITE before the delay", "completed", "applied", 20*time.Second)
	newData(t, a, "8MiB")
	rl.set(500*time.Millisecond, false)
	r := batch(t, a, "write", "r", "8MiB", "20s")
	r.want(t, "WRITE with acks delayed 500 ms", "completed", "applied", 10*time.Second)
	if r.Took < 500*time.Millisecond {
		t.Fatalf("the WRITE took %s: the delay did not apply", r.Took)
	}
	sameBytes(t, a, b, "8MiB")

	rl.set(0, true)
	newData(t, a, "8MiB")
	conns, sent := rl.counts()
	batch(t, a, "write", "r", "8MiB", "20s").want(t, "WRITE with acks blackholed", "failed", "unknown", 2*time.Second+slack)
	time.Sleep(500 * time.Millisecond) // room for a replay that must not come
	conns2, sent2 := rl.counts()
	if conns2 != conns || sent2-sent > 8<<20+4096 {
		t.Fatalf("after the blackholed WRITE: %d new connections, %d bytes toward the peer (one frame is 8 MiB and a header): a replay", conns2-conns, sent2-sent)
	}
	sameBytes(t, a, b, "8MiB") // the request arrived; only its ack was lost
	snap := snapshot(t, b)
	batch(t, a, "read", "h", "8MiB", "20s").want(t, "READ with replies blackholed", "failed", "none", 2*time.Second+slack)
	unchanged(t, b, snap)
}

// idleRan: the idle test ran in this process.
var idleRan atomic.Bool

// The first transfer after 60 s idle, with every connection to the peer
// reset by a middlebox in between (as a firewall that forgot them
// would): the keep-alive meets the reset, and the next WRITE and READ
// complete on new connections with every byte right. Runs in parallel
// with the other parallel tests: it mostly sleeps.
func TestPeerFaultFirstTransferAfterIdle(t *testing.T) {
	if idleRan.Swap(true) {
		t.Skip("runs once per test process: a repeat (-count) would sleep another minute to check nothing new")
	}
	t.Parallel()
	f := newFaultNet(t)
	b := f.startB(t, "8MiB")
	a := f.startA(t, "8MiB", "keepalive_interval = \"10s\"\n", f.addrB)
	batch(t, a, "write", "h", "8MiB", "20s").want(t, "WRITE before the idle period", "completed", "applied", 20*time.Second)
	sameBytes(t, a, b, "8MiB")
	time.Sleep(20 * time.Second)
	f.nft(t, "counter reject with tcp reset", "")
	time.Sleep(20 * time.Second) // two keep-alives meet it
	f.nftClear(t)
	if !strings.Contains(a.logText(), `msg="peer connection failed"`) {
		t.Fatalf("the keep-alive did not meet the resets:\n%s", a.logText())
	}
	time.Sleep(21 * time.Second)
	newData(t, a, "8MiB")
	batch(t, a, "write", "h", "8MiB", "20s").want(t, "WRITE after 61 s idle", "completed", "applied", 20*time.Second)
	sameBytes(t, a, b, "8MiB")
	a.ok(t, `head -c 8388608 /dev/zero > $M/memory/buf/data`)
	batch(t, a, "read", "r", "8MiB", "20s").want(t, "READ after 61 s idle", "completed", "none", 20*time.Second)
	sameBytes(t, a, b, "8MiB")
}
