// rules_test.go: engine rules as a user meets them through the mount,
// against a daemon of its own: symlinks whose target stays beneath an
// allowed root (segments and shared memory), the literal path of a URI,
// and FIFO results for groups that reach one file through two segments.

package tests

import (
	"fmt"
	"strings"
	"testing"
)

func TestEngineRules(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	t.Run("SymlinkInsideRoot", func(t *testing.T) { testSymlinkInsideRoot(t, m) })
	t.Run("LiteralPath", func(t *testing.T) { testLiteralPath(t, m) })
	t.Run("OrderAcrossSegments", func(t *testing.T) { testOrderAcrossSegments(t, m) })
}

// testSymlinkInsideRoot: /tmp/lnk -> /tmp/x/cache.bin opens (it used to
// be refused as "outside allowed root /tmp"); escapes stay refused; the
// same holds for shared memory under /dev/shm.
func testSymlinkInsideRoot(t *testing.T, m *mount) {
	m.scratchDirs(t)
	m.ok(t, `mkdir -p "$T/x"; head -c 8192 /dev/urandom > "$T/x/cache.bin"; ln -s "$T/x/cache.bin" "$T/lnk"
ln -s /etc/passwd "$T/pw"; ln -s ../../../../../../../../etc/passwd "$T/dotdot"
head -c 65536 /dev/zero > "$S/kv"; ln -s "$S/kv" "$S/kvlink"; ln -s /etc/hostname "$S/etc"`)
	seg := m.openSegment(t, "lnk", m.line(t, `echo "$T"`)+"/lnk", "read")
	v := m.readJSON(t, "segments/"+seg+"/info")
	wantNum(t, "info", v, "size", 8192)
	for _, c := range []string{"pw", "dotdot"} {
		r := m.run(t, fmt.Sprintf(`echo '{"name":"%s","uri":"file://'"$T"'/%s","permission":"read"}' > "$M/segments/open"`, uniq("esc"), c))
		if r.code == 0 || !strings.Contains(r.stderr, eACCES) {
			t.Errorf("symlink %s leading out of /tmp: %s\nwant %q", c, r, eACCES)
		}
	}
	name := uniq("shml")
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","location":"cpu","bytes":"64KiB","shm":"'"$S"'/kvlink"}' > "$M/memory/register"`, name))
	m.ok(t, `rmdir "$M/memory/`+name+`"`)
	r := m.run(t, fmt.Sprintf(`echo '{"name":"%s","location":"cpu","bytes":4096,"shm":"'"$S"'/etc"}' > "$M/memory/register"`, uniq("shme")))
	if r.code == 0 || !strings.Contains(r.stderr, eACCES) {
		t.Errorf("shm symlink to /etc/hostname: %s\nwant %q", r, eACCES)
	}
}

// testLiteralPath: file://$T/link/../f opens what open(2) resolves (the
// f next to link's target), not the lexically cleaned $T/f.
func testLiteralPath(t *testing.T, m *mount) {
	T, _ := m.scratchDirs(t)
	m.ok(t, `mkdir -p "$T/real/sub"; head -c 100 /dev/zero > "$T/real/f"; head -c 200 /dev/zero > "$T/f"; ln -s real/sub "$T/link"`)
	seg := m.openSegment(t, "lit", T+"/link/../f", "read")
	v := m.readJSON(t, "segments/"+seg+"/info")
	wantNum(t, "info", v, "size", 100)
}

// testOrderAcrossSegments: one file opened read_write and read (two
// segments), then pairs of groups in one batch: a 4 KiB WRITE through
// one, a READ of the same bytes through the other. Every READ must see
// its WRITE, as strict FIFO execution would.
func testOrderAcrossSegments(t *testing.T, m *mount) {
	T, _ := m.scratchDirs(t)
	const pairs = 256
	src := m.register(t, "osrc", pairs*4096)
	dst := m.register(t, "odst", pairs*4096)
	m.ok(t, fmt.Sprintf(`head -c %[1]d /dev/urandom > "$T/want"; head -c %[1]d /dev/zero > "$T/f"
dd if="$T/want" of="$M/memory/%[2]s/data" bs=64K conv=notrunc status=none`, pairs*4096, src))
	rw := m.openSegment(t, "orw", T+"/f", "read_write")
	ro := m.openSegment(t, "oro", T+"/f", "read")
	n := m.clone(t)
	// One bash process, builtin echo: the groups arrive back to back.
	m.ok(t, fmt.Sprintf(`B="$M/ctl/batches/%s"
for ((i = 0; i < %d; i++)); do
  o=$((i * 4096))
  echo '{"op":"write","target":"%s","requests":[{"memory":"%s","offset":'$o',"target_offset":'$o',"length":4096}]}' > "$B/submit"
  echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":'$o',"target_offset":'$o',"length":4096}]}' > "$B/submit"
done
echo seal > "$B/ctl"`, n, pairs, rw, src, ro, dst))
	if st := m.waitBatch(t, n); st != "completed" {
		t.Fatalf("batch %s is %s", n, st)
	}
	m.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" "$T/want"`, dst))
}
