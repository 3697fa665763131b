package fusefs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/fusefs"
	"golang.org/x/sys/unix"
)

// needMount skips unless this process can mount FUSE filesystems; when
// ORBITEFS_REQUIRE (a comma-separated list, set by .ci/run) names fuse,
// it fails instead, so CI never passes with the mount tests skipped.
func needMount(t *testing.T) {
	t.Helper()
	missing := func(msg string) {
		t.Helper()
		for _, f := range strings.Split(os.Getenv("ORBITEFS_REQUIRE"), ",") {
			if strings.TrimSpace(f) == "fuse" {
				t.Fatalf("%s, and ORBITEFS_REQUIRE=%s requires fuse", msg, os.Getenv("ORBITEFS_REQUIRE"))
			}
		}
		t.Skip(msg)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing(fmt.Sprintf("needs /dev/fuse: %v", err))
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			missing("needs root, or fusermount3 (package fuse3)")
		}
	}
}

type testMount struct {
	dir  string // the mount point
	root string // an allowed root for files
	svc  *control.Service
	srv  *fusefs.Server
}

// mount serves a fresh Service at a temp dir; cleanup unmounts, lazily and
// with an abort as the last resort, so no test leaves a mount behind.
func mount(t *testing.T) *testMount {
	t.Helper()
	needMount(t)
	root := t.TempDir()
	dir, err := os.MkdirTemp("", "orbitefs-fusefs-test-")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.DefaultEngine()
	cfg.AllowedRoots = []string{root}
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	lg := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	svc := control.New(e, control.Options{Version: "test", DefaultBatchCapacity: 64, MaxDocumentBytes: 64 << 10,
		CloseTimeout: 500 * time.Millisecond, Logger: lg, OwnMount: fusefs.LeadsInto(dir)})
	srv, err := fusefs.Mount(dir, svc, fusefs.Options{MaxWrite: 1 << 20, Logger: lg})
	if err != nil {
		e.Close(time.Second)
		os.Remove(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Shutdown(time.Second)
		if err := srv.Unmount(time.Second); err != nil {
			t.Errorf("unmount: %v", err)
		}
		<-srv.Done()
		os.Remove(dir)
	})
	return &testMount{dir: dir, root: root, svc: svc, srv: srv}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (m *testMount) path(p string) string { return filepath.Join(m.dir, p) }

func (m *testMount) write(t *testing.T, p, s string) error {
	t.Helper()
	return os.WriteFile(m.path(p), []byte(s), 0)
}

func (m *testMount) mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := m.write(t, p, s); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
}

func (m *testMount) read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(m.path(p))
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if errnoOf(err) != want {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// setup registers buf (1 MiB), a 1 MiB file segment "cache", and returns
// the file's bytes.
func (m *testMount) setup(t *testing.T) []byte {
	t.Helper()
	data := make([]byte, 1<<20)
	rand.Read(data)
	f := filepath.Join(m.root, "cache.bin")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m.mustWrite(t, "memory/register", `{"name":"buf","location":"cpu","bytes":"1MiB"}`+"\n")
	m.mustWrite(t, "segments/open", `{"name":"cache","uri":"file://`+f+`","permission":"read_write"}`+"\n")
	return data
}

func (m *testMount) clone(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(m.read(t, "ctl/batches/clone"))
}

func names(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestWalkthrough(t *testing.T) {
	m := mount(t)
	data := m.setup(t)
	n := m.clone(t)
	b := "ctl/batches/" + n + "/"
	m.mustWrite(t, b+"submit", `{"op":"read","target":"cache","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":1048576}]}`+"\n")
	m.mustWrite(t, b+"ctl", "seal\n")
	if got := m.read(t, b+"wait"); got != "completed\n" {
		t.Fatalf("wait = %q", got)
	}
	got, err := os.ReadFile(m.path("memory/buf/data"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("data differs from the file (%d bytes, %v)", len(got), err)
	}
	var task control.TaskJSON
	if err := json.Unmarshal([]byte(m.read(t, b+"tasks/0")), &task); err != nil || task.TransferredBytes != 1<<20 {
		t.Fatalf("task 0: %+v %v", task, err)
	}
	if got := m.read(t, b+"state"); got != "completed\n" {
		t.Errorf("state = %q", got)
	}
	if err := os.Remove(m.path(b)); err != nil {
		t.Fatalf("rmdir batch: %v", err)
	}
	if _, err := os.Stat(m.path(b)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("batch dir after rmdir: %v", err)
	}
}

func TestLayoutAndModes(t *testing.T) {
	m := mount(t)
	m.setup(t)
	n := m.clone(t)
	m.mustWrite(t, "ctl/batches/"+n+"/submit", `{"op":"read","target":"cache","requests":[{"memory":"buf","length":4096},{"memory":"buf","offset":4096,"target_offset":4096,"length":4096}]}`)
	for dir, want := range map[string]string{
		"":                             "README ctl error memory metrics peers qos segments stats version",
		"peers":                        "credit notifications",
		"peers/credit":                 "activate connect deactivate disconnect issuer status update",
		"memory":                       "buf register",
		"memory/buf":                   "data info",
		"segments":                     "cache open",
		"segments/cache":               "info refresh",
		"ctl":                          "batches engine",
		"ctl/batches":                  n + " clone txn",
		"ctl/batches/" + n:             "ctl error state status submit tasks wait",
		"ctl/batches/" + n + "/tasks/": "0 1",
	} {
		if got := names(t, m.path(dir)); got != want {
			t.Errorf("ls /%s = %q, want %q", dir, got, want)
		}
	}
	for p, want := range map[string]fs.FileMode{
		"":                             fs.ModeDir | 0o700,
		"README":                       0o400,
		"error":                        0o400,
		"memory/register":              0o200,
		"memory/buf":                   fs.ModeDir | 0o700,
		"memory/buf/data":              0o600,
		"segments/open":                0o200,
		"segments/cache/refresh":       0o200,
		"ctl/batches/clone":            0o400,
		"ctl/batches/txn":              0o600,
		"ctl/engine":                   0o200,
		"ctl/batches/" + n + "/submit": 0o200,
		"ctl/batches/" + n + "/wait":   0o400,
		"peers":                        fs.ModeDir | 0o700,
		"peers/notifications":          0o400,
		"peers/credit":                 fs.ModeDir | 0o700,
		"peers/credit/status":          0o400,
		"peers/credit/issuer":          0o400,
		"peers/credit/activate":        0o200,
		"peers/credit/disconnect":      0o200,
	} {
		st, err := os.Stat(m.path(p))
		if err != nil {
			t.Errorf("stat %s: %v", p, err)
			continue
		}
		if st.Mode() != want {
			t.Errorf("mode of /%s = %v, want %v", p, st.Mode(), want)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != uint32(os.Geteuid()) {
			t.Errorf("/%s owned by %d", p, sys.Uid)
		}
	}
	if st, _ := os.Stat(m.path("memory/buf/data")); st.Size() != 1<<20 {
		t.Errorf("data size %d", st.Size())
	}
	if got := m.read(t, "version"); got != "orbitefs test\n" {
		t.Errorf("version = %q", got)
	}
	if got := m.read(t, "README"); got != control.Reference() {
		t.Errorf("README differs from control.Reference")
	}
	var st engine.Stats
	if err := json.Unmarshal([]byte(m.read(t, "stats")), &st); err != nil || st.Regions != 1 || st.Segments != 1 || st.Batches != 1 {
		t.Errorf("stats: %+v %v", st, err)
	}
	if !strings.Contains(m.read(t, "metrics"), "# TYPE orbitefs_batches gauge\norbitefs_batches 1\n") {
		t.Errorf("metrics lack the batch gauge")
	}
	// Read-only files refuse writers and write-only files refuse readers,
	// even for root.
	_, err := os.OpenFile(m.path("version"), os.O_WRONLY, 0)
	wantErrno(t, "open version for writing", err, syscall.EACCES)
	_, err = os.Open(m.path("memory/register"))
	wantErrno(t, "open register for reading", err, syscall.EACCES)
	// Nothing can be created.
	err = os.WriteFile(m.path("memory/new"), []byte("x"), 0o644)
	if err == nil {
		t.Errorf("creating a file in /memory succeeded")
	}
}

func TestWriteErrorsAndErrorFiles(t *testing.T) {
	m := mount(t)
	m.setup(t)
	n := m.clone(t)
	b := "ctl/batches/" + n + "/"
	for _, c := range []struct {
		file, doc string
		want      syscall.Errno
		errFile   string
		text      string
	}{
		{"memory/register", `{"name":"buf","location":"cpu","bytes":1}`, syscall.EEXIST, "error", `memory "buf" already exists`},
		{"memory/register", `{"name":"g","location":"cuda:0","bytes":1}`, syscall.EOPNOTSUPP, "error", "no GPU backend"},
		{"segments/open", `{"name":"pw","uri":"file:///etc/passwd","permission":"read"}`, syscall.EACCES, "error", "not beneath an allowed root"},
		{"segments/open", `{"name":"me","uri":"file://` + m.dir + `/version","permission":"read"}`, syscall.EACCES, "error", "leads into the orbitefs mount"},
		{b + "submit", `not json`, syscall.EINVAL, b + "error", "want a JSON object"},
		{b + "submit", `{"op":"read","target":"cache","requests":[{"memory":"buf","length":1}],"x":0}`, syscall.EINVAL, b + "error", `unknown field "x"`},
		{b + "submit", `{"op":"read","target":"nope","requests":[{"memory":"buf","length":1}]}`, syscall.ENOENT, b + "error", `target "nope"`},
		{b + "submit", `{"op":"read","target":"cache","requests":[{"memory":"buf","target_offset":1048575,"length":2}]}`, syscall.ERANGE, b + "error", "beyond file size"},
		{b + "submit", `{"op":"read","target":"cache","requests":[{"memory":"buf","length":1}]}` + strings.Repeat(" ", 70<<10), 0, "", ""},
		{b + "submit", `{"op":"read","target":"cache","requests":[{"memory":"buf","length":1}]` + strings.Repeat(" ", 70<<10) + `}`, syscall.EFBIG, b + "error", "max_document_bytes"},
		{b + "ctl", "sael\n", syscall.EINVAL, b + "error", `unknown ctl command "sael"`},
		{"memory/buf/data", strings.Repeat("x", 10), 0, "", ""},
	} {
		err := m.write(t, c.file, c.doc)
		if c.want == 0 {
			if err != nil {
				t.Errorf("write %s: %v", c.file, err)
			}
			continue
		}
		wantErrno(t, "write "+c.file+" "+c.doc[:min(len(c.doc), 60)], err, c.want)
		if got := m.read(t, c.errFile); !strings.Contains(got, c.text) {
			t.Errorf("%s = %q, want it to contain %q", c.errFile, got, c.text)
		}
	}
	// Writing past the end of a region fails whole.
	f, _ := os.OpenFile(m.path("memory/buf/data"), os.O_WRONLY, 0)
	_, err := f.WriteAt([]byte("xy"), 1<<20-1)
	wantErrno(t, "write across the end of data", err, syscall.ERANGE)
	f.Close()
	// Wait before seal.
	_, err = os.ReadFile(m.path(b + "wait"))
	wantErrno(t, "wait before seal", err, syscall.EINVAL)
	if got := m.read(t, b+"error"); !strings.Contains(got, "not sealed") {
		t.Errorf("error after wait before seal: %q", got)
	}
}

// TestDocumentAcrossWrites: one document in three writes is acted on by
// the third; one left incomplete fails close(2) and is recorded.
func TestDocumentAcrossWrites(t *testing.T) {
	m := mount(t)
	m.setup(t)
	n := m.clone(t)
	b := "ctl/batches/" + n + "/"
	f, err := os.OpenFile(m.path(b+"submit"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"op":"read","target":"cache","requests":[{"memory":"buf","length":4096}]}` + "\n"
	for i, part := range []string{doc[:10], doc[10:40], doc[40:]} {
		if _, err := f.WriteString(part); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if got := len(strings.Fields(names(t, m.path(b+"tasks")))); (i < 2 && got != 0) || (i == 2 && got != 1) {
			t.Fatalf("after part %d: %d tasks", i, got)
		}
	}
	if _, err := f.WriteString(`{"op":"read",`); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "close with an incomplete document", f.Close(), syscall.EINVAL)
	if got := m.read(t, b+"error"); !strings.Contains(got, "incomplete JSON document at close") {
		t.Errorf("error = %q", got)
	}
	// Truncation: to 0 is what > does; anything else is refused.
	if err := os.Truncate(m.path(b+"submit"), 0); err != nil {
		t.Errorf("truncate submit to 0: %v", err)
	}
	wantErrno(t, "truncate submit to 5", os.Truncate(m.path(b+"submit"), 5), syscall.EINVAL)
	if err := os.Truncate(m.path("memory/buf/data"), 1<<20); err != nil {
		t.Errorf("truncate data to its size: %v", err)
	}
}

// TestShellEcho checks what bash's builtin echo reports: the write error,
// and exit status 1. bash writes 4 KiB at a time, so the 5 KiB document
// arrives in two writes.
func TestShellEcho(t *testing.T) {
	m := mount(t)
	m.setup(t)
	n := m.clone(t)
	req := `{"memory":"buf","offset":0,"target_offset":0,"length":16,"transport":"io_uring"}`
	big := `{"op":"read","target":"cache","requests":[` + strings.Repeat(req+",", 59) + req + `]}`
	for _, c := range []struct {
		script, stderr string
		code           int
	}{
		{`echo '{"name":' > "$M/memory/register"`, "", 0}, // incomplete: only close sees it, and bash ignores close errors
		{`echo '{"name" 1}' > "$M/memory/register"`, "write error: Invalid argument", 1},
		{`echo '{"name":"p","location":"pinned","bytes":1}' > "$M/memory/register"`, "write error: Operation not supported", 1},
		{`echo seal now > "$M/ctl/batches/` + n + `/ctl"`, "write error: Invalid argument", 1},
		{`echo '` + big + `' > "$M/ctl/batches/` + n + `/submit" && cat "$M/ctl/batches/` + n + `/tasks/59" >/dev/null`, "", 0},
		{`/bin/echo '{"name":' > "$M/memory/register"`, "Invalid argument", 1},
	} {
		cmd := exec.Command("bash", "-c", c.script)
		cmd.Env = append(os.Environ(), "M="+m.dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("%.80s: exit %d, stderr %q; want exit %d, stderr containing %q", c.script, code, stderr.String(), c.code, c.stderr)
		}
	}
}

// waitTaskState polls a task's status file until its state is want
// (bounded, so a task that never gets there fails the test).
func (m *testMount) waitTaskState(t *testing.T, rel, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st struct {
			State string `json:"state"`
		}
		got := m.read(t, rel)
		if err := json.Unmarshal([]byte(got), &st); err != nil {
			t.Fatalf("%s is not JSON: %v: %q", rel, err, got)
		}
		if st.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: state %q after 10s, want %q", rel, st.State, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// slowFile is a file in a separate in-process FUSE mount whose reads
// block until release is closed: it keeps a transfer running.
type slowFile struct {
	gofs.Inode
	release chan struct{}
}

func (n *slowFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size = 0o644, 1<<20
	return 0
}

func (n *slowFile) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (n *slowFile) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	// Interrupts are ignored on purpose: io_uring may issue this read
	// inline on the submitting thread, and any signal that thread takes
	// (the test forks children) would otherwise fail the transfer.
	<-n.release
	return fuse.ReadResultData(make([]byte, len(dest))), 0
}

// slowSegment opens segment "slow" on a blocking file and returns the
// function that lets its reads finish.
func (m *testMount) slowSegment(t *testing.T) func() {
	t.Helper()
	dir := filepath.Join(m.root, "slowfs")
	os.Mkdir(dir, 0o755)
	root := &gofs.Inode{}
	sf := &slowFile{release: make(chan struct{})}
	srv, err := gofs.Mount(dir, root, &gofs.Options{
		MountOptions: fuse.MountOptions{DirectMountStrict: os.Geteuid() == 0, Name: "orbitefs-slow"},
		OnAdd: func(ctx context.Context) {
			root.AddChild("slow", root.NewPersistentInode(ctx, sf, gofs.StableAttr{}), false)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() { once.Do(func() { close(sf.release) }) }
	t.Cleanup(func() {
		release()
		if srv.Unmount() != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	m.mustWrite(t, "segments/open", `{"name":"slow","uri":"file://`+dir+`/slow","permission":"read"}`)
	return release
}

// TestBusyAndInterrupt: while a transfer runs, rmdir and free are EBUSY,
// data reads of loaned bytes are EBUSY, an interrupted wait returns
// promptly and changes nothing, and other batches are not held up.
func TestBusyAndInterrupt(t *testing.T) {
	m := mount(t)
	m.setup(t)
	release := m.slowSegment(t)
	n := m.clone(t)
	b := "ctl/batches/" + n + "/"
	m.mustWrite(t, b+"submit", `{"op":"read","target":"slow","requests":[{"memory":"buf","length":131072}]}`)
	m.mustWrite(t, b+"ctl", "seal")
	// "cancel 0" is EBUSY only once the task runs; queued, it would be
	// cancelled. Wait for the state, never for time.
	m.waitTaskState(t, b+"tasks/0", "running")

	wantErrno(t, "rmdir busy batch", os.Remove(m.path(b)), syscall.EBUSY)
	wantErrno(t, "free busy batch", m.write(t, b+"ctl", "free"), syscall.EBUSY)
	wantErrno(t, "cancel running task", m.write(t, b+"ctl", "cancel 0"), syscall.EBUSY)
	wantErrno(t, "rmdir loaned memory", os.Remove(m.path("memory/buf")), syscall.EBUSY)
	_, err := os.ReadFile(m.path("memory/buf/data"))
	wantErrno(t, "read loaned data", err, syscall.EBUSY)
	if got := m.read(t, "error"); !strings.Contains(got, "loaned to batches/"+n) {
		t.Errorf("/error = %q", got)
	}
	wantErrno(t, "rmdir draining segment", os.Remove(m.path("segments/slow")), syscall.ETIMEDOUT)

	// A signal ends a blocked wait promptly; the batch goes on.
	start := time.Now()
	out, err := exec.Command("timeout", "1", "cat", m.path(b+"wait")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 124 {
		t.Errorf("timeout 1 cat wait: %v %q", err, out)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("interrupted wait took %v", d)
	}
	if got := m.read(t, b+"state"); got != "open\n" {
		t.Errorf("state after an interrupted wait = %q", got)
	}

	// Other batches proceed while this one blocks.
	other := m.clone(t)
	ob := "ctl/batches/" + other + "/"
	m.mustWrite(t, "memory/register", `{"name":"b2","location":"cpu","bytes":4096}`)
	m.mustWrite(t, ob+"submit", `{"op":"read","target":"cache","requests":[{"memory":"b2","length":4096}]}`)
	m.mustWrite(t, ob+"ctl", "seal")
	waited := make(chan string)
	go func() {
		b, _ := os.ReadFile(m.path(b + "wait"))
		waited <- string(b)
	}()
	if got := m.read(t, ob+"wait"); got != "completed\n" {
		t.Errorf("other batch: %q", got)
	}
	select {
	case s := <-waited:
		t.Fatalf("wait returned %q before the slow read was released", s)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case s := <-waited:
		if s != "completed\n" {
			t.Errorf("slow batch: %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return after the read was released")
	}
	if err := os.Remove(m.path(b)); err != nil {
		t.Errorf("rmdir after completion: %v", err)
	}
	if err := os.Remove(m.path("segments/slow")); err != nil {
		t.Errorf("retry rmdir of the drained segment: %v", err)
	}
}

// TestStaleHandle: a descriptor opened on a removed region never reaches
// a new region registered under the same name.
func TestStaleHandle(t *testing.T) {
	m := mount(t)
	m.mustWrite(t, "memory/register", `{"name":"r","location":"cpu","bytes":4096}`)
	m.mustWrite(t, "memory/r/data", "old")
	f, err := os.OpenFile(m.path("memory/r/data"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(m.path("memory/r")); err != nil {
		t.Fatal(err)
	}
	m.mustWrite(t, "memory/register", `{"name":"r","location":"cpu","bytes":4096}`)
	_, err = f.WriteAt([]byte("new"), 0)
	wantErrno(t, "write through a stale descriptor", err, syscall.ENOENT)
	if got := m.read(t, "memory/r/data")[:3]; got != "\x00\x00\x00" {
		t.Errorf("new region got %q through the old descriptor", got)
	}
}

// TestUnmountBusy: Unmount with a file still open detaches lazily and
// leaves no mount behind once the file closes.
func TestUnmountBusy(t *testing.T) {
	m := mount(t)
	f, err := os.Open(m.path("version"))
	if err != nil {
		t.Fatal(err)
	}
	m.svc.Shutdown(time.Second)
	if err := m.srv.Unmount(200 * time.Millisecond); err != nil {
		t.Errorf("unmount: %v", err)
	}
	f.Close()
	select {
	case <-m.srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("still serving after the last file closed")
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(b), " "+m.dir+" ") {
		t.Errorf("mount still listed: %s", m.dir)
	}
	_ = fmt.Sprint()
}

// TestDeviceFromMountinfo: the server learns its mount's device from
// mountinfo (a stat of its own mount point would be a FUSE request to
// itself, which a SIGKILL at that moment turns into a process that cannot
// exit); it must equal what a client's stat sees.
func TestDeviceFromMountinfo(t *testing.T) {
	m := mount(t)
	var st syscall.Stat_t
	if err := syscall.Stat(m.dir, &st); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	if got := m.srv.Device(); got != want {
		t.Fatalf("Device() = %q, a stat of the mount point says %q", got, want)
	}
}
