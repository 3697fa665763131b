// notifyloss_test.go: completion notifications exactly once under loss.
// A (here) writes 4 KiB slices of random data into B's region kv (B in a
// network namespace, nftables dropping 3 % of packets both ways on its
// peer port) through a tcp:// segment, each submission carrying a
// notification for B that names its slice and the slice's CRC. A's
// io_timeout (30ms) is below the time TCP takes to recover most losses,
// so a lost segment cuts a connection: WRITEs fail (and send nothing),
// notifications in flight end unknown (the receiver may hold them),
// handshakes fail (nothing posted: sent again), and a small inbox
// answers busy (sent again). Rounds of 600 on fresh slices run until B
// has read a notification its sender left unknown. The receiver checks each
// notification's slice as it reads it: the data is there before its
// notification. Every delivered one arrives exactly once, an unknown one
// at most once, a busy or not_sent one never; and at least one unknown
// one did reach B (else the run proved nothing about never resending).

package tests

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNotifyExactlyOnceUnderLoss(t *testing.T) {
	const round, rounds, slice = 600, 10, 4096
	const slices = round * rounds
	f := newFaultNet(t)
	b := startDaemon(t, daemonOpts{netns: f.ns, config: fmt.Sprintf("[peer]\nlisten = %q\nname = \"beta\"\nkey_file = %q\n"+
		"max_pending_notifications = 8\nmax_pending_notifications_per_peer = 8\n", f.addrB, f.key)})
	b.ok(t, fmt.Sprintf(`echo '{"name":"kv","location":"cpu","bytes":%d,"export":"read_write"}' > $M/memory/register`, (slices+1)*slice))
	a := f.startA(t, fmt.Sprintf("%dKiB", (slices+1)*slice>>10),
		"io_timeout = \"30ms\"\ndial_timeout = \"1s\"\nnotify_retry_interval = \"5ms\"\nnotify_retry_max_interval = \"100ms\"\n[mount]\ndefault_batch_capacity = 4096\n", f.addrB)
	src, err := os.ReadFile(filepath.Join(a.dir, "memory/buf/data"))
	if err != nil || len(src) != (slices+1)*slice {
		t.Fatalf("A's buf: %d bytes, %v", len(src), err)
	}
	doc := func(i int, timeout string) string {
		return fmt.Sprintf(`{"op":"write","target":"r","timeout":%q,"requests":[{"memory":"buf","offset":%d,"target_offset":%d,"length":%d}],"notify":[{"peer":"tcp://%s","message":"%d %08x"}]}`,
			timeout, i*slice, i*slice, slice, f.addrB, i, crc32.ChecksumIEEE(src[i*slice:(i+1)*slice]))
	}

	// B's reader: one notification per read, its slice checked at once.
	kv, err := os.Open(filepath.Join(b.dir, "memory/kv/data"))
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	inbox, err := os.Open(filepath.Join(b.dir, "peers/notifications"))
	if err != nil {
		t.Fatal(err)
	}
	defer inbox.Close()
	type got struct {
		count int
		bad   string // the first mismatch seen
	}
	var mu sync.Mutex // received, between the reader and the rounds
	received := make([]got, slices+1)
	readerDone := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<16)
		data := make([]byte, slice)
		for {
			n, err := inbox.Read(buf)
			if err != nil {
				readerDone <- err
				return
			}
			var m struct{ Message string }
			if err := json.Unmarshal(buf[:n], &m); err != nil {
				readerDone <- fmt.Errorf("line %q: %v", buf[:n], err)
				return
			}
			var i int
			var sum uint32
			if _, err := fmt.Sscanf(m.Message, "%d %x", &i, &sum); err != nil || i < 0 || i > slices {
				readerDone <- fmt.Errorf("message %q", m.Message)
				return
			}
			if _, err := kv.ReadAt(data, int64(i*slice)); err != nil {
				readerDone <- err
				return
			}
			mu.Lock()
			received[i].count++
			if c := crc32.ChecksumIEEE(data); c != sum && received[i].bad == "" {
				received[i].bad = fmt.Sprintf("slice %d read %08x at its notification, want %08x", i, c, sum)
			}
			mu.Unlock()
			if i == slices {
				readerDone <- nil
				return
			}
		}
	}()

	// unknownHeld counts the notifications left unknown that B's
	// reader has read so far.
	unknownHeld := func(states []string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for i, st := range states {
			if st == "unknown" && received[i].count == 1 {
				n++
			}
		}
		return n
	}

	// Rounds of submissions on fresh slices until B read a notification
	// its sender left unknown (a cut connection fails every one in
	// flight on it; one whose reply was lost is in B's inbox). Whether
	// a round leaves one is chance; the checks below hold either way,
	// and the last assertion says whether the run tested it.
	f.nft(t, "numgen random mod 100 < 3 counter drop", "numgen random mod 100 < 3 counter drop")
	states := make([]string, 0, slices)
	start := time.Now()
	for r := 0; r < rounds && (r == 0 || unknownHeld(states) == 0); r++ {
		var docs strings.Builder
		for i := r * round; i < (r+1)*round; i++ {
			docs.WriteString(doc(i, "120s") + "\n")
		}
		docsFile := filepath.Join(t.TempDir(), "docs")
		os.WriteFile(docsFile, []byte(docs.String()), 0o644)
		n := a.clone(t)
		a.ok(t, fmt.Sprintf(`while IFS= read -r d; do printf '%%s\n' "$d" > "$M/ctl/batches/%s/submit"; done < %s
echo seal > "$M/ctl/batches/%s/ctl"
timeout 120 cat "$M/ctl/batches/%s/wait"`, n, docsFile, n, n))
		var got []string
		eventually(t, 120*time.Second, "every notification leaves pending", func() bool {
			var s struct {
				Submissions []struct {
					Notify []struct{ State, Reason string }
				}
			}
			if err := json.Unmarshal([]byte(a.ok(t, fmt.Sprintf(`cat "$M/ctl/batches/%s/status"`, n))), &s); err != nil {
				t.Fatal(err)
			}
			if len(s.Submissions) != round {
				t.Fatalf("%d submissions, want %d", len(s.Submissions), round)
			}
			got = got[:0]
			for _, sub := range s.Submissions {
				if sub.Notify[0].State == "pending" {
					return false
				}
				got = append(got, sub.Notify[0].State)
			}
			return true
		})
		states = append(states, got...)
	}
	took := time.Since(start)
	dropped := f.nftDropped(t)
	f.nftClear(t)

	// The last one, without loss, tells the reader to stop; it comes
	// after every late arrival of an unknown one (their senders gave up
	// at least this long ago).
	time.Sleep(time.Second)
	if m, st := a.run1(t, doc(slices, "20s")); st != "completed" {
		t.Fatalf("the last submission: %s", st)
	} else if d := a.waitNotify(t, m, 0); d["state"] != "delivered" {
		t.Fatalf("the last notification: %v", d)
	}
	select {
	case err := <-readerDone:
		if err != nil {
			t.Fatalf("B's reader: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B's reader did not see the last notification")
	}

	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for i, st := range states {
		count[st]++
		r := received[i]
		if r.bad != "" {
			t.Errorf("before its data: %s (state %s)", r.bad, st)
		}
		switch {
		case st == "delivered" && r.count != 1:
			t.Errorf("slice %d: delivered, received %d times, want exactly once", i, r.count)
		case st == "unknown" && r.count > 1:
			t.Errorf("slice %d: unknown, received %d times, want at most once", i, r.count)
		case (st == "busy" || st == "not_sent") && r.count != 0:
			t.Errorf("slice %d: %s, received %d times, want never", i, st, r.count)
		}
	}
	held := 0
	for i, st := range states {
		if st == "unknown" && received[i].count == 1 {
			held++
		}
	}
	t.Logf("%d submissions at 3 %% loss (%d packets dropped) in %s: %v; %d of the unknown ones were in B's inbox",
		len(states), dropped, took.Round(time.Millisecond), count, held)
	if dropped == 0 {
		t.Fatal("no packet was dropped: the loss rule did not apply")
	}
	if count["delivered"] == 0 {
		t.Fatal("nothing was delivered")
	}
	if held == 0 {
		t.Fatalf("no notification left unknown reached B in %d rounds: the loss did not test that an unknown one is never sent again", rounds)
	}
}
