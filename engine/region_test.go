package engine_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestRegisterMemory(t *testing.T) {
	e := newEngine(t, nil, &refTransport{})
	_, err := e.RegisterMemory(0)
	wantKind(t, err, engine.KindInvalid)
	r := register(t, e, 5000)
	if r.BaseAddress()%4096 != 0 || r.Len() != 5000 || r.Location() != engine.LocationCPU {
		t.Fatalf("region %#x len %d", r.BaseAddress(), r.Len())
	}
	if !bytes.Equal(regionBytes(t, r), make([]byte, 5000)) {
		t.Fatal("new region not zeroed")
	}
	_, err = r.WriteAt([]byte("xy"), 4999)
	wantKind(t, err, engine.KindRange)
	if n, _ := r.ReadAt(make([]byte, 10), 4995); n != 5 {
		t.Fatalf("short ReadAt at the end returned %d", n)
	}
	if got := e.Regions(); len(got) != 1 || got[0] != r {
		t.Fatal("Regions")
	}
	if err := e.Unregister(r); err != nil {
		t.Fatal(err)
	}
	_, err = r.ReadAt(make([]byte, 1), 0)
	wantKind(t, err, engine.KindNotFound)
}

// TestSharedFileRegion: a /dev/shm file mapped MAP_SHARED shares its bytes
// with another process, in both directions, and transfers use it.
func TestSharedFileRegion(t *testing.T) {
	// A directory of its own in /dev/shm: parallel runs never share names.
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	shm := dir + "/shared"
	os.WriteFile(shm, make([]byte, 8192), 0o600)
	srcDir := t.TempDir()
	e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = []string{"/dev/shm", srcDir} }, &refTransport{})
	_, err = e.RegisterSharedFile(dir+"/missing", 4096)
	wantKind(t, err, engine.KindNotFound)
	// A directory symlink under an allowed root must not lead out of it.
	victim := t.TempDir()
	os.WriteFile(victim+"/f", make([]byte, 4096), 0o600)
	link := dir + "/link"
	os.Symlink(victim, link)
	_, err = e.RegisterSharedFile(link+"/f", 4096)
	wantKind(t, err, engine.KindPermission)
	_, err = e.RegisterSharedFile(shm, 16384)
	wantKind(t, err, engine.KindInvalid) // never extends the file
	_, err = e.RegisterSharedFile("/etc/hostname", 1)
	wantKind(t, err, engine.KindPermission)
	r, err := e.RegisterSharedFile(shm, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if r.SharedPath() != shm {
		t.Fatal("shared path")
	}
	// Another process writes the file; the region sees it.
	if out, err := exec.Command("bash", "-c", "printf hello | dd of="+shm+" conv=notrunc status=none").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	got := make([]byte, 5)
	r.ReadAt(got, 0)
	if string(got) != "hello" {
		t.Fatalf("region sees %q", got)
	}
	// A transfer into the region is visible to another process.
	path, data := randomFile(t, srcDir, "src", 8192)
	seg := openSeg(t, e, path, engine.PermRead)
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: 8192}}, time.Second); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sha256sum", shm).Output()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if !strings.HasPrefix(string(out), hex.EncodeToString(sum[:])) {
		t.Fatalf("another process sees different bytes: %s", out)
	}
}
