package engine_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestParseFileURI(t *testing.T) {
	wd, _ := os.Getwd()
	cases := []struct {
		uri, want string
		bad       bool
	}{
		{"file:///tmp/cache.bin", "/tmp/cache.bin", false},
		{"file://rel/x.bin", filepath.Join(wd, "rel/x.bin"), false},
		{"file:///tmp/../etc/x", "/tmp/../etc/x", false}, // literal: open(2) resolves it
		{"file://rel/../x", wd + "/rel/../x", false},
		{"/tmp/x", "", true},
		{"http://x", "", true},
		{"file://", "", true},
		{"file:///", "", true},
		{"file:///a\x00b", "", true},
	}
	for _, c := range cases {
		got, err := engine.ParseFileURI(c.uri)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseFileURI(%q) = %q, %v; want %q bad=%v", c.uri, got, err, c.want, c.bad)
		}
	}
}

func TestOpenRules(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	secret, _ := randomFile(t, outside, "secret", 100)
	path, _ := randomFile(t, dir, "f", 100)
	os.Symlink(secret, filepath.Join(dir, "link-out"))
	os.Symlink("f", filepath.Join(dir, "link-in"))        // relative, stays inside
	os.Symlink(path, filepath.Join(dir, "link-absolute")) // absolute, target inside the root
	os.Symlink("/etc/passwd", filepath.Join(dir, "link-etc"))
	os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "link-relative-out"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink(outside, filepath.Join(dir, "sub", "dir-out")) // a directory link out
	e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = []string{dir} }, &refTransport{})

	cases := []struct {
		name string
		uri  string
		perm engine.Permission
		kind engine.Kind
	}{
		{"missing file", "file://" + dir + "/nope", engine.PermRead, engine.KindNotFound},
		{"directory", "file://" + dir + "/sub", engine.PermRead, engine.KindInvalid},
		{"outside roots", "file://" + secret, engine.PermRead, engine.KindPermission},
		{"dotdot escape", "file://" + dir + "/../" + filepath.Base(outside) + "/secret", engine.PermRead, engine.KindPermission},
		{"symlink out", "file://" + dir + "/link-out", engine.PermRead, engine.KindPermission},
		{"absolute symlink out", "file://" + dir + "/link-etc", engine.PermRead, engine.KindPermission},
		{"relative symlink out", "file://" + dir + "/link-relative-out", engine.PermRead, engine.KindPermission},
		{"through a directory link out", "file://" + dir + "/sub/dir-out/secret", engine.PermRead, engine.KindPermission},
		{"dotdot after a directory link", "file://" + dir + "/sub/dir-out/../" + filepath.Base(outside) + "/secret", engine.PermRead, engine.KindPermission},
		{"bad uri", "ftp://x", engine.PermRead, engine.KindInvalid},
		{"bad permission", "file://" + path, engine.Permission(0), engine.KindInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.OpenFileSegment(c.uri, c.perm)
			wantKind(t, err, c.kind)
		})
	}
	for _, name := range []string{"link-in", "link-absolute"} {
		s, err := e.OpenFileSegment("file://"+dir+"/"+name, engine.PermRead)
		if err != nil {
			t.Fatalf("%s: a symlink whose target stays beneath the root must open: %v", name, err)
		}
		if info, _ := e.FileSegmentInfo(s); info.Size != 100 {
			t.Fatalf("%s: opened %+v, want the 100-byte target", name, info)
		}
		e.CloseFileSegment(s, time.Second)
	}
	// Opening never creates or truncates.
	if _, err := os.Stat(filepath.Join(dir, "nope")); !os.IsNotExist(err) {
		t.Fatal("open created a file")
	}
	s := openSeg(t, e, path, engine.PermReadWrite)
	if fi, _ := os.Stat(path); fi.Size() != 100 {
		t.Fatal("open truncated the file")
	}
	e.CloseFileSegment(s, time.Second)

	// Relative URIs resolve in the working directory.
	t.Chdir(dir)
	rs, err := e.OpenFileSegment("file://f", engine.PermRead)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := e.FileSegmentInfo(rs)
	if info.Path != path || info.Offset != 0 || info.Size != 100 {
		t.Fatalf("relative open: %+v", info)
	}
}

func TestSharingAndLimits(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, func(c *config.Engine) { c.MaxFileSegments = 2 }, &refTransport{})
	a, _ := randomFile(t, dir, "a", 10)
	b, _ := randomFile(t, dir, "b", 10)
	c, _ := randomFile(t, dir, "c", 10)
	s1 := openSeg(t, e, a, engine.PermRead)
	s2 := openSeg(t, e, a, engine.PermRead) // shares the entry
	info, _ := e.FileSegmentInfo(s2)
	if info.Aliases != 2 {
		t.Fatalf("aliases %d, want 2", info.Aliases)
	}
	s3 := openSeg(t, e, b, engine.PermRead)
	_, err := e.OpenFileSegment("file://"+c, engine.PermRead)
	wantKind(t, err, engine.KindExhausted)
	if !strings.Contains(err.Error(), "max_file_segments (2)") {
		t.Fatalf("message %q does not name the limit", err)
	}
	if st := e.Stats(); st.Segments != 2 {
		t.Fatalf("segments %d", st.Segments)
	}
	// Closing one alias keeps the entry; closing both frees the slot.
	e.CloseFileSegment(s1, time.Second)
	_, err = e.OpenFileSegment("file://"+c, engine.PermRead)
	wantKind(t, err, engine.KindExhausted)
	_, err = e.FileSegmentInfo(s1)
	wantKind(t, err, engine.KindNotFound)
	e.CloseFileSegment(s2, time.Second)
	s4 := openSeg(t, e, c, engine.PermRead)
	e.CloseFileSegment(s3, time.Second)
	e.CloseFileSegment(s4, time.Second)

	if _, err := engine.New(func() config.Engine { c := config.DefaultEngine(); c.MaxFileSegments = 4097; return c }()); err == nil ||
		!strings.Contains(err.Error(), "max_file_segments (4097) must be in [1, 4096]") {
		t.Fatalf("max_file_segments above 4096 accepted or badly reported: %v", err)
	}
}

// TestInfoCacheAndRefresh: info serves the cached size within
// file_info_ttl, re-reads it after, and RefreshFileSegment forces it.
func TestInfoCacheAndRefresh(t *testing.T) {
	// A TTL no test outlives: the cached size holds however slow the
	// machine, and only RefreshFileSegment updates it.
	e := newEngine(t, func(c *config.Engine) { c.FileInfoTTL = config.Duration(time.Hour) }, &refTransport{})
	path, _ := randomFile(t, t.TempDir(), "f", 100)
	s := openSeg(t, e, path, engine.PermRead)
	os.WriteFile(path, make([]byte, 300), 0o644)
	if info, _ := e.FileSegmentInfo(s); info.Size != 100 {
		t.Fatalf("size %d within the TTL, want the cached 100", info.Size)
	}
	if err := e.RefreshFileSegment(s); err != nil {
		t.Fatal(err)
	}
	if info, _ := e.FileSegmentInfo(s); info.Size != 300 {
		t.Fatalf("size %d after a refresh, want 300", info.Size)
	}
	// A TTL every wait outlives: info re-reads the size by itself.
	e = newEngine(t, func(c *config.Engine) { c.FileInfoTTL = config.Duration(time.Nanosecond) }, &refTransport{})
	s = openSeg(t, e, path, engine.PermRead)
	os.WriteFile(path, make([]byte, 500), 0o644)
	time.Sleep(time.Millisecond)
	if info, _ := e.FileSegmentInfo(s); info.Size != 500 {
		t.Fatalf("size %d after the TTL, want 500", info.Size)
	}
}

// TestRenameUnlink: the handle stays bound to the inode.
func TestRenameUnlink(t *testing.T) {
	for fsName, dir := range filesystems(t) {
		t.Run(fsName, func(t *testing.T) {
			e := newEngine(t, nil)
			path, orig := randomFile(t, dir, "f", 8192)
			s := openSeg(t, e, path, engine.PermReadWrite)
			os.Rename(path, path+".moved")
			randomFile(t, dir, "f", 8192) // a different file under the old name
			os.Remove(path + ".moved")
			r := register(t, e, 8192)
			if _, err := e.SubmitAndWait(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 8192}}, ioTimeout); err != nil {
				if !haveIOUring {
					wantKind(t, err, engine.KindUnavailable)
					return
				}
				t.Fatal(err)
			}
			if !bytes.Equal(regionBytes(t, r), orig) {
				t.Fatal("read did not come from the original inode")
			}
			// A write lands in the unlinked inode, not the new file.
			now, _ := os.ReadFile(path)
			r.WriteAt(bytes.Repeat([]byte{1}, 4096), 0)
			if _, err := e.SubmitAndWait(engine.OpWrite, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, ioTimeout); err != nil {
				t.Fatal(err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, now) {
				t.Fatal("write went to the file now at the old path")
			}
			if info, _ := e.FileSegmentInfo(s); info.Path != path || info.Size != 8192 {
				t.Fatalf("info %+v", info)
			}
		})
	}
}

// TestCloseWithTimeout: close drains admitted users; a timeout closes
// every alias to new work and a later retry succeeds.
func TestCloseWithTimeout(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 8192)
	s := openSeg(t, e, path, engine.PermRead)
	alias := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 8192)
	b, _ := e.AllocateBatch(2)
	if _, err := b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := e.CloseFileSegment(s, 50*time.Millisecond)
	wantKind(t, err, engine.KindTimeout)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("close took %v with a 50ms timeout", d)
	}
	for range 2 {
		_, err = b.Submit(engine.OpRead, alias, []engine.Request{{Address: r.BaseAddress() + 4096, Length: 4096}}, nil, time.Second)
		wantKind(t, err, engine.KindBusy)
	}
	// A refused group never counted as a user, so none is taken back.
	if info, _ := e.FileSegmentInfo(alias); info.Users != 1 {
		t.Fatalf("users %d after two refused submits, want the 1 admitted", info.Users)
	}
	_, err = e.OpenFileSegment("file://"+path, engine.PermRead)
	wantKind(t, err, engine.KindBusy)
	ref.release()
	b.Seal()
	if st, _ := b.Wait(5 * time.Second); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
	if err := e.CloseFileSegment(s, time.Second); err != nil {
		t.Fatalf("retry: %v", err)
	}
	_, err = e.FileSegmentInfo(s)
	wantKind(t, err, engine.KindNotFound)
	// The timed-out close left every alias closed to new work, even now
	// that the retry succeeded (spec: close every alias).
	_, err = e.SubmitAndWait(engine.OpRead, alias, []engine.Request{{Address: r.BaseAddress(), Length: 10}}, time.Second)
	wantKind(t, err, engine.KindBusy)
	if err := e.CloseFileSegment(alias, time.Second); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Segments != 0 {
		t.Fatalf("segments %d after closing every alias", st.Segments)
	}
	// With every alias closed, the name opens afresh.
	again := openSeg(t, e, path, engine.PermRead)
	if _, err := e.SubmitAndWait(engine.OpRead, again, []engine.Request{{Address: r.BaseAddress(), Length: 10}}, time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestTimedOutHandleStaysClosed: a close that timed out is not undone by
// a later successful close of another alias; the handle whose close timed
// out cannot submit again, and its retry succeeds.
func TestTimedOutHandleStaysClosed(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 8192)
	s := openSeg(t, e, path, engine.PermRead)
	alias := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 8192)
	b, _ := e.AllocateBatch(1)
	if _, err := b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.CloseFileSegment(s, 20*time.Millisecond), engine.KindTimeout)
	ref.release()
	b.Seal()
	if st, _ := b.Wait(5 * time.Second); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
	if err := e.CloseFileSegment(alias, time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := e.SubmitAndWait(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 10}}, time.Second)
	wantKind(t, err, engine.KindBusy)
	if err := e.CloseFileSegment(s, time.Second); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if st := e.Stats(); st.Segments != 0 {
		t.Fatalf("segments %d after closing every alias", st.Segments)
	}
}

// TestWithoutFileTransport is the noiouring build's behaviour: segments
// open and inspect, READ/WRITE report unavailable before payload I/O.
func TestWithoutFileTransport(t *testing.T) {
	cfg := config.DefaultEngine()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(time.Second)
	path, orig := randomFile(t, t.TempDir(), "f", 4096)
	s := openSeg(t, e, path, engine.PermReadWrite)
	if info, err := e.FileSegmentInfo(s); err != nil || info.Size != 4096 {
		t.Fatalf("info %+v %v", info, err)
	}
	r := register(t, e, 4096)
	for _, op := range []engine.Op{engine.OpRead, engine.OpWrite} {
		_, err := e.SubmitAndWait(op, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, time.Second)
		wantKind(t, err, engine.KindUnavailable)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
		t.Fatal("file changed")
	}
}

// TestLiteralPath: the URI's path is what open(2) resolves, not a
// lexically cleaned spelling. dir/link -> real/sub, so dir/link/../f is
// real/f (100 bytes), while cleaning would give dir/f (200 bytes). The
// same holds under allowed roots.
func TestLiteralPath(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "real", "sub"), 0o755)
	randomFile(t, filepath.Join(dir, "real"), "f", 100)
	randomFile(t, dir, "f", 200)
	if err := os.Symlink("real/sub", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for name, roots := range map[string][]string{"no roots": nil, "roots": {dir}} {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = roots }, &refTransport{})
			s, err := e.OpenFileSegment("file://"+dir+"/link/../f", engine.PermRead)
			if err != nil {
				t.Fatal(err)
			}
			if info, _ := e.FileSegmentInfo(s); info.Size != 100 || info.Path != dir+"/link/../f" {
				t.Fatalf("opened %+v: want real/f (100 bytes) under its literal path", info)
			}
		})
	}
}

// TestConcurrentCloses: closing one handle twice at once, while another
// alias of the file stays open, closes the handle and leaves the entry
// open to the other alias. A second close that set draining after the
// first had reopened the entry used to leave it draining for good: the
// other alias refused every submission and new opens of the path failed.
func TestConcurrentCloses(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	keep := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 4096)
	for i := range 200 {
		s := openSeg(t, e, path, engine.PermRead)
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.CloseFileSegment(s, time.Second)
			}()
		}
		wg.Wait()
		if _, err := e.SubmitAndWait(engine.OpRead, keep, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, time.Second); err != nil {
			t.Fatalf("round %d: the other alias after a double close: %v", i, err)
		}
	}
}

// TestConcurrentClosesHeld is TestConcurrentCloses made deterministic:
// both closes of one handle are held after closing the entry to new work
// (the HoldCloses hook) and released one at a time, while another alias
// stays open. The first to finish must not reopen the entry under the
// close still in progress; the last must reopen it.
func TestConcurrentClosesHeld(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	keep := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 4096)
	s := openSeg(t, e, path, engine.PermRead)
	held := make(chan int, 2)
	release := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var n atomic.Int32
	e.HoldCloses(func() {
		k := int(n.Add(1)) - 1
		held <- k
		<-release[k]
	})
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- e.CloseFileSegment(s, time.Second) }()
	}
	<-held
	<-held
	read := func() error {
		_, err := e.SubmitAndWait(engine.OpRead, keep, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, time.Second)
		return err
	}
	if read() == nil {
		t.Error("the other alias took work while both closes were in progress")
	}
	close(release[0])
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if read() == nil {
		t.Error("the first close to finish reopened the entry under the close still in progress")
	}
	close(release[1])
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if err := read(); err != nil {
		t.Errorf("after both closes the other alias refuses work: %v", err)
	}
}

// TestRangeCheckFollowsSize: reads are range-checked against the size the
// engine last saw, with no fstat per submission (segment.go, sizeCheck).
// A file that grows is read at once; one that shrinks fails the first
// read past its new end with the exact count (KindRange) and refuses the
// next at submit; a write past the new end is refused at submit and never
// extends the file; SizeNow refuses a read past the end at submit.
func TestRangeCheckFollowsSize(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, nil)
	r := register(t, e, 1<<20)
	for fs, dir := range filesystems(t) {
		t.Run(fs, func(t *testing.T) {
			path, orig := randomFile(t, dir, "f", 256<<10)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			defer e.CloseFileSegment(seg, ioTimeout)
			// submit runs one request in a batch of its own: the error of
			// Submit, and the task's outcome when it was accepted.
			submit := func(op engine.Op, off, n uint64, opts engine.SubmitOptions) (error, engine.TaskStatus) {
				t.Helper()
				b, err := e.AllocateBatch(1)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free()
				opts.Timeout = ioTimeout
				if _, err := b.SubmitWith(op, seg, []engine.Request{{Address: r.BaseAddress(), TargetOffset: off, Length: n}}, nil, opts); err != nil {
					return err, engine.TaskStatus{}
				}
				b.Seal()
				if _, err := b.Wait(ioTimeout); err != nil {
					t.Fatal(err)
				}
				ts, err := b.TaskStatus(0)
				if err != nil {
					t.Fatal(err)
				}
				return nil, ts
			}

			// Grown behind the engine's back: the read past the old end
			// fstats and goes through.
			more := make([]byte, 64<<10)
			for i := range more {
				more[i] = byte(i*13 + 1)
			}
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(more); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err, ts := submit(engine.OpRead, 256<<10, 64<<10, engine.SubmitOptions{}); err != nil || ts.State != engine.TaskCompleted {
				t.Fatalf("read of the grown part: %v, %+v", err, ts)
			}
			if got := regionBytes(t, r)[:64<<10]; !bytes.Equal(got, more) {
				t.Fatal("the grown part read back wrong")
			}

			// Shrunk to 100000 bytes: the engine has not seen it, so the
			// first read past the end is the I/O's to meet.
			if err := os.Truncate(path, 100000); err != nil {
				t.Fatal(err)
			}
			err, ts := submit(engine.OpRead, 65536, 65536, engine.SubmitOptions{})
			if err != nil {
				t.Fatalf("first read past the new end refused at submit (%v): was there an fstat per submission?", err)
			}
			if ts.State != engine.TaskFailed || engine.KindOf(ts.Err) != engine.KindRange || ts.Transferred != 100000-65536 {
				t.Fatalf("first read past the new end: %v, %d bytes, %v; want failed, KindRange, %d bytes", ts.State, ts.Transferred, ts.Err, 100000-65536)
			}
			if got := regionBytes(t, r)[:100000-65536]; !bytes.Equal(got, orig[65536:100000]) {
				t.Fatal("the prefix before end of file read back wrong")
			}
			// That read saw the end: the next is refused at submit.
			err, _ = submit(engine.OpRead, 65536, 65536, engine.SubmitOptions{})
			wantKind(t, err, engine.KindRange)
			if !strings.Contains(err.Error(), "beyond file size 100000") {
				t.Errorf("second read past the end: %v, want the size named", err)
			}
			// Reads inside the new size still work.
			if err, ts := submit(engine.OpRead, 0, 100000, engine.SubmitOptions{}); err != nil || ts.State != engine.TaskCompleted {
				t.Fatalf("read inside the new size: %v, %+v", err, ts)
			}

			// Shrunk again: a write past the new end is refused at
			// submit and the file keeps its size.
			if err := os.Truncate(path, 50000); err != nil {
				t.Fatal(err)
			}
			err, _ = submit(engine.OpWrite, 49152, 4096, engine.SubmitOptions{})
			wantKind(t, err, engine.KindRange)
			if st, err := os.Stat(path); err != nil || st.Size() != 50000 {
				t.Fatalf("after the refused write: size %d, %v; want 50000", st.Size(), err)
			}
			// With SizeNow a read is checked against an fstat too: a
			// shrink the engine has not seen is refused at submit.
			if err := os.Truncate(path, 40000); err != nil {
				t.Fatal(err)
			}
			err, _ = submit(engine.OpRead, 36864, 4096, engine.SubmitOptions{SizeNow: true})
			wantKind(t, err, engine.KindRange)
		})
	}
}
