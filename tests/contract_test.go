// contract_test.go owns the mount contract (docs/mount.md,
// "orbitefs mount reference (contract v1)") as a map from name to test, in the style of go-fuse's
// posixtest: TestContract runs every entry as a subtest against one
// daemon started with the embedded default configuration. Entries must
// leave the daemon as they found it (their objects are removed at
// cleanup) and must not stop it.

package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// contract is the mount contract, one entry per behaviour.
var contract = map[string]func(t *testing.T, m *mount){
	"Version":              testVersion,
	"Readme":               testReadme,
	"Stats":                testStats,
	"Metrics":              testMetrics,
	"Walkthrough":          testWalkthrough,
	"MemoryData":           testMemoryData,
	"MemoryInfo":           testMemoryInfo,
	"SegmentInfo":          testSegmentInfo,
	"WriteRoundTrip":       testWriteRoundTrip,
	"VectoredPadding":      testVectoredPadding,
	"UnalignedAndDirect":   testUnalignedAndDirect,
	"SegmentRefresh":       testSegmentRefresh,
	"ListAndRmdir":         testListAndRmdir,
	"StatusFresh":          testStatusFresh,
	"SeveralSubmissions":   testSeveralSubmissions,
	"LargeDocument":        testLargeDocument,
	"AllowedRoots":         testAllowedRoots,
	"OwnerOnly":            testOwnerOnly,
	"CtlCommands":          testCtlCommands,
	"BadInput":             testBadInput,
	"IncompleteDocument":   testIncompleteDocument,
	"ErrorFileIsPerBatch":  testErrorFileIsPerBatch,
	"ShortReadAfterShrink": testShortReadAfterShrink,
	"DocumentSizeLimit":    testDocumentSizeLimit,
	"SharedMemory":         testSharedMemory,
	"CloneConcurrent":      testCloneConcurrent,
	"SplitDocument":        testSplitDocument,
	"ConcurrentSubmits":    testConcurrentSubmits,
	"StaleHandles":         testStaleHandles,
	"FileModes":            testFileModes,
}

func TestContract(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	names := make([]string, 0, len(contract))
	for name := range contract {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { contract[name](t, m) })
	}
	if m.exited() {
		t.Fatalf("the daemon exited during the contract tests: %v", m.werr)
	}
}

func testVersion(t *testing.T, m *mount) {
	got := m.ok(t, `cat "$M/version"`)
	v := regexp.MustCompile(`^orbitefs [0-9]+\.[0-9]+\.[0-9]+ commit ([0-9a-f]{12}|unknown \(.+\))( dirty)?\n$`).FindStringSubmatch(got)
	if v == nil {
		t.Errorf("/version = %q, want \"orbitefs X.Y.Z commit HASH [dirty]\\n\"", got)
	} else if os.Getenv("ORBITEFS_BIN") == "" {
		// The harness built this binary from this checkout: the commit
		// and the dirty flag are the checkout's.
		root, err := repoRoot()
		if err != nil {
			t.Fatal(err)
		}
		head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
		if err != nil {
			t.Logf("git rev-parse HEAD: %v; not comparing the commit", err)
		} else if want := string(head[:12]); v[1] != want {
			t.Errorf("/version commit %q, want the checkout's HEAD %s", v[1], want)
		}
		status, err := exec.Command("git", "-C", root, "status", "--porcelain").Output()
		if err == nil && (len(status) > 0) != (v[2] != "") {
			t.Errorf("/version = %q: dirty flag %q, but git status --porcelain says %q", got, v[2], status)
		}
	}
	if want := m.ok(t, `"$BIN" version`); got != want {
		t.Errorf("/version = %q, but `orbitefs version` prints %q", got, want)
	}
	// Read-only: a write is refused.
	if _, _, code := m.sh(t, `echo x > "$M/version"`); code == 0 {
		t.Errorf("writing /version succeeded")
	}
}

func testReadme(t *testing.T, m *mount) {
	got := m.ok(t, `cat "$M/README"`)
	for _, want := range []string{"EINVAL", "ERANGE", "ENOENT", "EACCES", "EBUSY", "EFBIG", "submit", "wait"} {
		if !strings.Contains(got, want) {
			t.Errorf("/README does not mention %s", want)
		}
	}
}

func testStats(t *testing.T, m *mount) {
	// Parses with jq, is an object, and names the engine's parts.
	keys := m.line(t, `cat "$M/stats" | jq -c 'keys'`)
	for _, want := range []string{"segments", "memory|region", "batches", "io_uring", "gds"} {
		found := false
		for _, w := range strings.Split(want, "|") {
			found = found || strings.Contains(keys, w)
		}
		if !found {
			t.Errorf("/stats keys %s lack %q (stats cover segments, memory, batches, io_uring, gds, runtime queue, qos)", keys, want)
		}
	}
	// Fresh on every read: a new region shows up in the next read.
	before := m.ok(t, `cat "$M/stats"`)
	m.register(t, "stats", "64KiB")
	after := m.ok(t, `cat "$M/stats"`)
	if before == after {
		t.Errorf("/stats did not change after registering memory:\n%s", after)
	}
}

func testMetrics(t *testing.T, m *mount) {
	out := m.ok(t, `cat "$M/metrics"`)
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)( -?[0-9]+)?$`)
	typed := map[string]bool{}
	samples := 0
	for i, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		switch {
		case l == "":
		case strings.HasPrefix(l, "# TYPE "):
			f := strings.Fields(l)
			if len(f) != 4 {
				t.Errorf("metrics line %d: bad TYPE line %q", i+1, l)
				continue
			}
			switch f[3] {
			case "counter", "gauge", "histogram", "summary", "untyped":
			default:
				t.Errorf("metrics line %d: unknown type %q", i+1, f[3])
			}
			typed[f[2]] = true
		case strings.HasPrefix(l, "#"):
		default:
			mm := sample.FindStringSubmatch(l)
			if mm == nil {
				t.Errorf("metrics line %d is not a sample: %q", i+1, l)
				continue
			}
			if _, err := strconv.ParseFloat(mm[3], 64); err != nil {
				t.Errorf("metrics line %d: value %q: %v", i+1, mm[3], err)
			}
			base := mm[1]
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(base, suf); ok && typed[b] {
					base = b
				}
			}
			if !typed[base] {
				t.Errorf("metrics line %d: %s has no # TYPE line before it", i+1, mm[1])
			}
			samples++
		}
	}
	if samples == 0 {
		t.Errorf("/metrics has no samples:\n%s", out)
	}
}

// testWalkthrough runs the README's walkthrough and docs/mount.md's
// Example as they are written, read from the files: the only changes are
// $M (the test's mount, not /tmp/orbitefs) and the cache file, which
// lives in the test's scratch directory instead of /tmp/cache.bin so
// that parallel runs do not collide. Then the README's bad-input example:
// the errno from the write and the error file's text.
func testWalkthrough(t *testing.T, m *mount) {
	T, _ := m.scratchDirs(t)
	for _, doc := range []struct{ file, section string }{{"README.md", "## Walkthrough"}, {"docs/mount.md", "## Example"}} {
		block := docBlock(t, doc.file, doc.section, "```sh\n")
		script, ok := strings.CutPrefix(block, "M=/tmp/orbitefs; ")
		if !ok {
			t.Fatalf("%s %s no longer starts with M=/tmp/orbitefs; the test sets M itself:\n%s", doc.file, doc.section, block)
		}
		script = strings.ReplaceAll(script, "/tmp/cache.bin", T+"/cache.bin")
		out := m.ok(t, script+`[ ! -e $M/ctl/batches/$N ] && echo gone
rmdir $M/segments/cache
rmdir $M/memory/buf
`)
		// Each # comment in the block is the output its line prints.
		var want []string
		for _, l := range strings.Split(block, "\n") {
			if _, c, ok := strings.Cut(l, "# "); ok && !strings.HasPrefix(strings.TrimSpace(l), "#") {
				want = append(want, strings.TrimSpace(c))
			}
		}
		want = append(want, "gone")
		if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s %s printed %q, the comments say %q", doc.file, doc.section, got, want)
		}
	}

	// docs/mount.md's txn and qos/resolve shell examples, as written.
	setup := strings.ReplaceAll(`head -c 1M /dev/urandom > /tmp/cache.bin
echo '{"name":"buf","location":"cpu","bytes":"1MiB"}' > $M/memory/register
echo '{"name":"cache","uri":"file:///tmp/cache.bin","permission":"read_write"}' > $M/segments/open
`, "/tmp/cache.bin", T+"/cache.bin")
	out := m.ok(t, setup+docBlock(t, "docs/mount.md", "### txn", "```sh\n")+`# the release reaches the daemon just after close(2) returns
for i in $(seq 50); do [ "$(ls $M/ctl/batches | tr '\n' ' ')" = "clone txn " ] && break; sleep 0.1; done
ls $M/ctl/batches | tr '\n' ' '
rmdir $M/segments/cache $M/memory/buf`)
	if !strings.Contains(out, `"state": "completed"`) || !strings.Contains(out, `"completed_bytes": 4096`) || !strings.HasSuffix(out, "clone txn ") {
		t.Errorf("docs/mount.md's txn example: want a completed status of 4096 bytes and the batch freed at close, got\n%s", out)
	}
	out = m.ok(t, docBlock(t, "docs/mount.md", "### qos/resolve", "```sh\n"))
	if !strings.Contains(out, `"matched_contract": "disabled"`) || !strings.Contains(out, `"effective_priority": "low"`) {
		t.Errorf("docs/mount.md's qos/resolve example without QoS: want matched_contract disabled and the priority asked for (low), got\n%s", out)
	}

	// docs/mount.md's loader of a file of any size, on a file of 1 MiB +
	// 5 KiB in pieces of 256 KiB (CHUNK), 3 in flight (DEPTH): no output
	// means loaded.
	loader := docBlock(t, "docs/mount.md", "## Loading a file of any size", "```sh\n")
	loader = strings.Replace(loader, "load /data/model.safetensors weights buf", "load $T/model weights buf", 1)
	out = m.ok(t, `head -c $((1048576 + 5120)) /dev/urandom > $T/model
echo '{"name":"buf","location":"cpu","bytes":"2MiB"}' > $M/memory/register
echo '{"name":"weights","uri":"file://'"$T"'/model","permission":"read"}' > $M/segments/open
export CHUNK=262144 DEPTH=3
`+loader+`cmp -n $((1048576 + 5120)) $M/memory/buf/data $T/model && echo loaded
rmdir $M/segments/weights $M/memory/buf`)
	if out != "loaded\n" {
		t.Errorf("docs/mount.md's loader printed %q, want nothing (and the bytes in place)", out)
	}

	// The README's bad-input example, setting up what it refers to.
	block := docBlock(t, "README.md", "Bad input fails the write itself", "```sh\n")
	var cmds, outs []string
	for _, l := range strings.Split(block, "\n") {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			cmds = append(cmds, c)
		} else if l != "" {
			outs = append(outs, l)
		}
	}
	if len(cmds) != 3 || len(outs) != 2 {
		t.Fatalf("README bad-input example: want 3 commands and 2 output lines, got %q and %q", cmds, outs)
	}
	r := m.run(t, setup+cmds[0]+"\n"+cmds[1]+"\necho \"exit $?\" >&2\n"+cmds[2]+`
rmdir $M/ctl/batches/$N $M/segments/cache $M/memory/buf`)
	// bash names the script line in a -c script ("bash: line 5: echo:"),
	// not in an interactive shell as the README shows it.
	if _, errText, _ := strings.Cut(outs[0], "echo: "); !strings.Contains(r.stderr, "echo: "+errText+"\nexit 1\n") {
		t.Errorf("README says the write fails with %q; stderr:\n%s", outs[0], r.stderr)
	}
	// The error file's line, its time and batch number aside.
	_, text, _ := strings.Cut(outs[1], " ")
	pat := `[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z ` + strings.Replace(regexp.QuoteMeta(text), "batches/2", "batches/[0-9]+", 1)
	if !regexp.MustCompile("(?m)^" + pat + "$").MatchString(r.stdout) {
		t.Errorf("README shows the error file as\n%s\nit reads\n%s", outs[1], r.stdout)
	}
}

// docBlock returns the first fenced block opening with fence after the
// line starting with heading in the repository file name, without its
// fences.
func docBlock(t *testing.T, name, heading, fence string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading)
	if i < 0 {
		t.Fatalf("%s has no %q", name, heading)
	}
	s = s[i:]
	j := strings.Index(s, fence)
	if j < 0 {
		t.Fatalf("%s: no %q block after %q", name, fence, heading)
	}
	s = s[j+len(fence):]
	k := strings.Index(s, "```\n")
	if k < 0 {
		t.Fatalf("%s: unterminated block after %q", name, heading)
	}
	return s[:k]
}

// testMemoryData: a region's data file reads and writes its bytes, size
// is the region's size.
func testMemoryData(t *testing.T, m *mount) {
	r := m.register(t, "data", "256KiB")
	out := m.ok(t, fmt.Sprintf(`D="$M/memory/%s/data"
stat -c %%s "$D"
head -c 256K /dev/urandom > "$T/src"
dd if="$T/src" of="$D" bs=64K conv=notrunc status=none
cmp "$D" "$T/src" && echo same
sha256sum < "$D" | cut -d' ' -f1; sha256sum < "$T/src" | cut -d' ' -f1
# a write at an offset changes only those bytes
printf 'hello' | dd of="$D" bs=1 seek=1000 conv=notrunc status=none
dd if="$D" bs=1 skip=1000 count=5 status=none; echo
cmp -n 1000 "$D" "$T/src" && echo prefix-same`, r))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("unexpected output:\n%s", out)
	}
	if lines[0] != "262144" {
		t.Errorf("stat size of data = %s, want 262144 (the region's bytes)", lines[0])
	}
	if lines[1] != "same" || lines[2] != lines[3] {
		t.Errorf("data did not round-trip:\n%s", out)
	}
	if lines[4] != "hello" || lines[5] != "prefix-same" {
		t.Errorf("offset write: %q %q", lines[4], lines[5])
	}
	// `>` truncates to 0 first: accepted, and it does not clear the
	// region; other sizes are EINVAL.
	m.ok(t, fmt.Sprintf(`D="$M/memory/%s/data"; echo hello > "$D"; [ $(stat -c %%s "$D") -eq 262144 ]
[ "$(head -c 6 "$D")" = "hello" ]; cmp -n 900 -i 6:6 "$D" "$T/src"`, r))
	if r2 := m.run(t, fmt.Sprintf(`truncate -s 100 "$M/memory/%s/data"`, r)); r2.code == 0 || !strings.Contains(r2.stderr, eINVAL) {
		t.Errorf("truncate -s 100 data: %s\nwant %s", r2, eINVAL)
	}
	// Writing past the end of the region fails whole with ERANGE.
	r2 := m.run(t, fmt.Sprintf(`printf 'xyz' | dd of="$M/memory/%s/data" bs=3 seek=87381 conv=notrunc status=none`, r))
	if r2.code == 0 || !strings.Contains(r2.stderr, eRANGE) {
		t.Errorf("a write across the region's end: %s\nwant %s", r2, eRANGE)
	}
	if tailBytes := m.ok(t, fmt.Sprintf(`dd if="$M/memory/%s/data" bs=1 skip=262143 count=1 status=none | od -An -tx1`, r)); strings.TrimSpace(tailBytes) != strings.TrimSpace(m.ok(t, `dd if="$T/src" bs=1 skip=262143 count=1 status=none | od -An -tx1`)) {
		t.Errorf("the refused write changed the region's last byte")
	}
}

func testMemoryInfo(t *testing.T, m *mount) {
	r := m.register(t, "info", "1MiB")
	v := m.readJSON(t, "memory/"+r+"/info")
	wantStr(t, "info", v, "name", r)
	wantStr(t, "info", v, "location", "cpu")
	wantNum(t, "info", v, "bytes", 1<<20)
	if a, ok := num(v, "base_address"); !ok || a == 0 {
		if s, _ := v["base_address"].(string); s == "" {
			t.Errorf("info: base_address = %v, want a nonzero address", v["base_address"])
		}
	}
	// The address works in a submission as a raw registered address.
	src := m.ok(t, `head -c 4096 /dev/urandom > "$T/f"; echo "$T/f"`)
	seg := m.openSegment(t, "info", strings.TrimSpace(src), "read")
	addr := m.line(t, fmt.Sprintf(`jq -r '.base_address' "$M/memory/%s/info"`, r))
	n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"address":%s,"target_offset":0,"length":4096}]}`, seg, jsonAddr(addr)))
	if st != "completed" {
		t.Fatalf("read by address: batch %s %s", n, st)
	}
	m.ok(t, fmt.Sprintf(`cmp -n 4096 "$M/memory/%s/data" "$T/f"`, r))
}

// jsonAddr renders an address from info (a number or a string) for a
// submission.
func jsonAddr(a string) string {
	if _, err := strconv.ParseUint(a, 10, 64); err == nil {
		return a
	}
	return strconv.Quote(a)
}

func testSegmentInfo(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 12345 /dev/urandom > "$T/f"; echo "$T/f"`))
	for _, perm := range []string{"read", "write", "read_write"} {
		seg := m.openSegment(t, "seginfo", p, perm)
		v := m.readJSON(t, "segments/"+seg+"/info")
		wantStr(t, perm, v, "uri", "file://"+p)
		wantStr(t, perm, v, "path", p)
		wantNum(t, perm, v, "size", 12345)
		wantNum(t, perm, v, "offset", 0)
		wantStr(t, perm, v, "permission", perm)
		if _, ok := v["direct_io"].(bool); !ok {
			t.Errorf("%s: info lacks boolean direct_io: %v", perm, v)
		}
		if _, ok := v["gds_mode"]; !ok {
			t.Errorf("%s: info lacks gds_mode: %v", perm, v)
		}
	}
}

// testWriteRoundTrip: bytes written into memory with dd go to a file with
// a write submission, on ext4 and on tmpfs, and come back with a read.
func testWriteRoundTrip(t *testing.T, m *mount) {
	for _, fs := range []string{"T", "S"} {
		t.Run(map[string]string{"T": "ext4", "S": "tmpfs"}[fs], func(t *testing.T) {
			r := m.register(t, "wrt", "1MiB")
			dir := m.line(t, `echo "$`+fs+`"`)
			m.ok(t, fmt.Sprintf(`head -c 1M /dev/urandom > "$T/src"
dd if="$T/src" of="$M/memory/%s/data" bs=128K conv=notrunc status=none
truncate -s 1M "%s/dst"`, r, dir))
			seg := m.openSegment(t, "wrt", dir+"/dst", "read_write")
			n, st := m.run1(t, fmt.Sprintf(`{"op":"write","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":"1MiB"}]}`, seg, r))
			if st != "completed" {
				t.Fatalf("write: batch %s is %s", n, st)
			}
			m.ok(t, fmt.Sprintf(`cmp "$T/src" "%s/dst"`, dir))
			// Back again: zero the region, read the file into it.
			m.ok(t, fmt.Sprintf(`dd if=/dev/zero of="$M/memory/%s/data" bs=1M count=1 conv=notrunc status=none`, r))
			n, st = m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":1048576}]}`, seg, r))
			if st != "completed" {
				t.Fatalf("read: batch %s is %s", n, st)
			}
			m.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" "$T/src"`, r))
			wantNum(t, "tasks/0", m.task(t, n, 0), "transferred_bytes", 1<<20)
		})
	}
}

// testVectoredPadding: a vector request with {"padding":N} elements on
// ext4 and tmpfs. A read skips the padded file bytes; a write fills them
// with zeros.
func testVectoredPadding(t *testing.T, m *mount) {
	for _, fs := range []string{"T", "S"} {
		t.Run(map[string]string{"T": "ext4", "S": "tmpfs"}[fs], func(t *testing.T) {
			r := m.register(t, "vec", "64KiB")
			dir := m.line(t, `echo "$`+fs+`"`)
			m.ok(t, fmt.Sprintf(`head -c 64K /dev/urandom > "%[1]s/src"
dd if=/dev/zero of="$M/memory/%[2]s/data" bs=64K count=1 conv=notrunc status=none`, dir, r))
			src := m.openSegment(t, "vecsrc", dir+"/src", "read")
			vec := func(off int) string {
				return fmt.Sprintf(`{"target_offset":%d,"elements":[{"memory":"%[2]s","offset":0,"length":4096},{"padding":512},{"memory":"%[2]s","offset":8192,"length":4096}]}`, off, r)
			}
			n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[%s]}`, src, vec(0)))
			if st != "completed" {
				t.Fatalf("vectored read: batch %s is %s", n, st)
			}
			wantNum(t, "tasks/0", m.task(t, n, 0), "transferred_bytes", 4096+512+4096)
			wantNum(t, "tasks/0", m.task(t, n, 0), "length", 4096+512+4096)
			m.ok(t, fmt.Sprintf(`D="$M/memory/%s/data"; F="%s/src"
cmp -n 4096 "$D" "$F"                         # element 0 <- file [0, 4096)
cmp -n 4096 -i 4096:0 "$D" /dev/zero          # untouched between the elements
cmp -n 4096 -i 8192:4608 "$D" "$F"            # element 2 <- file [4608, 8704), after 512 padding
cmp -n 53248 -i 12288:0 "$D" /dev/zero        # untouched after`, r, dir))

			// Write the same vector at offset 1000 of a random file: the
			// padding becomes zeros, everything else stays.
			m.ok(t, fmt.Sprintf(`head -c 64K /dev/urandom > "%[1]s/dst"; cp "%[1]s/dst" "$T/want"
D="$M/memory/%[2]s/data"
dd if="$D" of="$T/want" bs=64K iflag=count_bytes oflag=seek_bytes count=4096 seek=1000 conv=notrunc status=none
dd if=/dev/zero of="$T/want" bs=64K iflag=count_bytes oflag=seek_bytes count=512 seek=5096 conv=notrunc status=none
dd if="$D" of="$T/want" bs=64K iflag=skip_bytes,count_bytes oflag=seek_bytes skip=8192 count=4096 seek=5608 conv=notrunc status=none`, dir, r))
			dst := m.openSegment(t, "vecdst", dir+"/dst", "write")
			n, st = m.run1(t, fmt.Sprintf(`{"op":"write","target":"%s","requests":[%s]}`, dst, vec(1000)))
			if st != "completed" {
				t.Fatalf("vectored write: batch %s is %s", n, st)
			}
			m.ok(t, fmt.Sprintf(`cmp "%s/dst" "$T/want"`, dir))
		})
	}
}

// testUnalignedAndDirect: one submission mixing byte-unaligned requests
// with O_DIRECT-aligned ones, on ext4 (direct I/O) and tmpfs.
func testUnalignedAndDirect(t *testing.T, m *mount) {
	for _, fs := range []string{"T", "S"} {
		t.Run(map[string]string{"T": "ext4", "S": "tmpfs"}[fs], func(t *testing.T) {
			dir := m.line(t, `echo "$`+fs+`"`)
			r := m.register(t, "dio", "1MiB")
			m.ok(t, fmt.Sprintf(`head -c 1M /dev/urandom > "%s/src"
dd if=/dev/zero of="$M/memory/%s/data" bs=1M count=1 conv=notrunc status=none`, dir, r))
			seg := m.openSegment(t, "dio", dir+"/src", "read")
			info := m.readJSON(t, "segments/"+seg+"/info")
			if fs == "T" && info["direct_io"] != true {
				t.Errorf("ext4 segment: direct_io = %v, want true", info["direct_io"])
			}
			t.Logf("segment info: %v", info)
			type req struct{ off, toff, n int }
			reqs := []req{
				{3, 5, 100},             // unaligned everywhere
				{4096, 8192, 65536},     // page aligned: O_DIRECT eligible
				{131072, 600001, 70000}, // aligned memory, unaligned file offset and length
				{262144, 524288, 4096},  // aligned, one block
				{300001, 1048575, 1},    // last byte of the file
			}
			var parts []string
			for _, q := range reqs {
				parts = append(parts, fmt.Sprintf(`{"memory":"%s","offset":%d,"target_offset":%d,"length":%d}`, r, q.off, q.toff, q.n))
			}
			n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[%s]}`, seg, strings.Join(parts, ",")))
			if st != "completed" {
				t.Fatalf("batch %s is %s", n, st)
			}
			for i, q := range reqs {
				wantNum(t, fmt.Sprintf("tasks/%d", i), m.task(t, n, i), "transferred_bytes", float64(q.n))
				m.ok(t, fmt.Sprintf(`cmp -n %d -i %d:%d "$M/memory/%s/data" "%s/src"`, q.n, q.off, q.toff, r, dir))
			}

			// And the same requests as writes into a zeroed file. The
			// requests of one submission run concurrently, so they must
			// not overlap (not even share a page, where a buffered and an
			// O_DIRECT write would race in the page cache).
			m.ok(t, fmt.Sprintf(`truncate -s 1M "%[1]s/dst"; truncate -s 1M "$T/want"`, dir))
			for _, q := range reqs {
				m.ok(t, fmt.Sprintf(`dd if="$M/memory/%s/data" of="$T/want" bs=64K iflag=skip_bytes,count_bytes oflag=seek_bytes skip=%d seek=%d count=%d conv=notrunc status=none`, r, q.off, q.toff, q.n))
			}
			dst := m.openSegment(t, "diodst", dir+"/dst", "read_write")
			n, st = m.run1(t, fmt.Sprintf(`{"op":"write","target":"%s","requests":[%s]}`, dst, strings.ReplaceAll(strings.Join(parts, ","), `"`+seg+`"`, `"`+dst+`"`)))
			if st != "completed" {
				t.Fatalf("write batch %s is %s", n, st)
			}
			m.ok(t, fmt.Sprintf(`cmp "%s/dst" "$T/want"`, dir))
		})
	}
}

// testSegmentRefresh: a write to refresh re-reads the file size; a range
// beyond the new size is then ERANGE at submit.
func testSegmentRefresh(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 1M /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "refresh", p, "read")
	r := m.register(t, "refresh", "1MiB")
	m.ok(t, `truncate -s 4096 "$T/f"`)
	m.ok(t, fmt.Sprintf(`echo 1 > "$M/segments/%s/refresh"`, seg))
	wantNum(t, "info after refresh", m.readJSON(t, "segments/"+seg+"/info"), "size", 4096)
	n := m.clone(t)
	_, stderr, code := m.sh(t, fmt.Sprintf(`echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":8192}]}' > "$M/ctl/batches/%s/submit"`, seg, r, n))
	if code == 0 || !strings.Contains(stderr, "Numerical result out of range") {
		t.Errorf("read beyond the refreshed size: exit %d, stderr %q; want ERANGE", code, stderr)
	}
	m.ok(t, `truncate -s 1M "$T/f"`)
	m.ok(t, fmt.Sprintf(`echo > "$M/segments/%s/refresh"`, seg))
	wantNum(t, "info after growing", m.readJSON(t, "segments/"+seg+"/info"), "size", 1<<20)
}

// testListAndRmdir: ls shows live objects, rmdir removes them.
func testListAndRmdir(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 4096 /dev/urandom > "$T/f"; echo "$T/f"`))
	r := m.register(t, "ls", 4096)
	seg := m.openSegment(t, "ls", p, "read")
	n := m.clone(t)
	if got := m.ls(t, "memory"); !contains(got, r) || !contains(got, "register") {
		t.Errorf("ls memory = %v, want %s and register", got, r)
	}
	if got := m.ls(t, "segments"); !contains(got, seg) || !contains(got, "open") {
		t.Errorf("ls segments = %v, want %s and open", got, seg)
	}
	if got := m.ls(t, "ctl/batches"); !contains(got, n) || !contains(got, "clone") {
		t.Errorf("ls ctl/batches = %v, want %s and clone", got, n)
	}
	got := m.ls(t, "ctl/batches/"+n)
	for _, f := range []string{"submit", "ctl", "state", "status", "wait", "error", "tasks"} {
		if !contains(got, f) {
			t.Errorf("ls ctl/batches/%s = %v, lacks %s", n, got, f)
		}
	}
	if got := m.ls(t, "memory/"+r); !contains(got, "info") || !contains(got, "data") {
		t.Errorf("ls memory/%s = %v", r, got)
	}
	if got := m.ls(t, "segments/"+seg); !contains(got, "info") || !contains(got, "refresh") {
		t.Errorf("ls segments/%s = %v", seg, got)
	}
	if got := m.ls(t, ""); !contains(got, "README") || !contains(got, "version") || !contains(got, "stats") ||
		!contains(got, "metrics") || !contains(got, "memory") || !contains(got, "segments") || !contains(got, "ctl") {
		t.Errorf("ls / = %v", got)
	}
	m.submit(t, n, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096}]}`, seg, r))
	if got := m.ls(t, "ctl/batches/"+n+"/tasks"); len(got) != 1 || got[0] != "0" {
		t.Errorf("ls tasks = %v, want [0]", got)
	}
	m.ctl(t, n, "seal")
	m.waitBatch(t, n)

	m.ok(t, fmt.Sprintf(`rmdir "$M/ctl/batches/%s" "$M/segments/%s" "$M/memory/%s"`, n, seg, r))
	if got := m.ls(t, "memory"); contains(got, r) {
		t.Errorf("after rmdir: ls memory = %v", got)
	}
	if got := m.ls(t, "segments"); contains(got, seg) {
		t.Errorf("after rmdir: ls segments = %v", got)
	}
	if got := m.ls(t, "ctl/batches"); contains(got, n) {
		t.Errorf("after rmdir: ls ctl/batches = %v", got)
	}
	for _, p := range []string{"memory/" + r + "/info", "segments/" + seg + "/info", "ctl/batches/" + n + "/state"} {
		if _, stderr, code := m.sh(t, `cat "$M/`+p+`"`); code == 0 || !strings.Contains(stderr, "No such file or directory") {
			t.Errorf("cat %s after rmdir: exit %d %q, want ENOENT", p, code, stderr)
		}
	}
	// A removed name can be used again.
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","location":"cpu","bytes":4096}' > "$M/memory/register"; rmdir "$M/memory/%s"`, r, r))
	// rmdir of a batch number that never existed.
	if _, stderr, code := m.sh(t, `rmdir "$M/ctl/batches/987654321"`); code == 0 || !strings.Contains(stderr, "No such file or directory") {
		t.Errorf("rmdir of an unknown batch: exit %d %q, want ENOENT", code, stderr)
	}
}

// testStatusFresh: state, status and tasks/<i> reflect the batch as it is
// at each read.
func testStatusFresh(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 64K /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "fresh", p, "read")
	r := m.register(t, "fresh", "64KiB")
	n := m.clone(t)
	if st := m.state(t, n); st != "open" {
		t.Errorf("new batch: state %q, want open", st)
	}
	s := m.readJSON(t, "ctl/batches/"+n+"/status")
	wantStr(t, "new batch status", s, "state", "open")
	if s["sealed"] != false {
		t.Errorf("new batch status: sealed = %v, want false", s["sealed"])
	}
	wantNum(t, "new batch status", s, "capacity", 1024)
	if id := fmt.Sprint(s["id"]); id != n {
		t.Errorf("status id = %v, want %s", s["id"], n)
	}
	if c := m.taskCount(t, n); c != 0 {
		t.Errorf("new batch has %d tasks", c)
	}
	m.submit(t, n, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096},{"memory":"%s","offset":4096,"target_offset":4096,"length":4096}]}`, seg, r, r))
	if c := m.taskCount(t, n); c != 2 {
		t.Errorf("after a 2-request submit: %d tasks", c)
	}
	s = m.readJSON(t, "ctl/batches/"+n+"/status")
	if subs, _ := s["submissions"].([]any); len(subs) != 1 {
		t.Errorf("status submissions = %v, want one", s["submissions"])
	}
	if tasks, _ := s["tasks"].(map[string]any); tasks == nil || tasks["total"] != 2.0 {
		t.Errorf("status tasks = %v, want total 2", s["tasks"])
	}
	if st := m.state(t, n); st != "open" {
		t.Errorf("unsealed batch: state %q, want open", st)
	}
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "completed" {
		t.Fatalf("wait = %s", st)
	}
	if st := m.state(t, n); st != "completed" {
		t.Errorf("after wait: state %q", st)
	}
	s = m.readJSON(t, "ctl/batches/"+n+"/status")
	wantStr(t, "final status", s, "state", "completed")
	if s["sealed"] != true {
		t.Errorf("final status: sealed = %v", s["sealed"])
	}
	for i := 0; i < 2; i++ {
		v := m.task(t, n, i)
		wantNum(t, "task", v, "index", float64(i))
		wantStr(t, "task", v, "state", "completed")
		wantNum(t, "task", v, "length", 4096)
		wantNum(t, "task", v, "transferred_bytes", 4096)
		for _, k := range []string{"transport", "physical_owner", "error", "remote_effect", "failover_count"} {
			if _, ok := v[k]; !ok {
				t.Errorf("tasks/%d lacks %s: %v", i, k, v)
			}
		}
	}
	// wait after completion returns at once, every time.
	for i := 0; i < 3; i++ {
		start := time.Now()
		if st := m.waitBatch(t, n); st != "completed" || time.Since(start) > 2*time.Second {
			t.Errorf("wait on a completed batch: %q after %s", st, since(start))
		}
	}
}

// testSeveralSubmissions: each write to submit is one group; tasks are
// numbered across groups in order.
func testSeveralSubmissions(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 64K /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "several", p, "read")
	r := m.register(t, "several", "64KiB")
	n := m.clone(t)
	doc := func(off, k int) string {
		var reqs []string
		for i := 0; i < k; i++ {
			o := off + i*1024
			reqs = append(reqs, fmt.Sprintf(`{"memory":"%s","offset":%d,"target_offset":%d,"length":1024}`, r, o, o))
		}
		return fmt.Sprintf(`{"op":"read","target":"%s","requests":[%s]}`, seg, strings.Join(reqs, ","))
	}
	m.submit(t, n, doc(0, 3))
	m.submit(t, n, doc(3*1024, 2))
	// Two documents through one open file, in two writes.
	m.ok(t, fmt.Sprintf(`{ echo %s; echo %s; } > "$M/ctl/batches/%s/submit"`, shq(doc(5*1024, 1)), shq(doc(6*1024, 4)), n))
	if c := m.taskCount(t, n); c != 10 {
		t.Errorf("tasks after 4 groups of 3+2+1+4: %d", c)
	}
	s := m.readJSON(t, "ctl/batches/"+n+"/status")
	subs, _ := s["submissions"].([]any)
	if len(subs) != 4 {
		t.Fatalf("status submissions = %v, want 4", s["submissions"])
	}
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "completed" {
		t.Fatalf("wait = %s", st)
	}
	m.ok(t, fmt.Sprintf(`cmp -n 10240 "$M/memory/%s/data" "$T/f"`, r))
	t.Logf("status: %s", m.ok(t, `jq -c . "$M/ctl/batches/`+n+`/status"`))
}

// testLargeDocument: a valid document larger than one FUSE write (128
// KiB) arrives in several write(2) calls and is accepted whole.
func testLargeDocument(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 1M /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "large", p, "read")
	r := m.register(t, "large", "1MiB")
	// 1000 requests of 1 KiB at shuffled offsets, pretty-printed and
	// padded to about 300 KiB.
	m.ok(t, fmt.Sprintf(`jq -n --arg s %s --arg r %s '{op:"read",target:$s,requests:[range(1000)|{memory:$r,offset:(.*1024),target_offset:(((.*7)%%1000)*1024),length:1024}]}' > "$T/doc.json"
{ cat "$T/doc.json"; head -c 200000 /dev/zero | tr '\0' ' '; } > "$T/big.json"
[ $(stat -c %%s "$T/big.json") -gt 131072 ]`, seg, r))
	for _, how := range []string{
		`cat "$T/big.json" > "$M/ctl/batches/$N/submit"`,
		`dd if="$T/big.json" of="$M/ctl/batches/$N/submit" bs=4k status=none`,
		`echo "$(cat "$T/big.json")" > "$M/ctl/batches/$N/submit"`,
	} {
		n := m.clone(t)
		r := m.run(t, "N="+n+"\n"+how)
		if r.code != 0 {
			t.Errorf("%s:\n%s", how, r)
			continue
		}
		if c := m.taskCount(t, n); c != 1000 {
			t.Errorf("%s: %d tasks, want 1000", how, c)
		}
		m.ctl(t, n, "seal")
		if st := m.waitBatch(t, n); st != "completed" {
			t.Errorf("%s: batch %s", how, st)
		}
	}
	// Memory now holds file block (i*7)%1000 at block i.
	m.ok(t, fmt.Sprintf(`for i in 0 1 2 143 999; do
  j=$(( (i*7) %% 1000 ))
  cmp -n 1024 -i $((i*1024)):$((j*1024)) "$M/memory/%s/data" "$T/f"
done`, r))
}

// testAllowedRoots: with the embedded defaults, file segments open only
// beneath /tmp and /dev/shm (checked on the opened file's real path);
// symlinks and ".." cannot lead out, and the daemon's working directory
// is not a root (a daemon started in / once exposed every file).
func testAllowedRoots(t *testing.T, m *mount) {
	open := func(name, uri, perm string) shResult {
		return m.run(t, fmt.Sprintf(`echo '{"name":"%s","uri":"%s","permission":"%s"}' > "$M/segments/open"`, name, uri, perm))
	}
	ok := func(what, uri string) {
		t.Helper()
		name := uniq("root")
		if r := open(name, uri, "read"); r.code != 0 {
			t.Errorf("%s (%s): %s", what, uri, r)
			return
		}
		m.ok(t, `rmdir "$M/segments/`+name+`"`)
	}
	refused := func(what, uri, errno string) {
		t.Helper()
		before := m.ls(t, "segments")
		r := open(uniq("root"), uri, "read")
		if r.code == 0 || !strings.Contains(r.stderr, errno) {
			t.Errorf("%s (%s): exit %d, stderr %q; want %q", what, uri, r.code, r.stderr, errno)
		}
		if after := m.ls(t, "segments"); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Errorf("%s: ls segments changed from %v to %v", what, before, after)
		}
	}
	T, S := m.scratchDirs(t)
	// A directory of its own outside every root, so that parallel runs
	// never share (or remove) each other's.
	outside, err := os.MkdirTemp("/var/tmp", "orbitefs-e2e-outside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	m.ok(t, fmt.Sprintf(`echo x > "$T/f"; echo x > "$S/f"; echo x > "%[1]s/f"
ln -s /etc/passwd "$T/pw"; ln -s /etc "$T/etc"; ln -s "%[1]s/f" "$T/tocwd"; ln -s f "$T/tof"; ln -s "$T/f" "$T/tofabs"
echo x > "%[2]s/f"
mkfifo "$T/fifo"; mkdir "$T/dir"`, m.cwd, outside))

	ok("file under /tmp", "file://"+T+"/f")
	ok("file under /dev/shm", "file://"+S+"/f")
	ok("relative symlink under /tmp to a file next to it", "file://"+T+"/tof")
	// Confinement checks where the opened file really is, so absolute
	// symlinks whose target lies beneath an allowed root open too.
	ok("absolute symlink under /tmp to a file next to it", "file://"+T+"/tofabs")

	refused("file in the daemon's working directory", "file://"+m.cwd+"/f", "Permission denied")
	refused("relative URI, resolved against the working directory", "file://f", "Permission denied")
	refused("symlink under /tmp to a file in the working directory", "file://"+T+"/tocwd", "Permission denied")
	refused("/etc/passwd", "file:///etc/passwd", "Permission denied")
	refused("symlink under /tmp to /etc/passwd", "file://"+T+"/pw", "Permission denied")
	refused("directory symlink under /tmp to /etc", "file://"+T+"/etc/passwd", "Permission denied")
	refused(".. out of /tmp", "file:///tmp/../etc/passwd", "Permission denied")
	refused(".. out of the scratch dir", "file://"+T+"/../../../etc/passwd", "Permission denied")
	refused("relative .. out of the working directory", "file://../../../etc/passwd", "Permission denied")
	refused("/var/tmp outside the working directory", "file://"+outside+"/f", "Permission denied")
	refused("missing file", "file://"+T+"/missing", "No such file or directory")
	refused("directory", "file://"+T+"/dir", "Invalid argument")
	refused("FIFO", "file://"+T+"/fifo", "Invalid argument")
	refused("not a file URI", "http://example.com/x", "Invalid argument")
	if out := m.ok(t, `cat "$M/version"`); !strings.HasPrefix(out, "orbitefs") {
		t.Errorf("mount unresponsive after the refused opens")
	}
}

// testOwnerOnly: without allow_other only the mount's owner may use it.
func testOwnerOnly(t *testing.T, m *mount) {
	ents := mountsAt(m.dir)
	if len(ents) == 0 {
		t.Fatal("mount not in mountinfo")
	}
	e := ents[len(ents)-1]
	t.Logf("mountinfo: %+v", e)
	if strings.Contains(e.superOpts, "allow_other") || strings.Contains(e.opts, "allow_other") {
		t.Errorf("mounted with allow_other by default: %s %s", e.opts, e.superOpts)
	}
	if !strings.Contains(e.superOpts, "user_id=0") {
		t.Errorf("super options %q lack user_id=0", e.superOpts)
	}
	// Directories 0700 (docs), owned by the daemon's user.
	if mode := m.line(t, `stat -c '%a %u' "$M" "$M/ctl" "$M/memory"`); mode != "700 0\n700 0\n700 0" {
		t.Errorf("modes of /, /ctl, /memory = %q, want 700 owned by uid 0", mode)
	}
	for _, cmd := range []string{`ls "$M"`, `cat "$M/version"`, `cat "$M/ctl/batches/clone"`} {
		r := m.run(t, `setpriv --reuid=65534 --regid=65534 --clear-groups `+cmd)
		if r.code == 0 || !strings.Contains(r.stderr, "Permission denied") {
			t.Errorf("as nobody, %s: exit %d %q; want Permission denied", cmd, r.code, r.stderr)
		}
	}
	// The nobody attempt at clone must not have allocated a batch.
	before := m.ls(t, "ctl/batches")
	m.sh(t, `setpriv --reuid=65534 --regid=65534 --clear-groups cat "$M/ctl/batches/clone"`)
	if after := m.ls(t, "ctl/batches"); len(after) != len(before) {
		t.Errorf("a refused clone changed ls ctl/batches: %v -> %v", before, after)
	}
}

// testCtlCommands: the ctl grammar on a finished batch.
func testCtlCommands(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 8K /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "ctl", p, "read")
	r := m.register(t, "ctl", "8KiB")
	n := m.clone(t)
	m.submit(t, n, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096}]}`, seg, r))
	m.ctl(t, n, "progress")
	m.ctl(t, n, "seal")
	m.ctl(t, n, "seal") // sealing twice is harmless
	if st := m.waitBatch(t, n); st != "completed" {
		t.Fatalf("wait = %s", st)
	}
	m.ctl(t, n, "cancel 0") // a finished task: nothing happens
	m.ctl(t, n, "cancel_all")
	m.ctl(t, n, "progress")
	if st := m.state(t, n); st != "completed" {
		t.Errorf("cancel after completion changed the state to %s", st)
	}
	// free through ctl removes the batch like rmdir.
	m.ctl(t, n, "free")
	if got := m.ls(t, "ctl/batches"); contains(got, n) {
		t.Errorf("after free: ls ctl/batches = %v", got)
	}

	// A batch with only cancelled work ends cancelled.
	n = m.clone(t)
	m.submit(t, n, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096}]}`, seg, r))
	m.ctl(t, n, "cancel_all")
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "completed" && st != "cancelled" {
		t.Errorf("cancel_all then seal: %s, want cancelled (or completed if the task ran first)", st)
	}
}

// testIncompleteDocument: a document cut short is refused at close by
// writers that report close errors, and nothing is submitted.
func testIncompleteDocument(t *testing.T, m *mount) {
	n := m.clone(t)
	for _, how := range []string{
		`/bin/echo -n '{"op":' > "$M/ctl/batches/$N/submit"`,
		`printf '{"op":' | cat > "$M/ctl/batches/$N/submit"`,
		`printf '{"op":"read","target":"x","requests":[' | dd of="$M/ctl/batches/$N/submit" status=none`,
	} {
		r := m.run(t, "N="+n+"\n"+how)
		if r.code == 0 || !strings.Contains(r.stderr, "Invalid argument") {
			t.Errorf("%s: exit %d, stderr %q; want EINVAL", how, r.code, r.stderr)
		}
	}
	if c := m.taskCount(t, n); c != 0 {
		t.Errorf("incomplete documents added %d tasks", c)
	}
	if e := m.ok(t, `cat "$M/ctl/batches/`+n+`/error"`); !strings.Contains(e, "incomplete") {
		t.Errorf("error file = %q, want it to say the document was incomplete", e)
	}
	// The handle after an incomplete document is usable again: a new
	// open with a complete document works.
	p := strings.TrimSpace(m.ok(t, `head -c 4096 /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "inc", p, "read")
	r := m.register(t, "inc", 4096)
	m.submit(t, n, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096}]}`, seg, r))
	if c := m.taskCount(t, n); c != 1 {
		t.Errorf("after a complete document: %d tasks", c)
	}
}

// testErrorFileIsPerBatch: a bad submit to one batch leaves another
// batch's error file alone.
func testErrorFileIsPerBatch(t *testing.T, m *mount) {
	a, b := m.clone(t), m.clone(t)
	m.sh(t, `echo '{"op":"frob"}' > "$M/ctl/batches/`+a+`/submit"`)
	ea := m.ok(t, `cat "$M/ctl/batches/`+a+`/error"`)
	eb := m.ok(t, `cat "$M/ctl/batches/`+b+`/error"`)
	if !strings.Contains(ea, "frob") {
		t.Errorf("batch %s error = %q, want the bad op named", a, ea)
	}
	if strings.Contains(eb, "frob") {
		t.Errorf("batch %s error = %q shows batch %s's error", b, eb, a)
	}
}

// testShortReadAfterShrink: a file shrunk after open. A submission
// through the mount is range-checked against the current size, so a read
// past the new end is refused at submit (ERANGE) and queues nothing; a
// read inside the new size still works, and so does one of a part grown
// later. (inflight_test.go's ShortReadAtEOF shrinks the file
// between submit and I/O: that one is the short read.)
func testShortReadAfterShrink(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 1M /dev/urandom > "$T/f"; cp "$T/f" "$T/orig"; echo "$T/f"`))
	seg := m.openSegment(t, "shrink", p, "read")
	r := m.register(t, "shrink", "1MiB")
	m.ok(t, `truncate -s 600000 "$T/f"`)
	n := m.clone(t)
	res := m.run(t, fmt.Sprintf(`echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":1048576}]}' > "$M/ctl/batches/%s/submit"`, seg, r, n))
	if res.code == 0 || !strings.Contains(res.stderr, eRANGE) {
		t.Fatalf("read past the shrunk end: %s\nwant %s", res, eRANGE)
	}
	if msg := m.ok(t, `cat "$M/ctl/batches/`+n+`/error"`); !strings.Contains(msg, "beyond file size 600000") {
		t.Errorf("error file %q does not name the current size", msg)
	}
	if c := m.taskCount(t, n); c != 0 {
		t.Errorf("the refused read added %d tasks", c)
	}
	m.ok(t, fmt.Sprintf(`echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":600000}]}' > "$M/ctl/batches/%s/submit"`, seg, r, n))
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "completed" {
		t.Errorf("batch %s is %s, want completed", n, st)
	}
	m.ok(t, fmt.Sprintf(`cmp -n 600000 "$M/memory/%s/data" "$T/orig"`, r))

	// Grown again with new bytes, no refresh: a read of the grown part
	// is accepted and reads them.
	m.ok(t, `head -c 448576 /dev/urandom > "$T/more"; cat "$T/more" >> "$T/f"`)
	if n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":600000,"length":448576}]}`, seg, r)); st != "completed" {
		t.Fatalf("read of the grown part: batch %s is %s", n, st)
	}
	m.ok(t, fmt.Sprintf(`cmp -n 448576 "$M/memory/%s/data" "$T/more"`, r))
}

// testDocumentSizeLimit: a document of exactly max_document_bytes (1 MiB
// by default) is accepted; one byte more is EFBIG and changes nothing.
func testDocumentSizeLimit(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 4096 /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "limit", p, "read")
	r := m.register(t, "limit", 4096)
	doc := fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":4096}]`, seg, r)
	// mk N writes a document of exactly N bytes (no newline), padded with
	// spaces inside the object.
	mk := fmt.Sprintf(`mk() { { printf '%%s' %s; head -c $(( $1 - %d )) /dev/zero | tr '\0' ' '; printf '}'; } > "$T/doc"; [ $(stat -c %%s "$T/doc") -eq $1 ]; }`, shq(doc), len(doc)+1)
	n := m.clone(t)
	res := m.run(t, mk+"\nmk 1048577 && cat \"$T/doc\" > \"$M/ctl/batches/"+n+"/submit\"")
	if res.code == 0 || !strings.Contains(res.stderr, eFBIG) {
		t.Errorf("a document of 1 MiB + 1 byte: %s\nwant %s", res, eFBIG)
	}
	if c := m.taskCount(t, n); c != 0 {
		t.Errorf("the refused document added %d tasks", c)
	}
	res = m.run(t, mk+"\nmk 1048576 && cat \"$T/doc\" > \"$M/ctl/batches/"+n+"/submit\"")
	if res.code != 0 {
		t.Errorf("a document of exactly 1 MiB: %s\nwant it accepted", res)
	}
	if c := m.taskCount(t, n); c != 1 {
		t.Errorf("after the 1 MiB document: %d tasks, want 1", c)
	}
}

// testSharedMemory: "shm" maps an existing file under an allowed root,
// so another process sees the bytes the engine moves.
func testSharedMemory(t *testing.T, m *mount) {
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 64K /dev/urandom > "$S/kv"; head -c 64K /dev/urandom > "$T/src"; cp "$S/kv" "$T/kvorig"`)
	name := uniq("shm")
	m.ok(t, fmt.Sprintf(`echo '{"name":"%s","location":"cpu","bytes":"64KiB","shm":"%s/kv"}' > "$M/memory/register"`, name, S))
	t.Cleanup(func() { m.sh(t, `rmdir "$M/memory/`+name+`"`) })
	v := m.readJSON(t, "memory/"+name+"/info")
	wantStr(t, "info", v, "shm", S+"/kv")
	wantNum(t, "info", v, "bytes", 65536)
	// The region shows the file's bytes ...
	m.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" "$S/kv"`, name))
	// ... and a transfer into the region shows up in the file.
	seg := m.openSegment(t, "shmsrc", T(m, t)+"/src", "read")
	n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":0,"target_offset":0,"length":65536}]}`, seg, name))
	if st != "completed" {
		t.Fatalf("batch %s %s", n, st)
	}
	m.ok(t, `cmp "$S/kv" "$T/src"`)
	// The file is never resized, and must be large enough.
	m.ok(t, `[ $(stat -c %s "$S/kv") -eq 65536 ]`)
	// A directory symlink under /dev/shm leading out of the allowed roots
	// must not map the file behind it (it would be mapped MAP_SHARED
	// read-write). The victim is a scratch file in /var/tmp.
	victim := m.line(t, `d=$(mktemp -d /var/tmp/orbitefs-e2e-victim-XXXXXX); head -c 4096 /dev/zero > "$d/f"; ln -s "$d" "$S/out"; echo "$d"`)
	t.Cleanup(func() { m.sh(t, `rm -rf `+shq(victim)) })
	for _, c := range []struct{ what, doc, errno string }{
		{"directory symlink leading out of /dev/shm", `{"name":"shmout","location":"cpu","bytes":4096,"shm":"` + S + `/out/f"}`, eACCES},
		{"file smaller than bytes", `{"name":"shmbig","location":"cpu","bytes":"1MiB","shm":"` + S + `/kv"}`, ""},
		// The contract is silent on the errno (the daemon says EINVAL; a
		// missing segment file is ENOENT): any failure passes.
		{"missing file", `{"name":"shmmiss","location":"cpu","bytes":4096,"shm":"` + S + `/nope"}`, ""},
		{"outside the allowed roots", `{"name":"shmetc","location":"cpu","bytes":4096,"shm":"/etc/passwd"}`, eACCES},
		{"relative path", `{"name":"shmrel","location":"cpu","bytes":4096,"shm":"kv"}`, eINVAL},
	} {
		before := m.ls(t, "memory")
		r := m.run(t, `echo '`+c.doc+`' > "$M/memory/register"`)
		if r.code == 0 || (c.errno != "" && !strings.Contains(r.stderr, c.errno)) {
			t.Errorf("shm %s: %s\nwant failure %q", c.what, r, c.errno)
		} else {
			t.Logf("shm %s: %s", c.what, strings.TrimSpace(r.stderr))
		}
		if after := m.ls(t, "memory"); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Errorf("shm %s: ls memory changed: %v -> %v", c.what, before, after)
			if c.what == "directory symlink leading out of /dev/shm" {
				// Show the consequence: a write to the region lands in
				// the file outside the allowed roots.
				m.sh(t, `printf 'ESCAPED' | dd of="$M/memory/shmout/data" conv=notrunc status=none`)
				t.Errorf("the file outside the allowed roots now starts with %q", m.ok(t, `head -c 7 `+shq(victim+"/f")))
				m.sh(t, `rmdir "$M/memory/shmout"`)
			}
		}
	}
}

// T returns the test's ext4 scratch directory.
func T(m *mount, t *testing.T) string {
	d, _ := m.scratchDirs(t)
	return d
}

// testCloneConcurrent: shells reading clone at the same time each get a
// batch of their own.
func testCloneConcurrent(t *testing.T, m *mount) {
	out := m.ok(t, `for i in $(seq 20); do cat "$M/ctl/batches/clone" > "$T/c$i" & done; wait; cat "$T"/c*`)
	ids := strings.Fields(out)
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("batch %s handed out twice", id)
		}
		seen[id] = true
	}
	if len(ids) != 20 {
		t.Errorf("20 concurrent clones returned %d ids: %v", len(ids), ids)
	}
	listed := m.ls(t, "ctl/batches")
	for _, id := range ids {
		if !contains(listed, id) {
			t.Errorf("batch %s not in ls ctl/batches", id)
		}
	}
	m.ok(t, `for id in `+strings.Join(ids, " ")+`; do rmdir "$M/ctl/batches/$id"; done`)
}

// testSplitDocument: one document written in pieces through one open
// file (several write(2) calls), also when a forked child that inherited
// the descriptor exits (its close flushes an incomplete document) before
// the last piece.
func testSplitDocument(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 8K /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "split", p, "read")
	r := m.register(t, "split", "8KiB")
	n := m.clone(t)
	m.ok(t, fmt.Sprintf(`B="$M/ctl/batches/%[1]s"
{ echo -n '{"op":"read",'; echo -n '"target":"%[2]s","requests":['; echo -n '{"memory":"%[3]s","offset":0,'; echo '"target_offset":0,"length":4096}]}'; } > "$B/submit"
{ printf '{"op":"read","target":"%[2]s",'; /bin/true; printf '"requests":[{"memory":"%[3]s","offset":4096,"target_offset":4096,"length":4096}]}'; } > "$B/submit"`, n, seg, r))
	if c := m.taskCount(t, n); c != 2 {
		t.Errorf("two split documents made %d tasks, want 2", c)
	}
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "completed" {
		t.Errorf("batch %s", st)
	}
	m.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" "$T/f"`, r))
}

// testConcurrentSubmits: shells submitting to one batch at the same time
// each get their own group; no task is lost or shared.
func testConcurrentSubmits(t *testing.T, m *mount) {
	p := strings.TrimSpace(m.ok(t, `head -c 64K /dev/urandom > "$T/f"; echo "$T/f"`))
	seg := m.openSegment(t, "csub", p, "read")
	r := m.register(t, "csub", "64KiB")
	n := m.clone(t)
	m.ok(t, fmt.Sprintf(`for i in $(seq 0 15); do
  echo '{"op":"read","target":"%s","requests":[{"memory":"%s","offset":'$((i*4096))',"target_offset":'$((i*4096))',"length":4096}]}' > "$M/ctl/batches/%s/submit" &
done; wait`, seg, r, n))
	if c := m.taskCount(t, n); c != 16 {
		t.Errorf("16 concurrent submits made %d tasks", c)
	}
	s := m.readJSON(t, "ctl/batches/"+n+"/status")
	subs, _ := s["submissions"].([]any)
	firsts := map[float64]bool{}
	for _, x := range subs {
		tr, _ := x.(map[string]any)["tasks"].(map[string]any)
		if tr["count"] != 1.0 || firsts[tr["first"].(float64)] {
			t.Errorf("submission task ranges overlap or are wrong: %v", subs)
			break
		}
		firsts[tr["first"].(float64)] = true
	}
	m.ctl(t, n, "seal")
	if st := m.waitBatch(t, n); st != "completed" {
		t.Errorf("batch %s", st)
	}
	m.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" "$T/f"`, r))
}

// testStaleHandles: a descriptor opened on an object that was removed
// never reaches a new object of the same name.
func testStaleHandles(t *testing.T, m *mount) {
	name := uniq("stale")
	n := m.clone(t)
	out := m.run(t, fmt.Sprintf(`set -u
echo '{"name":"%[1]s","location":"cpu","bytes":4096}' > "$M/memory/register"
exec 3<> "$M/memory/%[1]s/data"
exec 4> "$M/ctl/batches/%[2]s/submit"
rmdir "$M/memory/%[1]s" "$M/ctl/batches/%[2]s"
echo '{"name":"%[1]s","location":"cpu","bytes":4096}' > "$M/memory/register"
printf 'OLD' >&3 && echo "data: write through the old handle succeeded"
echo '{"op":"read","target":"x","requests":[{"memory":"%[1]s","length":1}]}' >&4 && echo "submit: write through the freed batch's handle succeeded"
head -c 3 "$M/memory/%[1]s/data" | od -An -c
rmdir "$M/memory/%[1]s"`, name, n))
	t.Logf("%s", out)
	if strings.Contains(out.stdout, "succeeded") {
		t.Errorf("a stale handle still worked:\n%s", out)
	}
	if strings.Contains(out.stdout, "O   L   D") {
		t.Errorf("a write through the old data handle reached the new region")
	}
	if !strings.Contains(out.stderr, eNOENT) {
		t.Errorf("stale handles: want %s, got:\n%s", eNOENT, out.stderr)
	}
}

// testFileModes: owner-only modes (0700 directories, 0400 read-only,
// 0200 write-only, 0600 data), and opens against the mode are refused
// even for root (EACCES; the daemon's documented choice).
func testFileModes(t *testing.T, m *mount) {
	r := m.register(t, "modes", 4096)
	n := m.clone(t)
	got := m.ok(t, fmt.Sprintf(`cd "$M"; stat -c '%%n %%a' . version stats metrics README error memory memory/register memory/%[1]s memory/%[1]s/info memory/%[1]s/data segments/open ctl/batches ctl/batches/clone ctl/batches/%[2]s/submit ctl/batches/%[2]s/ctl ctl/batches/%[2]s/state ctl/batches/%[2]s/wait`, r, n))
	want := fmt.Sprintf(`. 700
version 400
stats 400
metrics 400
README 400
error 400
memory 700
memory/register 200
memory/%[1]s 700
memory/%[1]s/info 400
memory/%[1]s/data 600
segments/open 200
ctl/batches 700
ctl/batches/clone 400
ctl/batches/%[2]s/submit 200
ctl/batches/%[2]s/ctl 200
ctl/batches/%[2]s/state 400
ctl/batches/%[2]s/wait 400
`, r, n)
	if got != want {
		t.Errorf("modes:\n%s\nwant:\n%s", got, want)
	}
	for _, c := range []string{`echo x > "$M/version"`, `echo x > "$M/ctl/batches/` + n + `/state"`, `cat "$M/memory/register"`, `cat "$M/ctl/batches/` + n + `/submit"`} {
		if r := m.run(t, c); r.code == 0 || !strings.Contains(r.stderr, eACCES) {
			t.Errorf("%s: %s\nwant %s", c, r, eACCES)
		}
	}
}
