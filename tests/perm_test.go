// perm_test.go: a mount shared with other users (allow_other) gives each
// caller its own rights and nothing more. User nobody (setpriv) cannot
// reach root's files through segments or shm registrations, nor root's
// regions, batches or the engine; it can use what it owns, and those
// transfers move the right bytes. chmod, chown and utime are EPERM.

package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/orbitefs/orbitefs/internal/cred"
)

// asNobody prefixes a command to run it as user nobody, group nogroup,
// with no supplementary groups.
const asNobody = "setpriv --reuid=nobody --regid=nogroup --clear-groups "

func TestCallerPermissions(t *testing.T) {
	// "/" as a root, explicitly allowed: only the caller's own rights
	// stand between nobody and root's files.
	m := startDaemon(t, daemonOpts{config: `
[mount]
allow_other = true
allowed_roots = ["/"]
allow_filesystem_root = true
`})
	// A sticky, world-writable directory every user can reach: a refusal
	// comes from the file's own mode, never from a directory on the way.
	D, err := os.MkdirTemp("/tmp", "orbitefs-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(D) })
	if err := os.Chmod(D, 0o1777); err != nil {
		t.Fatal(err)
	}
	m.ok(t, fmt.Sprintf(`D=%q
head -c 8K /dev/urandom > "$D/secret"; chmod 600 "$D/secret"
head -c 8K /dev/zero > "$D/target"; chmod 600 "$D/target"; sha256sum < "$D/target" > "$D/target.sum"
head -c 8K /dev/urandom > "$D/mine"; head -c 8K /dev/zero > "$D/out"
chown nobody:nogroup "$D/mine" "$D/out"; chmod 600 "$D/mine" "$D/out"
head -c 4K /dev/urandom > "$D/group"; chown root:4242 "$D/group"; chmod 640 "$D/group"`, D))

	// Root's objects.
	rbuf := m.register(t, "rootbuf", "8KiB")
	m.ok(t, fmt.Sprintf(`cat %q/secret > "$M/memory/%s/data"`, D, rbuf))
	rseg := m.openSegment(t, "rootseg", D+"/secret", "read")
	rbt := m.clone(t)

	nobody := func(script string) shResult {
		t.Helper()
		return m.run(t, asNobody+"bash -c "+shq("D="+D+"; "+script))
	}
	refused := func(what, script, errText, errFile, logged string) {
		t.Helper()
		r := nobody(script)
		if r.code == 0 || !strings.Contains(r.stderr, errText) {
			t.Errorf("as nobody, %s: %s\nwant %q", what, r, errText)
		}
		if errFile != "" {
			if got := m.line(t, `cat "$M/error"`); !strings.Contains(got, errFile) {
				t.Errorf("as nobody, %s: /error = %q, want it to contain %q", what, got, errFile)
			}
		}
		if logged != "" && !strings.Contains(m.logText(), logged) {
			t.Errorf("as nobody, %s: the daemon log lacks %q", what, logged)
		}
	}

	// Files nobody may not open, whatever the allowed roots say.
	openDoc := func(name, path, perm string) string {
		return fmt.Sprintf(`echo '{"name":"%s","uri":"file://%s","permission":"%s"}' > "$M/segments/open"`, name, path, perm)
	}
	before := m.ls(t, "segments")
	refused("open root's 0600 file for reading", openDoc(uniq("steal"), D+"/secret", "read"), eACCES,
		"open "+D+"/secret: permission denied", "open "+D+"/secret: permission denied")
	refused("open root's 0600 file for writing", openDoc(uniq("clobber"), D+"/target", "write"), eACCES, "open "+D+"/target: permission denied", "")
	refused("open root's 0600 file read-write", openDoc(uniq("clobber"), D+"/target", "read_write"), eACCES, "", "")
	refused("open /etc/shadow", openDoc(uniq("shadow"), "/etc/shadow", "read"), eACCES, "open /etc/shadow: permission denied", "")
	refused("open /etc/shadow through a symlink", `ln -sf /etc/shadow "$D/sh"; `+openDoc(uniq("shadow"), D+"/sh", "read"), eACCES, "", "")
	refused("register root's 0600 file as shm",
		`echo '{"name":"`+uniq("shmsteal")+`","location":"cpu","bytes":4096,"shm":"'"$D"'/secret"}' > "$M/memory/register"`, eACCES,
		"open "+D+"/secret: permission denied", "")
	refused("open a file of a group it is not in", openDoc(uniq("grp"), D+"/group", "read"), eACCES, "open "+D+"/group: permission denied", "")
	if after := m.ls(t, "segments"); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("refused opens changed ls segments: %v -> %v", before, after)
	}
	// Supplementary groups count (the daemon reads them from /proc):
	// in group 4242, nobody may open that file for reading, not writing.
	grp := uniq("grp")
	inGroup := "setpriv --reuid=nobody --regid=nogroup --groups=4242 "
	if r := m.run(t, inGroup+"bash -c "+shq(openDoc(grp, D+"/group", "read"))); r.code != 0 {
		t.Errorf("as nobody in group 4242, open a 0640 file of group 4242 for reading: %s", r)
	}
	m.sh(t, `rmdir "$M/segments/`+grp+`"`)
	if r := m.run(t, inGroup+"bash -c "+shq(openDoc(uniq("grp"), D+"/group", "write"))); r.code == 0 || !strings.Contains(r.stderr, eACCES) {
		t.Errorf("as nobody in group 4242, open a 0640 file of group 4242 for writing: %s\nwant %q", r, eACCES)
	}
	m.ok(t, `sha256sum -c --status "`+D+`/target.sum" < "`+D+`/target"`)

	// The engine is the daemon's user's.
	refused("close the engine", `echo close > "$M/ctl/engine"`, eACCES, "", "")
	refused("close the requester", `echo close_requester > "$M/ctl/engine"`, eACCES, "", "")

	// Root's region and batch.
	for _, c := range []struct{ what, script string }{
		{"read root's region", `cat "$M/memory/` + rbuf + `/data"`},
		{"write root's region", `echo x > "$M/memory/` + rbuf + `/data"`},
		{"read root's region info", `cat "$M/memory/` + rbuf + `/info"`},
		{"rmdir root's region", `rmdir "$M/memory/` + rbuf + `"`},
		{"read root's segment info", `cat "$M/segments/` + rseg + `/info"`},
		{"rmdir root's segment", `rmdir "$M/segments/` + rseg + `"`},
		{"read root's batch status", `cat "$M/ctl/batches/` + rbt + `/status"`},
		{"seal root's batch", `echo seal > "$M/ctl/batches/` + rbt + `/ctl"`},
		{"submit to root's batch", `echo '{"op":"read","target":"` + rseg + `","requests":[{"memory":"` + rbuf + `","length":4096}]}' > "$M/ctl/batches/` + rbt + `/submit"`},
		{"rmdir root's batch", `rmdir "$M/ctl/batches/` + rbt + `"`},
	} {
		refused(c.what, c.script, eACCES, "", "")
	}
	if st := m.line(t, `jq -r '.sealed' "$M/ctl/batches/`+rbt+`/status"`); st != "false" {
		t.Errorf("root's batch sealed = %s after nobody's refused seal", st)
	}

	// Nobody's own region, segments and batch: usable, and its files are
	// nobody's, 0600 / 0700, not the whole world's.
	nbuf, nseg, nout := uniq("nbbuf"), uniq("nbseg"), uniq("nbout")
	r := nobody(fmt.Sprintf(`set -e
echo '{"name":"%[1]s","location":"cpu","bytes":"8KiB"}' > "$M/memory/register"
%[2]s
%[3]s
N=$(cat "$M/ctl/batches/clone")
echo '{"op":"read","target":"%[4]s","requests":[{"memory":"%[1]s","length":8192}]}' > "$M/ctl/batches/$N/submit"
echo seal > "$M/ctl/batches/$N/ctl"
[ "$(cat "$M/ctl/batches/$N/wait")" = completed ]
cmp "$M/memory/%[1]s/data" "$D/mine"
N2=$(cat "$M/ctl/batches/clone")
echo '{"op":"write","target":"%[5]s","requests":[{"memory":"%[1]s","length":8192}]}' > "$M/ctl/batches/$N2/submit"
echo seal > "$M/ctl/batches/$N2/ctl"
[ "$(cat "$M/ctl/batches/$N2/wait")" = completed ]
cmp "$D/out" "$D/mine"
rmdir "$M/ctl/batches/$N" "$M/ctl/batches/$N2"
echo $N`, nbuf, openDoc(nseg, D+"/mine", "read"), openDoc(nout, D+"/out", "write"), nseg, nout))
	if r.code != 0 {
		t.Fatalf("as nobody, a transfer between nobody's own file and region: %s", r)
	}
	t.Cleanup(func() {
		m.sh(t, fmt.Sprintf(`rmdir "$M/segments/%s" "$M/segments/%s" "$M/memory/%s"`, nseg, nout, nbuf))
	})
	for _, c := range []struct{ path, want string }{
		{"memory/" + nbuf, "700 nobody nogroup"},
		{"memory/" + nbuf + "/data", "600 nobody nogroup"},
		{"memory/" + nbuf + "/info", "400 nobody nogroup"},
		{"segments/" + nseg, "700 nobody nogroup"},
		{"memory/" + rbuf + "/data", "600 root root"},
		{"ctl/batches/" + rbt + "/submit", "200 root root"},
		{"ctl/batches/" + rbt + "/ctl", "200 root root"},
		{"ctl/engine", "200 root root"},
	} {
		if got := m.line(t, `stat -c '%a %U %G' "$M/`+c.path+`"`); got != c.want {
			t.Errorf("stat %s = %q, want %q", c.path, got, c.want)
		}
	}

	// A submission may name only the caller's own segment and memory,
	// in a batch or a transaction.
	rbase := m.line(t, `jq -r .base_address "$M/memory/`+rbuf+`/info"`)
	for _, c := range []struct{ what, doc string }{
		{"read root's segment into nobody's region", `{"op":"read","target":"` + rseg + `","requests":[{"memory":"` + nbuf + `","length":4096}]}`},
		{"write root's region to nobody's file", `{"op":"write","target":"` + nout + `","requests":[{"memory":"` + rbuf + `","length":4096}]}`},
		{"write root's region, by address, to nobody's file", `{"op":"write","target":"` + nout + `","requests":[{"address":` + rbase + `,"length":4096}]}`},
	} {
		refused(c.what+" (submit)", `N=$(cat "$M/ctl/batches/clone"); echo '`+c.doc+`' > "$M/ctl/batches/$N/submit"`, eACCES, "", "")
		refused(c.what+" (txn)", `exec 3<>"$M/ctl/batches/txn"; echo '`+c.doc+`' >&3`, eACCES, "uid 65534", "")
	}
	m.ok(t, `cmp "`+D+`/out" "`+D+`/mine"`)

	// Root sees everything: nobody's region reads as the file it holds.
	m.ok(t, fmt.Sprintf(`cmp "$M/memory/%s/data" %q/mine`, nbuf, D))

	// The engine still runs for everyone.
	if out := m.line(t, asNobody+`cat "$M/version"`); !strings.HasPrefix(out, "orbitefs") {
		t.Errorf("version as nobody after the refusals: %q", out)
	}
}

// TestSetattrRefused: mode, owner and times of mount files are fixed;
// changing them is EPERM, not a silent success. The truncate that
// `echo x > file` sends still works. (touch -c: plain touch opens the file
// for writing first and reports that open's error.)
func TestSetattrRefused(t *testing.T) {
	const ePERM = "Operation not permitted"
	m := startDaemon(t, daemonOpts{})
	buf := m.register(t, "attr", "4KiB")
	for _, p := range []string{"version", "ctl/engine", "memory/register", "memory", "memory/" + buf, "memory/" + buf + "/data"} {
		for _, cmd := range []string{"chmod 666", "chown nobody", "chgrp nogroup", "touch -c", "touch -c -d 2001-01-01"} {
			r := m.run(t, cmd+` "$M/`+p+`"`)
			if r.code == 0 || !strings.Contains(r.stderr, ePERM) {
				t.Errorf("%s %s: %s\nwant %q", cmd, p, r, ePERM)
			}
		}
	}
	if got := m.line(t, `stat -c '%a %U' "$M/memory/`+buf+`/data"`); got != "600 root" {
		t.Errorf("data after the refused changes: %q, want 600 root", got)
	}
	m.ok(t, `echo hello > "$M/memory/`+buf+`/data"; head -c 6 "$M/memory/`+buf+`/data" | grep -qx hello`)
}

// TestCallerMagicLinks: a caller's path never goes through the daemon's
// own /proc. Resolved in the daemon, /proc/self/fd/N is the daemon's
// descriptor N: once root opened a segment on a 0644 file inside a 0700
// directory, nobody read that file through /proc/self/fd/N (the file's
// own mode allowed it, and the descriptor skipped the directory nobody
// may not search), with the default allowed roots.
func TestCallerMagicLinks(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: "[mount]\nallow_other = true\n"})
	D, err := os.MkdirTemp("/tmp", "orbitefs-magic-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(D) })
	if err := os.Chmod(D, 0o1777); err != nil {
		t.Fatal(err)
	}
	m.ok(t, fmt.Sprintf(`D=%q; mkdir -m 700 "$D/priv"; echo TOPSECRET > "$D/priv/secret"; chmod 644 "$D/priv/secret"`, D))
	m.openSegment(t, "rootseg", D+"/priv/secret", "read")
	pid := m.cmd.Process.Pid
	fd := ""
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); l == D+"/priv/secret" {
			fd = e.Name()
		}
	}
	if fd == "" {
		t.Fatalf("the daemon holds no descriptor of %s/priv/secret", D)
	}
	nb := uniq("nb")
	if r := m.run(t, asNobody+"bash -c "+shq(`echo '{"name":"`+nb+`","location":"cpu","bytes":4096}' > "$M/memory/register"`)); r.code != 0 {
		t.Fatalf("as nobody, register: %s", r)
	}
	if r := m.run(t, asNobody+"cat "+D+"/priv/secret"); r.code == 0 {
		t.Fatalf("nobody reads %s/priv/secret directly: the test's premise is wrong", D)
	}
	m.ok(t, fmt.Sprintf(`ln -s /proc/self/fd/%s %q/link`, fd, D))
	for _, path := range []string{
		"/proc/self/fd/" + fd,
		"/dev/fd/" + fd,
		"/proc/thread-self/fd/" + fd,
		fmt.Sprintf("/proc/%d/fd/%s", pid, fd),
		fmt.Sprintf("/proc/%d/root%s/priv/secret", pid, D),
		D + "/link",
	} {
		before := m.ls(t, "segments")
		seg := uniq("steal")
		r := m.run(t, asNobody+"bash -c "+shq(fmt.Sprintf(`echo '{"name":"%s","uri":"file://%s","permission":"read"}' > "$M/segments/open"`, seg, path)))
		if r.code == 0 || !strings.Contains(r.stderr, eACCES) {
			t.Errorf("as nobody, open %s: %s\nwant %q", path, r, eACCES)
			m.run(t, asNobody+"bash -c "+shq(fmt.Sprintf(`(echo '{"op":"read","target":"%s","requests":[{"memory":"%s","length":10}]}' >&3; cat <&3 >/dev/null) 3<>"$M/ctl/batches/txn"; head -c 9 "$M/memory/%s/data" >&2`, seg, nb, nb)))
			continue
		}
		if after := m.ls(t, "segments"); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Errorf("as nobody, the refused open of %s changed ls segments: %v -> %v", path, before, after)
		}
		r = m.run(t, asNobody+"bash -c "+shq(fmt.Sprintf(`echo '{"name":"%s","location":"cpu","bytes":4096,"shm":"%s"}' > "$M/memory/register"`, uniq("shm"), path)))
		if r.code == 0 || !strings.Contains(r.stderr, eACCES) {
			t.Errorf("as nobody, register shm %s: %s\nwant %q", path, r, eACCES)
		}
	}
	if !strings.Contains(m.logText(), "magic link") {
		t.Errorf("the daemon log does not say why the opens were refused (a /proc magic link)")
	}
}

// TestErrorPerCaller: /error is each caller's own. With allow_other it
// was one text for the whole mount: nobody read root's last error, paths
// included, and a refused stranger's rmdir of root's batch replaced
// the batch's own error text.
func TestErrorPerCaller(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: "[mount]\nallow_other = true\n"})
	const other = "setpriv --reuid=4321 --regid=4321 --clear-groups "
	as := func(who, script string) shResult {
		return m.run(t, who+"bash -c "+shq(script))
	}
	rootMissing := "/tmp/" + uniq("root-private-name")
	if r := m.run(t, `echo '{"name":"x","uri":"file://`+rootMissing+`","permission":"read"}' > "$M/segments/open"`); r.code == 0 {
		t.Fatalf("open of a missing file succeeded: %s", r)
	}
	if got := m.line(t, `cat "$M/error"`); !strings.Contains(got, rootMissing) {
		t.Fatalf("root's /error = %q, want root's failure naming %s", got, rootMissing)
	}
	if r := as(asNobody, `cat "$M/error"`); r.code != 0 || r.stdout != "" {
		t.Errorf("nobody reads /error after only root failed: %s\nwant it empty", r)
	}
	nobodyMissing := "/tmp/" + uniq("nobody-private-name")
	as(asNobody, `echo '{"name":"x","uri":"file://`+nobodyMissing+`","permission":"read"}' > "$M/segments/open"`)
	if r := as(asNobody, `cat "$M/error"`); !strings.Contains(r.stdout, nobodyMissing) || strings.Contains(r.stdout, rootMissing) {
		t.Errorf("nobody's /error after its own failure: %s\nwant its own text only (%s)", r, nobodyMissing)
	}
	if r := as(other, `cat "$M/error"`); r.code != 0 || r.stdout != "" {
		t.Errorf("uid 4321 reads /error after nobody and root failed: %s\nwant it empty", r)
	}
	// Root, privileged, reads the last failure of anyone.
	if got := m.line(t, `cat "$M/error"`); !strings.Contains(got, nobodyMissing) {
		t.Errorf("root's /error = %q, want the last failure of any caller (nobody's, naming %s)", got, nobodyMissing)
	}
	// A refused write to root's batch goes to the writer's /error and
	// leaves the batch's own error file alone.
	bt := m.clone(t)
	// (rmdir reaches the daemon: /ctl/batches is writable by all.)
	if r := as(asNobody, `rmdir "$M/ctl/batches/`+bt+`"`); r.code == 0 || !strings.Contains(r.stderr, eACCES) {
		t.Fatalf("nobody removes root's batch: %s", r)
	}
	if got := m.line(t, `cat "$M/ctl/batches/`+bt+`/error"`); got != "" {
		t.Errorf("root's batch error file after nobody's refused rmdir: %q, want it empty", got)
	}
	if r := as(asNobody, `cat "$M/error"`); !strings.Contains(r.stdout, "batches/"+bt+" belongs to uid 0") {
		t.Errorf("nobody's /error after its refused rmdir: %s\nwant the refusal", r)
	}
}

// TestBufferedDocumentSharePerUser: one user leaving documents
// unfinished on many descriptors holds at most its share of the
// mount-wide budget (mount.max_buffered_document_bytes_per_user). Without
// a share, nobody's unfinished documents held the whole budget and
// every other user's multi-write documents failed with EAGAIN until
// nobody closed its files.
func TestBufferedDocumentSharePerUser(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: `
[mount]
allow_other = true
max_buffered_document_bytes = "8MiB"
max_buffered_document_bytes_per_user = "4MiB"
`})
	chunk := []byte(`{"op":"read","target":"nosuch",` + strings.Repeat(" ", 1<<20-100))
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	})
	// hold opens the transaction file as u and leaves one unfinished
	// document on it: nil, or the write's error.
	hold := func(u cred.User) error {
		return cred.As(u, func() error {
			fd, err := syscall.Open(filepath.Join(m.dir, "ctl/batches/txn"), syscall.O_RDWR, 0)
			if err != nil {
				t.Fatalf("open txn as uid %d: %v", u.UID, err)
			}
			fds = append(fds, fd)
			if n, err := syscall.Write(fd, chunk); err != nil || n != len(chunk) {
				return fmt.Errorf("%d bytes, %w", n, err)
			}
			return nil
		})
	}
	nobody := cred.User{UID: 65534, GID: 65534}
	held := 0
	var refused error
	for i := 0; i < 16 && refused == nil; i++ {
		if refused = hold(nobody); refused == nil {
			held++
		}
	}
	if held != 4 || !errors.Is(refused, syscall.EAGAIN) {
		t.Fatalf("nobody held %d unfinished 1 MiB documents, then %v; want 4 (its 4 MiB share), then EAGAIN", held, refused)
	}
	if r := m.run(t, asNobody+`cat "$M/error"`); !strings.Contains(r.stdout, "uid 65534") || !strings.Contains(r.stdout, "mount.max_buffered_document_bytes_per_user") {
		t.Errorf("nobody's /error after the refusal: %q, want its uid and the key named", r.stdout)
	}
	// The rest of the budget is everyone else's.
	if err := hold(cred.User{UID: 4321, GID: 4321}); err != nil {
		t.Errorf("uid 4321's unfinished document while nobody holds its share: %v", err)
	}
	if err := hold(cred.User{}); err != nil {
		t.Errorf("root's unfinished document while nobody holds its share: %v", err)
	}
}

// TestUserShare: one user holds at most mount.max_user_share of each
// engine-wide object limit. Without shares nobody cloned all 1024
// batches (engine.max_allocated_batches) and every other user's clone
// failed with EAGAIN; the same held for segments and registered bytes.
func TestUserShare(t *testing.T) {
	m := startDaemon(t, daemonOpts{config: `
[mount]
allow_other = true
[engine]
max_allocated_batches = 8
max_file_segments = 8
max_registered_bytes = "1MiB"
`})
	const other = "setpriv --reuid=4321 --regid=4321 --clear-groups "
	// count runs step as who until it fails (at most 10 times): how
	// many succeeded, and the failure.
	count := func(who, step string) (int, shResult) {
		r := m.run(t, who+"bash -c "+shq(`n=0; while [ $n -lt 10 ] && `+step+`; do n=$((n+1)); done; echo $n`))
		n, _ := strconv.Atoi(strings.TrimSpace(r.stdout))
		return n, r
	}
	clone := `N=$(cat "$M/ctl/batches/clone")`
	if n, r := count(asNobody, clone); n != 4 || !strings.Contains(r.stderr, "Resource temporarily unavailable") {
		t.Errorf("nobody cloned %d batches of 8: %s\nwant 4 (its half), then EAGAIN", n, r)
	}
	if r := m.run(t, asNobody+`cat "$M/error"`); !strings.Contains(r.stdout, "mount.max_user_share") || !strings.Contains(r.stdout, "engine.max_allocated_batches") {
		t.Errorf("nobody's /error after the refused clone: %q, want both keys named", r.stdout)
	}
	if n, _ := count(other, clone); n != 4 {
		t.Errorf("uid 4321 cloned %d batches while nobody holds its 4, want 4", n)
	}
	// Registered bytes: half of 1 MiB each.
	reg := func(name, size string) string {
		return `echo '{"name":"` + name + `'$n'","location":"cpu","bytes":"` + size + `"}' > "$M/memory/register"`
	}
	if n, r := count(asNobody, reg(uniq("nb"), "256KiB")); n != 2 || !strings.Contains(r.stderr, "Resource temporarily unavailable") {
		t.Errorf("nobody registered %d regions of 256 KiB under a 1 MiB limit: %s\nwant 2, then EAGAIN", n, r)
	}
	if n, _ := count(other, reg(uniq("o"), "256KiB")); n != 2 {
		t.Errorf("uid 4321 registered %d regions of 256 KiB while nobody holds its half, want 2", n)
	}
	// Segments: memory segments of its own memory, half of 8.
	name := uniq("nbseg")
	mem := m.ls(t, "memory")
	var nbmem string
	for _, x := range mem {
		if strings.HasPrefix(x, "nb") {
			nbmem = x
		}
	}
	seg := `echo '{"name":"` + name + `'$n'","uri":"mem://` + nbmem + `","permission":"read"}' > "$M/segments/open"`
	if n, r := count(asNobody, seg); n != 4 || !strings.Contains(r.stderr, "Resource temporarily unavailable") {
		t.Errorf("nobody opened %d segments of 8: %s\nwant 4, then EAGAIN", n, r)
	}
	// Root has no share (memory segments count for a user's share, not
	// against engine.max_file_segments: nothing else bounds root's).
	if n, r := count("", `echo '{"name":"rootseg'$n'","uri":"mem://`+nbmem+`","permission":"read"}' > "$M/segments/open"`); n != 10 {
		t.Errorf("root opened %d memory segments with nobody at its share, want all 10: %s", n, r)
	}
}
