// credit_test.go: receiver credits between real daemons, driven through
// their mounts. One receiver runs the issuer with a small window per
// sender; eight senders write into its region at once. From the
// receiver's side (/peers/credit/issuer, its count of each sender's
// frames against the completed totals the sender reported), no sender
// ever had more than its window outstanding; a sender starved of credit
// (a manual binding granted nothing) holds back none of the others; and
// a disconnect with a WRITE committed and in flight is refused (EBUSY)
// until that WRITE completes.

package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateRelay forwards TCP connections to target; while paused it holds
// every byte headed to target on the connections it accepted from the
// from-th on (the sender's frames sit in the relay, so a WRITE already
// handed to the transport stays in flight), and passes the earlier ones
// (the credit connection, so a sync still gets through).
type gateRelay struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	cond     *sync.Cond
	paused   bool
	from     int
	accepted int
}

func startGateRelay(t *testing.T, target string) *gateRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &gateRelay{ln: ln, target: target}
	r.cond = sync.NewCond(&r.mu)
	t.Cleanup(func() { r.set(false, 0); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			i := r.accepted
			r.accepted++
			r.mu.Unlock()
			go r.serve(c, i)
		}
	}()
	return r
}

// count is how many connections it accepted so far.
func (r *gateRelay) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted
}

func (r *gateRelay) addr() string { return r.ln.Addr().String() }

func (r *gateRelay) set(paused bool, from int) {
	r.mu.Lock()
	r.paused, r.from = paused, from
	r.cond.Broadcast()
	r.mu.Unlock()
}

func (r *gateRelay) serve(c net.Conn, i int) {
	defer c.Close()
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(c, up); done <- struct{}{} }()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			r.mu.Lock()
			for r.paused && i >= r.from {
				r.cond.Wait()
			}
			r.mu.Unlock()
			if n > 0 {
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
	<-done
}

// issuerStats is what the test reads of /peers/credit/issuer.
type issuerStats struct {
	Enabled              bool   `json:"enabled"`
	Senders              int    `json:"senders"`
	Tombstones           int    `json:"tombstones"`
	WindowBytes          uint64 `json:"window_bytes"`
	PeakOutstandingBytes uint64 `json:"peak_outstanding_bytes"`
	Overruns             uint64 `json:"overruns"`
	List                 []struct {
		Name                 string `json:"name"`
		WindowBytes          uint64 `json:"window_bytes"`
		ServedBytes          uint64 `json:"served_bytes"`
		CompletedBytes       uint64 `json:"completed_bytes"`
		PeakOutstandingBytes uint64 `json:"peak_outstanding_bytes"`
		Syncs                uint64 `json:"syncs"`
	} `json:"list"`
}

func (m *mount) issuer(t *testing.T) issuerStats {
	t.Helper()
	var s issuerStats
	if err := json.Unmarshal([]byte(m.ok(t, `cat "$M/peers/credit/issuer"`)), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// creditBinding is peer's binding in /peers/credit/status.
func (m *mount) creditBinding(t *testing.T, peer string) map[string]any {
	t.Helper()
	s := m.readJSON(t, "peers/credit/status")
	bs, _ := s["bindings"].([]any)
	for _, b := range bs {
		if b := b.(map[string]any); b["peer"] == peer {
			return b
		}
	}
	t.Fatalf("no binding for %s in %v", peer, s)
	return nil
}

// consumed is the data_bytes a binding consumed.
func consumed(b map[string]any) float64 {
	for _, r := range b["resources"].([]any) {
		if r := r.(map[string]any); r["resource"] == "data_bytes" {
			return r["consumed"].(float64)
		}
	}
	return -1
}

const (
	creditWindow  = 256 << 10 // bytes_per_sender
	creditChunk   = 128 << 10 // one request
	creditPerSend = 1 << 20   // what each sender writes
)

func TestReceiverCreditsBetweenDaemons(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	recv := startDaemon(t, daemonOpts{config: fmt.Sprintf(`[peer]
listen = "127.0.0.1:0"
name = "recv"
key_file = %q
[peer.receiver_credit]
enabled = true
max_sessions = 8
max_bytes = "4MiB"
max_requests = 64
bytes_per_sender = "256KiB"
requests_per_sender = 4
`, key)})
	sub := peerAddrRE.FindStringSubmatch(recv.logText())
	if sub == nil {
		t.Fatalf("the receiver did not log its peer address:\n%s", recv.logText())
	}
	addr := sub[1]
	recv.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"8MiB","export":"read_write"}' > $M/memory/register`)
	relay := startGateRelay(t, addr) // sender 0 reaches the receiver through it

	const senders = 8
	var ms [senders]*mount
	var peers [senders]string
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The last sender is the starved one; its dispatch window
			// holds one owner, so a starved head that took it would stall
			// its other peer.
			queue := ""
			if i == senders-1 {
				queue = "[engine.runtime_queue]\nenabled = true\nmax_dispatch_owners = 1\n"
			}
			ms[i] = startDaemon(t, daemonOpts{config: fmt.Sprintf("[engine]\nmax_receiver_credit_sessions = 4\n%s[peer]\nname = \"s%d\"\nkey_file = %q\n", queue, i, key)})
		}()
	}
	wg.Wait()
	for i, m := range ms {
		if m == nil {
			t.Fatal("a sender did not start")
		}
		peers[i] = addr
		if i == 0 {
			peers[i] = relay.addr()
		}
		m.ok(t, fmt.Sprintf(`echo '{"name":"src","location":"cpu","bytes":"1MiB"}' > $M/memory/register
head -c 1048576 /dev/urandom > $M/memory/src/data
echo '{"name":"r","uri":"tcp://%s/kv","permission":"read_write"}' > $M/segments/open`, peers[i]))
	}
	// Credits on and no binding: the submission is refused (EACCES).
	r := ms[1].run(t, `N=$(cat $M/ctl/batches/clone)
echo '{"op":"write","target":"r","requests":[{"memory":"src","offset":0,"target_offset":0,"length":4096}]}' > $M/ctl/batches/$N/submit; echo "exit $?"
cat $M/ctl/batches/$N/error; rmdir $M/ctl/batches/$N`)
	if !strings.Contains(r.stdout, "exit 1") || !strings.Contains(r.stderr+r.stdout, "Permission denied") || !strings.Contains(r.stdout, "no receiver credit binding for "+addr) {
		t.Fatalf("a submission without a binding: %s", r)
	}

	// Senders 0-6 connect (automatic windows); sender 7 binds manually
	// and is granted nothing: it is starved.
	for i := range senders - 1 {
		ms[i].ok(t, fmt.Sprintf(`echo '{"peer":"%s","timeout":"5s"}' > $M/peers/credit/connect`, peers[i]))
	}
	lanes := relay.count() // sender 0's data lanes open after its credit connection
	if s := recv.issuer(t); s.Senders != senders-1 || s.WindowBytes != (senders-1)*creditWindow {
		t.Fatalf("issuer after connects: %+v", s)
	}
	starved := ms[senders-1]
	// Not jq: an epoch is a 64-bit number, past a double's exact range.
	epoch := starved.ok(t, `grep -o '"epoch": *[0-9]*' $M/segments/r/info | grep -o '[0-9]*$'`)
	starved.ok(t, fmt.Sprintf(`echo '{"peer":"%[1]s","epoch":%[2]s}' > $M/peers/credit/activate
echo '{"peer":"%[1]s","epoch":%[2]s,"sequence":1,"totals":[{"resource":"data_bytes","total":0},{"resource":"request_slots","total":0}]}' > $M/peers/credit/update`, addr, strings.TrimSpace(epoch)))
	// Bad updates: errno from the write, the text in /error, nothing changed.
	r = starved.run(t, fmt.Sprintf(`echo '{"peer":"%[1]s","epoch":%[2]s,"sequence":2,"totals":[{"resource":"data_bytes","total":1},{"resource":"data_bytes","total":2}]}' > $M/peers/credit/update; echo "exit $?"
cat $M/error
echo '{"peer":"%[1]s","epoch":%[2]s,"sequence":2,"totals":[{"resource":"disk_bytes","total":1}]}' > $M/peers/credit/update; echo "exit $?"
cat $M/error`, addr, strings.TrimSpace(epoch)))
	if strings.Count(r.stdout, "exit 1") != 2 || !strings.Contains(r.stdout, "data_bytes appears twice in one update") ||
		!strings.Contains(r.stdout, `resource "disk_bytes": want one of data_bytes, request_slots, staging_slots, consumer_slots`) ||
		!strings.Contains(r.stderr, "Invalid argument") {
		t.Fatalf("bad updates: %s", r)
	}

	// Each sender writes its 1 MiB as 8 submissions of 128 KiB into its
	// own MiB of the receiver's region: four times its window.
	submitAll := func(i int) string {
		var b strings.Builder
		b.WriteString("N=$(cat $M/ctl/batches/clone)\n")
		for k := 0; k < creditPerSend/creditChunk; k++ {
			fmt.Fprintf(&b, `echo '{"op":"write","target":"r","requests":[{"memory":"src","offset":%d,"target_offset":%d,"length":%d}]}' > $M/ctl/batches/$N/submit`+"\n",
				k*creditChunk, i*creditPerSend+k*creditChunk, creditChunk)
		}
		b.WriteString("echo seal > $M/ctl/batches/$N/ctl\necho $N\n")
		return b.String()
	}
	starvedBatch := strings.TrimSpace(starved.ok(t, submitAll(senders-1)))
	eventually(t, mountWait, "the starved sender's head to wait for credit", func() bool {
		return starved.readJSON(t, "peers/credit/status")["waiting"] == float64(1)
	})
	if m := starved.ok(t, `cat $M/metrics`); !strings.Contains(m, "\norbitefs_receiver_credit_waiting 1\n") {
		t.Fatalf("/metrics of the starved sender:\n%s", m)
	}
	// The starved sender's other peer (the same receiver at another
	// endpoint, the relay, bound manually) is not held back by it.
	other := relay.addr()
	r = starved.run(t, fmt.Sprintf(`echo '{"name":"r2","uri":"tcp://%[1]s/kv","permission":"read_write"}' > $M/segments/open
echo '{"peer":"%[1]s","epoch":%[2]s}' > $M/peers/credit/activate
echo '{"peer":"%[1]s","epoch":%[2]s,"sequence":1,"totals":[{"resource":"data_bytes","total":1048576},{"resource":"request_slots","total":8}]}' > $M/peers/credit/update
N=$(cat $M/ctl/batches/clone)
echo '{"op":"write","target":"r2","requests":[{"memory":"src","offset":0,"target_offset":%[3]d,"length":%[4]d}]}' > $M/ctl/batches/$N/submit
echo seal > $M/ctl/batches/$N/ctl
timeout 20 cat $M/ctl/batches/$N/wait`, other, strings.TrimSpace(epoch), (senders-1)*creditPerSend, creditChunk))
	if r.code != 0 || strings.TrimSpace(r.stdout) != "completed" {
		t.Fatalf("the starved sender's other peer: %s", r)
	}
	procs := make([]*proc, senders-1)
	for i := range senders - 1 {
		procs[i] = ms[i].start(t, submitAll(i)+`timeout 60 cat $M/ctl/batches/$N/wait`)
	}
	for i, p := range procs {
		res, done := p.wait(90 * time.Second)
		if !done || res.code != 0 || !strings.HasSuffix(strings.TrimSpace(res.stdout), "completed") {
			t.Fatalf("sender %d: done %v: %s", i, done, res)
		}
	}
	// The starved sender still waits, and has spent nothing there.
	if st := starved.state(t, starvedBatch); st != "open" {
		t.Fatalf("the starved sender's batch is %s, want open (waiting)", st)
	}
	if b := starved.creditBinding(t, addr); consumed(b) != 0 || b["permits"] != float64(0) {
		t.Fatalf("the starved binding: %v", b)
	}

	// From the receiver's side: every sender's frames carried its MiB,
	// and what it had outstanding never passed its window.
	s := recv.issuer(t)
	if s.Overruns != 0 || s.PeakOutstandingBytes > (senders-1)*creditWindow || len(s.List) != senders-1 {
		t.Fatalf("issuer: %+v", s)
	}
	for _, x := range s.List {
		if x.ServedBytes != creditPerSend || x.PeakOutstandingBytes > creditWindow || x.PeakOutstandingBytes < creditChunk || x.Syncs < 3 {
			t.Fatalf("sender %s: %+v (window %d)", x.Name, x, creditWindow)
		}
	}
	for i := range senders - 1 {
		recv.ok(t, fmt.Sprintf(`cmp <(tail -c +%d $M/memory/kv/data | head -c %d) %s/memory/src/data`, i*creditPerSend+1, creditPerSend, ms[i].dir))
	}

	// Granted, the starved sender completes.
	starved.ok(t, fmt.Sprintf(`echo '{"peer":"%s","epoch":%s,"sequence":2,"totals":[{"resource":"data_bytes","total":1048576},{"resource":"request_slots","total":8}]}' > $M/peers/credit/update`, addr, strings.TrimSpace(epoch)))
	if st := starved.waitBatch(t, starvedBatch); st != "completed" {
		t.Fatalf("the starved sender after its grant: %s", st)
	}

	// Disconnect waits for committed work: sender 0's WRITE is handed to
	// the transport and held in the relay.
	s0 := ms[0]
	relay.set(true, lanes)
	n := s0.clone(t)
	s0.submit(t, n, fmt.Sprintf(`{"op":"write","target":"r","requests":[{"memory":"src","offset":0,"target_offset":0,"length":%d}]}`, creditChunk))
	s0.ctl(t, n, "seal")
	eventually(t, mountWait, "sender 0's owner to be committed", func() bool { return s0.creditBinding(t, peers[0])["open"] == float64(1) })
	r = s0.run(t, fmt.Sprintf(`echo '{"peer":"%s","timeout":"2s"}' > $M/peers/credit/disconnect; echo "exit $?"
cat $M/error`, peers[0]))
	if !strings.Contains(r.stdout, "exit 1") || !strings.Contains(r.stderr, "Device or resource busy") || !strings.Contains(r.stdout, "1 committed owner(s) without a completion receipt") {
		t.Fatalf("disconnect with a WRITE in flight: %s", r)
	}
	if s := recv.issuer(t); s.Senders != senders-1 {
		t.Fatalf("the receiver dropped sender 0's window while its WRITE was in flight: %+v", s)
	}
	relay.set(false, 0)
	if st := s0.waitBatch(t, n); st != "completed" {
		t.Fatalf("sender 0's held WRITE: %s", st)
	}
	s0.ok(t, fmt.Sprintf(`echo '{"peer":"%s","timeout":"5s"}' > $M/peers/credit/disconnect`, peers[0]))
	if s := recv.issuer(t); s.Senders != senders-2 || s.Tombstones != 1 || s.WindowBytes != (senders-2)*creditWindow {
		t.Fatalf("issuer after sender 0 disconnected: %+v", s)
	}
	// One submission four times the window (8 requests of 128 KiB) goes
	// out request by request as credit returns, the receiver never seeing
	// more than the window outstanding; one request larger than the
	// window is refused at submit (EAGAIN), nothing sent.
	s1 := ms[1]
	var reqs []string
	for k := 0; k < creditPerSend/creditChunk; k++ {
		reqs = append(reqs, fmt.Sprintf(`{"memory":"src","offset":%d,"target_offset":%d,"length":%d}`, k*creditChunk, creditPerSend+k*creditChunk, creditChunk))
	}
	r = s1.run(t, fmt.Sprintf(`head -c 1048576 /dev/urandom > $M/memory/src/data
N=$(cat $M/ctl/batches/clone)
echo '{"op":"write","target":"r","requests":[%s]}' > $M/ctl/batches/$N/submit; echo "exit $?"
echo seal > $M/ctl/batches/$N/ctl
timeout 60 cat $M/ctl/batches/$N/wait
N=$(cat $M/ctl/batches/clone)
echo '{"op":"write","target":"r","requests":[{"memory":"src","offset":0,"target_offset":0,"length":%d}]}' > $M/ctl/batches/$N/submit; echo "exit $?"
cat $M/ctl/batches/$N/error`, strings.Join(reqs, ","), 2*creditWindow))
	if !strings.Contains(r.stdout, "exit 0\ncompleted\nexit 1") || !strings.Contains(r.stderr, "Resource temporarily unavailable") ||
		!strings.Contains(r.stdout, "requests[0] of 524288 bytes exceeds the receiver's window for this engine") {
		t.Fatalf("a submission larger than the window, and a request larger than it: %s", r)
	}
	recv.ok(t, fmt.Sprintf(`cmp <(tail -c +%d $M/memory/kv/data | head -c %d) %s/memory/src/data`, creditPerSend+1, creditPerSend, s1.dir))
	if x := recv.issuer(t).List; len(x) < 1 || x[0].Name != "s1" || x[0].ServedBytes != 2*creditPerSend || x[0].PeakOutstandingBytes > creditWindow {
		t.Fatalf("sender s1 after its large submission: %+v (window %d)", x, creditWindow)
	}
	if s := recv.issuer(t); s.Overruns != 0 {
		t.Fatalf("an honest sender met the receiver's refusal: %+v", s)
	}

	// /stats carries both sides.
	if !strings.Contains(recv.ok(t, `cat $M/stats`), `"receiver_credit_issuer"`) || !strings.Contains(s0.ok(t, `cat $M/stats`), `"receiver_credit"`) {
		t.Fatal("/stats lacks the credit objects")
	}
}
