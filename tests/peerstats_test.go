// peerstats_test.go: the peer figures through the mount. Daemon A opens
// a segment on daemon B's exported region and writes through it; then
// `ls` of each /peers shows the connection (out-N on A, in-N on B), its
// file holds the address, epoch, lanes, bytes, RTT and errors, /stats and
// /metrics carry the same, and closing the segment removes A's entry.

package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestPeerFiguresInMount(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startPeerDaemonConf(t, "alpha", key, "lanes = 2\n")
	b, addrB := startPeerDaemon(t, "beta", key)
	b.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"4MiB","export":"read_write"}' > $M/memory/register
echo '{"name":"ro","location":"cpu","bytes":4096,"export":"read"}' > $M/memory/register`)
	a.ok(t, fmt.Sprintf(`echo '{"name":"buf","location":"cpu","bytes":"4MiB"}' > $M/memory/register
head -c 4194304 /dev/urandom > $M/memory/buf/data
echo '{"name":"h","uri":"hp_tcp://%[1]s/kv","permission":"read_write"}' > $M/segments/open`, addrB))
	out := a.ok(t, fmt.Sprintf(batchScript, `{"op":"write","target":"h","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"4MiB"},{"memory":"buf","offset":0,"target_offset":0,"length":4096}]}`))
	if !strings.HasPrefix(out, "completed") {
		t.Fatalf("WRITE batch:\n%s", out)
	}

	ls := strings.Fields(a.ok(t, `ls $M/peers`))
	if strings.Join(ls, " ") != "credit notifications out-1" {
		t.Fatalf("ls A/peers: %v, want credit notifications out-1", ls)
	}
	var out1 struct {
		Direction, Addr, Name, Epoch, State string
		Lanes                               int
		BytesSent                           uint64 `json:"bytes_sent"`
		Frames, Errors                      uint64
		RTT                                 float64 `json:"rtt_us"`
	}
	if err := json.Unmarshal([]byte(a.ok(t, `cat $M/peers/out-1`)), &out1); err != nil {
		t.Fatal(err)
	}
	if out1.Direction != "out" || out1.Addr != addrB || out1.Name != "beta" || len(out1.Epoch) != 16 || out1.Lanes != 2 ||
		out1.State != "connected" || out1.BytesSent < 4<<20+4096 || out1.Frames < 3 || out1.RTT <= 0 || out1.Errors != 0 {
		t.Fatalf("A's /peers/out-1: %+v", out1)
	}

	// Session ids start at a random number: in-N, whatever N is.
	ls = strings.Fields(b.ok(t, `ls $M/peers`))
	if len(ls) != 3 || ls[0] != "credit" || !strings.HasPrefix(ls[1], "in-") || ls[2] != "notifications" {
		t.Fatalf("ls B/peers: %v, want credit in-N notifications", ls)
	}
	in := ls[1]
	var in1 struct {
		Direction, Name string
		Lanes           int
		BytesReceived   uint64 `json:"bytes_received"`
	}
	if err := json.Unmarshal([]byte(b.ok(t, `cat $M/peers/`+in)), &in1); err != nil {
		t.Fatal(err)
	}
	if in1.Direction != "in" || in1.Name != "alpha" || in1.BytesReceived != 4<<20+4096 || in1.Lanes < 1 {
		t.Fatalf("B's /peers/%s: %+v", in, in1)
	}

	stats := a.ok(t, `cat $M/stats`)
	if !strings.Contains(stats, `"entry": "out-1"`) || !strings.Contains(stats, `"addr": "`+addrB+`"`) {
		t.Fatalf("A's /stats lacks the peer:\n%s", stats)
	}
	metrics := a.ok(t, `cat $M/metrics`)
	want := fmt.Sprintf(`orbitefs_peer_up{direction="out",entry="out-1",peer="beta",addr=%q} 1`, addrB)
	if !strings.Contains(metrics, want) || !strings.Contains(metrics, `orbitefs_peer_sent_bytes_total{direction="out",entry="out-1"`) {
		t.Fatalf("A's /metrics lacks %s:\n%s", want, metrics)
	}

	// A second segment is a second connection, listed beside the first.
	a.ok(t, fmt.Sprintf(`echo '{"name":"r","uri":"tcp://%s/ro","permission":"read"}' > $M/segments/open`, addrB))
	if got := a.ok(t, `ls $M/peers`); strings.Join(strings.Fields(got), " ") != "credit notifications out-1 out-2" {
		t.Fatalf("ls A/peers after a second segment: %s", got)
	}

	// Closing the segment closes its connection: the entry goes at once.
	a.ok(t, `rmdir $M/segments/h`)
	if got := a.ok(t, `ls $M/peers; cat $M/peers/out-1 2>&1 || echo gone`); strings.Contains(got, "out-1\n") || !strings.Contains(got, "gone") {
		t.Fatalf("after closing the segment:\n%s", got)
	}
}
