// callercopy_test.go: the caller copy as a script sees it: a small read or
// write of a tmpfs file reports transport "copy" and moves the right
// bytes; an explicit io_uring request keeps the ring; a small read of
// bytes a large write in the same batch is still writing waits for it.

package tests

import (
	"fmt"
	"strings"
	"testing"
)

func TestCallerCopy(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 1048576 /dev/urandom > "$S/f.bin"`)
	mem := m.register(t, "cc", 65536)
	seg := m.openSegment(t, "cc", S+"/f.bin", "read_write")

	// A 4 KiB read at file offset 8192 into memory offset 4096.
	n, st := m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","offset":4096,"target_offset":8192,"length":4096}]}`, seg, mem))
	if st != "completed" {
		t.Fatalf("read: state %s", st)
	}
	wantStr(t, "task", m.task(t, n, 0), "transport", "copy")
	m.ok(t, fmt.Sprintf(`cmp <(tail -c +4097 "$M/memory/%s/data" | head -c 4096) <(tail -c +8193 "$S/f.bin" | head -c 4096)`, mem))

	// A write of those bytes back at offset 0; the file's first 4 KiB
	// become its bytes 8192-12287.
	n, st = m.run1(t, fmt.Sprintf(`{"op":"write","target":"%s","requests":[{"memory":"%s","offset":4096,"target_offset":0,"length":4096}]}`, seg, mem))
	if st != "completed" {
		t.Fatalf("write: state %s", st)
	}
	wantStr(t, "task", m.task(t, n, 0), "transport", "copy")
	m.ok(t, `cmp <(head -c 4096 "$S/f.bin") <(tail -c +8193 "$S/f.bin" | head -c 4096)`)

	// Asking for io_uring keeps the ring.
	n, st = m.run1(t, fmt.Sprintf(`{"op":"read","target":"%s","requests":[{"memory":"%s","length":4096,"transport":"io_uring"}]}`, seg, mem))
	if st != "completed" {
		t.Fatalf("io_uring read: state %s", st)
	}
	wantStr(t, "task", m.task(t, n, 0), "transport", "io_uring")
	if c := m.line(t, `jq .caller_copies "$M/stats"`); c == "0" || c == "null" {
		t.Errorf("stats caller_copies = %s after two caller copies", c)
	}
}

// TestCallerCopyWaitsForOverlappingWrite: a script writes 64 MiB over a
// tmpfs file and, in the same batch, reads 4 KiB at its end. The read is
// small enough for the caller copy, but it overlaps the write still in
// flight, so it must wait for it and see the written bytes.
func TestCallerCopyWaitsForOverlappingWrite(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	_, S := m.scratchDirs(t)
	const size = 64 << 20
	big := m.register(t, "ccbig", size)
	small := m.register(t, "ccsmall", 4096)
	m.ok(t, fmt.Sprintf(`head -c %d /dev/zero | tr '\0' '\245' > "$S/pattern.bin"
head -c %d /dev/zero > "$S/f.bin"
dd if="$S/pattern.bin" of="$M/memory/%s/data" bs=4M conv=notrunc status=none`, size, size, big))
	seg := m.openSegment(t, "ccw", S+"/f.bin", "read_write")
	for round := 0; round < 3; round++ {
		m.ok(t, `head -c 67108864 /dev/zero > "$S/f.bin"`)
		n := m.clone(t)
		m.ok(t, fmt.Sprintf(`echo '{"op":"write","target":"%s","requests":[{"memory":"%s","length":%d}]}' > "$M/ctl/batches/%s/submit"
echo '{"op":"read","target":"%s","requests":[{"memory":"%s","target_offset":%d,"length":4096}]}' > "$M/ctl/batches/%s/submit"
echo seal > "$M/ctl/batches/%s/ctl"`, seg, big, size, n, seg, small, size-4096, n, n))
		if st := m.waitBatch(t, n); st != "completed" {
			t.Fatalf("round %d: state %s", round, st)
		}
		got := m.ok(t, fmt.Sprintf(`od -An -tx1 -v "$M/memory/%s/data" | tr -s ' \n' '\n' | sort -u | tr '\n' ' '`, small))
		if strings.TrimSpace(got) != "a5" {
			t.Fatalf("round %d: the 4 KiB read saw bytes %q, not the write's a5: it ran ahead of the write it overlaps", round, got)
		}
		m.sh(t, fmt.Sprintf(`rmdir "$M/ctl/batches/%s"`, n))
	}
}

// TestCallerCopyPastDeadline: a small write to a tmpfs file whose
// deadline has passed by dispatch ("deadline":"1ns") fails without
// touching the file, as it does on the ring: the caller copy must not
// run it late.
func TestCallerCopyPastDeadline(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	_, S := m.scratchDirs(t)
	m.ok(t, `head -c 65536 /dev/zero > "$S/f.bin"`)
	mem := m.register(t, "ccd", 65536)
	m.ok(t, fmt.Sprintf(`head -c 4096 /dev/zero | tr '\0' '\132' | dd of="$M/memory/%s/data" conv=notrunc status=none`, mem))
	seg := m.openSegment(t, "ccd", S+"/f.bin", "read_write")
	_, st := m.run1(t, fmt.Sprintf(`{"op":"write","target":"%s","deadline":"1ns","requests":[{"memory":"%s","length":4096}]}`, seg, mem))
	if st != "failed" {
		t.Fatalf("write past its deadline: state %s, want failed", st)
	}
	m.ok(t, `cmp "$S/f.bin" <(head -c 65536 /dev/zero)`)
}
