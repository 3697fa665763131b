package control_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// newService builds a Service over a real engine with the io_uring
// transport, confined to t.TempDir().
func newService(t *testing.T, mountDir string) (*control.Service, string) {
	t.Helper()
	dir := t.TempDir()
	s, _ := serviceOver(t, dir, func(o *control.Options) {
		o.OwnMount = func(p string) bool { return mountDir != "" && strings.HasPrefix(p, mountDir+"/") }
	})
	return s, dir
}

// serviceOver builds a Service over a fresh engine confined to dir; mut
// adjusts the options.
func serviceOver(t *testing.T, dir string, mut func(*control.Options)) (*control.Service, *engine.Engine) {
	t.Helper()
	cfg := config.DefaultEngine()
	cfg.AllowedRoots = []string{dir}
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	o := control.Options{Version: "test", DefaultBatchCapacity: 8, MaxDocumentBytes: 4096, CloseTimeout: time.Second}
	mut(&o)
	s := control.New(e, o)
	t.Cleanup(func() { s.Shutdown(time.Second) })
	return s, e
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno, text string) {
	t.Helper()
	if got := control.Errno(err); got != want || !strings.Contains(fmt.Sprint(err), text) {
		t.Errorf("%s: %v (errno %v), want %v containing %q", what, err, got, want, text)
	}
}

func TestServiceWalkthrough(t *testing.T) {
	s, dir := newService(t, "")
	data := make([]byte, 1<<20)
	rand.Read(data)
	path := filepath.Join(dir, "cache.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(nil, []byte(`{"name":"buf","location":"cpu","bytes":"1MiB"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.OpenSegment(nil, []byte(`{"name":"cache","uri":"file://`+path+`","permission":"read_write"}`)); err != nil {
		t.Fatal(err)
	}
	bt, err := s.Clone(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(nil, bt, []byte(`{"op":"read","target":"cache","requests":[{"memory":"buf","offset":0,"target_offset":0,"length":1048576}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Ctl(nil, bt, "seal\n"); err != nil {
		t.Fatal(err)
	}
	word, err := s.Wait(context.Background(), bt)
	if err != nil || string(word) != "completed\n" {
		t.Fatalf("wait: %q, %v", word, err)
	}
	got := make([]byte, len(data))
	if n, err := s.ReadMemory(s.Memory("buf"), got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("memory differs from the file (n=%d, err=%v)", n, err)
	}
	var task struct {
		Transferred uint64 `json:"transferred_bytes"`
		State       string `json:"state"`
	}
	b, err := s.Task(bt, 0)
	if err != nil || json.Unmarshal(b, &task) != nil || task.Transferred != 1<<20 || task.State != "completed" {
		t.Fatalf("task 0: %s, %v", b, err)
	}
	var st control.StatusJSON
	b, _ = s.Status(bt)
	if err := json.Unmarshal(b, &st); err != nil || st.State != "completed" || st.Submissions[0].Target != "cache" ||
		st.Submissions[0].CompletedBytes != 1<<20 || st.Tasks.Completed != 1 {
		t.Fatalf("status: %s", b)
	}
	if err := s.FreeBatch(nil, bt.ID); err != nil {
		t.Fatal(err)
	}
	if s.Batch(bt.ID) != nil || len(s.Batches()) != 0 {
		t.Fatal("batch still listed after free")
	}
	if _, err := s.State(bt); control.Errno(err) != syscall.ENOENT {
		t.Errorf("state after free: %v", err)
	}
	if err := s.Unregister(nil, "buf"); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSegment(nil, "cache"); err != nil {
		t.Fatal(err)
	}
	if len(s.Memories()) != 0 || len(s.Segments()) != 0 {
		t.Fatal("objects still listed")
	}
}

func TestServiceErrors(t *testing.T) {
	s, dir := newService(t, "/mnt/ofs")
	path := filepath.Join(dir, "f")
	os.WriteFile(path, make([]byte, 8192), 0o644)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Register(nil, []byte(`{"name":"buf","location":"cpu","bytes":4096}`)))
	must(s.OpenSegment(nil, []byte(`{"name":"ro","uri":"file://`+path+`","permission":"read"}`)))
	bt, err := s.Clone(nil)
	must(err)

	// Creator errors go to /error.
	for _, c := range []struct {
		what string
		do   func() error
		want syscall.Errno
		text string
	}{
		{"duplicate memory", func() error { return s.Register(nil, []byte(`{"name":"buf","location":"cpu","bytes":1}`)) }, syscall.EEXIST, `memory "buf" already exists`},
		{"pinned", func() error { return s.Register(nil, []byte(`{"name":"p","location":"pinned","bytes":1}`)) }, syscall.EOPNOTSUPP, "no GPU backend"},
		{"shm inside the mount", func() error {
			return s.Register(nil, []byte(`{"name":"m","location":"cpu","bytes":1,"shm":"/mnt/ofs/memory/buf/data"}`))
		}, syscall.EACCES, "leads into the orbitefs mount"},
		{"segment outside roots", func() error {
			return s.OpenSegment(nil, []byte(`{"name":"pw","uri":"file:///etc/passwd","permission":"read"}`))
		}, syscall.EACCES, "not beneath an allowed root"},
		{"segment inside the mount", func() error {
			return s.OpenSegment(nil, []byte(`{"name":"me","uri":"file:///mnt/ofs/version","permission":"read"}`))
		}, syscall.EACCES, "leads into the orbitefs mount"},
		{"missing file", func() error {
			return s.OpenSegment(nil, []byte(`{"name":"nf","uri":"file://`+dir+`/nope","permission":"read"}`))
		}, syscall.ENOENT, "no such file"},
		{"duplicate segment", func() error {
			return s.OpenSegment(nil, []byte(`{"name":"ro","uri":"file://`+path+`","permission":"read"}`))
		}, syscall.EEXIST, "already exists"},
		{"unregister unknown", func() error { return s.Unregister(nil, "nope") }, syscall.ENOENT, `no memory "nope"`},
		{"close unknown", func() error { return s.CloseSegment(nil, "nope") }, syscall.ENOENT, `no segment "nope"`},
	} {
		err := c.do()
		wantErrno(t, c.what, err, c.want, c.text)
		if err == nil {
			continue
		}
		checkStamped(t, c.what+": /error", string(s.LastError(nil)), err.Error()+"\n")
	}
	if len(s.Memories()) != 1 || len(s.Segments()) != 1 {
		t.Errorf("failed creators left objects behind: %d memories, %d segments", len(s.Memories()), len(s.Segments()))
	}

	// Batch errors go to the batch's error text, never to /error.
	lastRoot := string(s.LastError(nil))
	sub := func(doc string) error { return s.Submit(nil, bt, []byte(doc)) }
	for _, c := range []struct {
		what string
		do   func() error
		want syscall.Errno
		text string
	}{
		{"bad json", func() error { return sub(`{"op":}`) }, syscall.EINVAL, "invalid JSON"},
		{"unknown field", func() error { return sub(`{"op":"read","target":"ro","requests":[{"memory":"buf","length":1}],"x":1}`) }, syscall.EINVAL, `unknown field "x"`},
		{"unknown segment", func() error { return sub(`{"op":"read","target":"nope","requests":[{"memory":"buf","length":1}]}`) }, syscall.ENOENT, `target "nope"`},
		{"unknown memory", func() error { return sub(`{"op":"read","target":"ro","requests":[{"memory":"nope","length":1}]}`) }, syscall.ENOENT, `requests[0]: memory "nope"`},
		{"memory range", func() error {
			return sub(`{"op":"read","target":"ro","requests":[{"memory":"buf","offset":4000,"length":100}]}`)
		}, syscall.ERANGE, "beyond its 4096 bytes"},
		{"element range", func() error {
			return sub(`{"op":"read","target":"ro","requests":[{"elements":[{"memory":"buf","length":1},{"memory":"buf","offset":4096,"length":1}]}]}`)
		}, syscall.ERANGE, "requests[0].elements[1]"},
		{"file range", func() error {
			return sub(`{"op":"read","target":"ro","requests":[{"memory":"buf","target_offset":8000,"length":200}]}`)
		}, syscall.ERANGE, "beyond file size 8192"},
		{"permission", func() error { return sub(`{"op":"write","target":"ro","requests":[{"memory":"buf","length":1}]}`) }, syscall.EACCES, "opened read"},
		{"too large", func() error {
			return sub(`{"op":"read","target":"ro","requests":[{"memory":"buf","length":1}]` + strings.Repeat(" ", 5000) + `}`)
		}, syscall.EFBIG, "max_document_bytes (4096)"},
		{"over capacity", func() error {
			return sub(`{"op":"read","target":"ro","requests":[` + strings.Repeat(`{"memory":"buf","length":1},`, 8) + `{"memory":"buf","length":1}]}`)
		}, syscall.EAGAIN, "do not fit"},
		{"bad ctl", func() error { return s.Ctl(nil, bt, "sael") }, syscall.EINVAL, `unknown ctl command "sael"`},
		{"cancel unknown task", func() error { return s.Ctl(nil, bt, "cancel 5") }, syscall.ENOENT, "task 5"},
	} {
		err := c.do()
		wantErrno(t, c.what, err, c.want, c.text)
		if err == nil {
			continue
		}
		checkStamped(t, c.what+": batch error", string(bt.Error()), err.Error()+"\n")
	}
	_, err = s.Wait(context.Background(), bt)
	wantErrno(t, "wait before seal", err, syscall.EINVAL, "not sealed")
	if got := string(s.LastError(nil)); got != lastRoot {
		t.Errorf("batch errors leaked into /error: %q", got)
	}
	if n := s.TaskCount(bt); n != 0 {
		t.Errorf("rejected submissions appended %d tasks", n)
	}
	// progress is accepted and changes nothing.
	if err := s.Ctl(nil, bt, "progress"); err != nil {
		t.Errorf("progress: %v", err)
	}
}

func TestServiceRegisterRace(t *testing.T) {
	s, _ := newService(t, "")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Register(nil, []byte(`{"name":"x","location":"cpu","bytes":4096}`))
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch control.Errno(err) {
		case 0:
			ok++
		case syscall.EEXIST:
		default:
			t.Errorf("unexpected %v", err)
		}
	}
	if ok != 1 || len(s.Memories()) != 1 {
		t.Errorf("%d registrations succeeded, %d listed; want 1", ok, len(s.Memories()))
	}
}

func TestServiceWaitInterruptAndShutdown(t *testing.T) {
	s, dir := newService(t, "")
	path := filepath.Join(dir, "f")
	os.WriteFile(path, make([]byte, 4096), 0o644)
	if err := s.OpenSegment(nil, []byte(`{"name":"f","uri":"file://`+path+`","permission":"read"}`)); err != nil {
		t.Fatal(err)
	}
	bt, _ := s.Clone(nil)
	if err := s.Ctl(nil, bt, "seal"); err != nil {
		t.Fatal(err)
	}
	// A sealed empty batch is terminal at once.
	if w, err := s.Wait(context.Background(), bt); err != nil || string(w) != "completed\n" {
		t.Fatalf("empty sealed batch: %q %v", w, err)
	}

	// A cancelled context never turns into a recorded error. (An
	// interrupted wait on a running batch is tested through the mount, in
	// fusefs, where a slow file keeps a transfer running.)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Wait(ctx, bt); err != nil && control.Errno(err) != syscall.EINTR {
		t.Errorf("cancelled wait: %v", err)
	}
	if len(bt.Error()) != 0 {
		t.Errorf("wait recorded %q", bt.Error())
	}

	// Shutdown refuses new work with ESHUTDOWN.
	if err := s.Shutdown(time.Second); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	_, err := s.Clone(nil)
	wantErrno(t, "clone after shutdown", err, syscall.ESHUTDOWN, "shutting down")
	err = s.Register(nil, []byte(`{"name":"late","location":"cpu","bytes":1}`))
	wantErrno(t, "register after shutdown", err, syscall.ESHUTDOWN, "shutting down")
	if err := s.Shutdown(time.Second); err != nil {
		t.Errorf("second shutdown: %v", err)
	}
}

// TestServiceRefusesOwnDevice: a file that turns out to live on the
// mount's own device is closed again and refused, whatever path led to it.
func TestServiceRefusesOwnDevice(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), make([]byte, 4096), 0o644)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	own := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	s, e := serviceOver(t, dir, func(o *control.Options) { o.OwnDevice = func() string { return own } })
	doc := fmt.Sprintf(`{"name":"seg","uri":"file://%s/f","permission":"read"}`, dir)
	wantErrno(t, "open on the own device", s.OpenSegment(nil, []byte(doc)), syscall.EACCES, "on the orbitefs mount itself")
	if st := e.Stats(); st.Segments != 0 {
		t.Fatalf("the refused segment stayed open in the engine: %d", st.Segments)
	}
	// Another device is fine.
	s2, _ := serviceOver(t, dir, func(o *control.Options) { o.OwnDevice = func() string { return "0:999999" } })
	if err := s2.OpenSegment(nil, []byte(doc)); err != nil {
		t.Fatalf("open on another device: %v", err)
	}
}

// checkStamped checks an error file's text: an RFC 3339 time of the last
// minute, a space, then want.
func checkStamped(t *testing.T, what, got, want string) {
	t.Helper()
	stamp, rest, ok := strings.Cut(got, " ")
	if !ok || rest != want {
		t.Errorf("%s = %q, want a time, a space and %q", what, got, want)
		return
	}
	at, err := time.Parse(time.RFC3339, stamp)
	if err != nil {
		t.Errorf("%s: the prefix %q is not an RFC 3339 time: %v", what, stamp, err)
		return
	}
	if d := time.Since(at); d < 0 || d > time.Minute {
		t.Errorf("%s: the time %s is %s away from now", what, stamp, d)
	}
}
