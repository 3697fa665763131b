package tests

import (
	"strings"
	"testing"
)

// TestCachedNamesVanishAtOnce: the kernel caches attributes and the
// mount's fixed names (fusefs/cache.go), which halved the FUSE requests
// of a batch round trip; names of objects are never cached, so a batch
// freed through ctl, whose path was just walked (and whose files' entries
// and attributes the kernel holds), is gone at once for stat, ls and open,
// and a memory name registered again after rmdir shows the new region.
func TestCachedNamesVanishAtOnce(t *testing.T) {
	m := startDaemon(t, daemonOpts{})
	out := m.ok(t, `
N=$(cat $M/ctl/batches/clone)
B=$M/ctl/batches/$N
stat $B $B/state $B/ctl $B/tasks >/dev/null   # warm every cache
cat $B/state
echo free > $B/ctl
for p in $B/state $B; do
	if stat $p >/dev/null 2>&1; then echo "stat $p after free succeeded"; fi
done
if cat $B/state 2>/dev/null; then echo "cat state after free succeeded"; fi
ls $M/ctl/batches | grep -qx "$N" && echo "ls still lists $N"
echo '{"name":"cached","location":"cpu","bytes":"4KiB"}' > $M/memory/register
stat -c %s $M/memory/cached/data
rmdir $M/memory/cached
if stat $M/memory/cached/data >/dev/null 2>&1; then echo "stat data after rmdir succeeded"; fi
echo '{"name":"cached","location":"cpu","bytes":"8KiB"}' > $M/memory/register
stat -c %s $M/memory/cached/data
rmdir $M/memory/cached
echo end
`)
	if want := "open\n4096\n8192\nend\n"; out != want {
		t.Fatalf("script printed %q, want %q", out, want)
	}
	if strings.Contains(out, "succeeded") {
		t.Fatal(out)
	}
}
