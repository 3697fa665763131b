// peeraead_test.go: [peer] frame_protection = "aead" between real
// daemons: a segment of one daemon's region in another's mount moves
// bytes both ways (checked with cmp), `orbitefs peer` with the same key
// and protection too, and a client or daemon that runs none is refused
// at the handshake, both sides saying why, the region untouched.

package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPeerFrameProtectionAEAD(t *testing.T) {
	dir := t.TempDir()
	key := writeKey(t, dir, "peer.key", "the shared key of this test, long enough")
	a, _ := startPeerDaemonConf(t, "alpha", key, "lanes = 4\nframe_protection = \"aead\"\n")
	b, addrB := startPeerDaemonConf(t, "beta", key, "frame_protection = \"aead\"\n")
	plain, _ := startPeerDaemonConf(t, "gamma", key, "")
	b.ok(t, `echo '{"name":"kv","location":"cpu","bytes":"8MiB","export":"read_write"}' > $M/memory/register
head -c 8388608 /dev/urandom > $M/memory/kv/data`)

	// A's segment of B's region (hp_tcp: 4 lanes, striped): READ, then
	// WRITE of new bytes, each checked through the other mount.
	a.ok(t, fmt.Sprintf(`echo '{"name":"buf","location":"cpu","bytes":"8MiB"}' > $M/memory/register
echo '{"name":"h","uri":"hp_tcp://%s/kv","permission":"read_write"}' > $M/segments/open`, addrB))
	out := a.ok(t, fmt.Sprintf(batchScript, `{"op":"read","target":"h","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"8MiB"}]}`)+
		fmt.Sprintf(`cmp $M/memory/buf/data %s/memory/kv/data`, b.dir))
	if !strings.HasPrefix(out, "completed") {
		t.Fatalf("READ batch with aead:\n%s", out)
	}
	out = a.ok(t, `head -c 8388608 /dev/urandom > $M/memory/buf/data
`+fmt.Sprintf(batchScript, `{"op":"write","target":"h","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":"8MiB"}]}`)+
		fmt.Sprintf(`cmp $M/memory/buf/data %s/memory/kv/data`, b.dir))
	if !strings.HasPrefix(out, "completed") || !strings.Contains(out, `"remote_effect": "applied"`) {
		t.Fatalf("WRITE batch with aead:\n%s", out)
	}

	// orbitefs peer with the same protection (from its config) moves bytes;
	// one that runs none is refused at the handshake, and B logs why.
	aead := filepath.Join(dir, "aead.toml")
	none := filepath.Join(dir, "none.toml")
	os.WriteFile(aead, []byte(fmt.Sprintf("[peer]\nkey_file = %q\nframe_protection = \"aead\"\n", key)), 0o644)
	os.WriteFile(none, []byte(fmt.Sprintf("[peer]\nkey_file = %q\n", key)), 0o644)
	b.ok(t, fmt.Sprintf(`head -c 65536 /dev/urandom > $T/src
$BIN peer write --config %[1]s --addr %[2]s --region kv --offset 4096 --file $T/src
$BIN peer read --config %[1]s --addr %[2]s --region kv --offset 4096 --length 65536 --file $T/back
cmp $T/src $T/back
cmp $T/src <(tail -c +4097 $M/memory/kv/data | head -c 65536)
cp $M/memory/kv/data $T/before`, aead, addrB))
	r := b.run(t, fmt.Sprintf(`head -c 4096 /dev/zero > $T/z
$BIN peer write --config %s --addr %s --region kv --file $T/z; echo "exit $?"
cmp $T/before $M/memory/kv/data && echo untouched`, none, addrB))
	for _, want := range []string{"frame protection mismatch", `"none"`, "exit 1", "untouched"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("a client running none: no %q in\n%s", want, r)
		}
	}
	eventually(t, mountWait, "B logs the refused client's mismatch", func() bool {
		return strings.Contains(b.logText(), `msg="peer refused"`) && strings.Contains(b.logText(), "frame protection mismatch")
	})

	// A daemon that runs none opens nothing of B's: its segment open is
	// refused, with the reason in /error and both logs.
	r = plain.run(t, fmt.Sprintf(`echo '{"name":"s","uri":"tcp://%s/kv","permission":"read"}' > $M/segments/open; echo "exit $?"; cat $M/error`, addrB))
	if !strings.Contains(r.stdout+r.stderr, "frame protection mismatch") || !strings.Contains(r.stdout+r.stderr, "ermission denied") || strings.Contains(r.stdout, "exit 0") {
		t.Errorf("a daemon running none opened a segment of an aead peer:\n%s", r)
	}
	eventually(t, mountWait, "gamma logs the mismatch", func() bool {
		return strings.Contains(plain.logText(), "frame protection mismatch")
	})
	b.ok(t, `cmp $T/before $M/memory/kv/data`)
}
