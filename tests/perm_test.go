// perm_test.go: a mount shared with other users (allow_other) gives each
// caller its own rights and nothing more. User nobody (setpriv) cannot
// reach root's files through segments or shm registrations, nor root's
// regions, batches or the engine; it can use what it owns, and those
// transfers move the right bytes. chmod, chown and utime are EPERM.

package tests

import (
	"fmt"
	"os"
	"strings"
	"testing"
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
