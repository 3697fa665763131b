package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
)

// txnService is a Service over a real engine with memory "buf" (1 MiB)
// and segment "cache" (a 1 MiB file of dir, on tmpfs when dir is).
func txnService(t testing.TB, dir string) (*control.Service, *engine.Engine, []byte) {
	t.Helper()
	s, e := serviceOverTB(t, dir)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
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
	return s, e, data
}

const txnDoc = `{"op":"read","target":"cache","requests":[{"memory":"buf","offset":4096,"target_offset":4096,"length":4096}]}`

// txnStatus reads a transaction's status (one read, as a Go client does).
func txnStatus(t testing.TB, x *control.Txn, off int64) control.StatusJSON {
	t.Helper()
	b, err := x.Read(context.Background(), make([]byte, 64<<10), off)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var st control.StatusJSON
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("status %q: %v", b, err)
	}
	return st
}

// TestTxnLifecycle: a transaction runs, reads back terminal, a second
// one on the same handle frees the first, close frees the last; a
// document split over writes runs on the write completing it.
func TestTxnLifecycle(t *testing.T) {
	s, e, data := txnService(t, t.TempDir())
	x := s.NewTxn(nil)
	if err := x.Write([]byte(txnDoc[:20]), 0); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Batches()); n != 0 {
		t.Fatalf("%d batches after half a document", n)
	}
	if err := x.Write([]byte(txnDoc[20:]), 20); err != nil {
		t.Fatal(err)
	}
	st := txnStatus(t, x, int64(len(txnDoc)))
	if st.State != "completed" || st.Tasks.Completed != 1 {
		t.Fatalf("status %+v", st)
	}
	first := st.ID
	// The next document may start at any offset (where the read ended).
	if err := x.Write([]byte(txnDoc), 5000); err != nil {
		t.Fatal(err)
	}
	if s.Batch(first) != nil {
		t.Errorf("batch %d still live after the next transaction", first)
	}
	// A lone newline after a document, before its status was read (echo
	// sends it alone when the document filled its 4 KiB write), is not
	// a second document.
	if err := x.Write([]byte("\n"), 5000+int64(len(txnDoc))); err != nil {
		t.Errorf("newline after the document: %v", err)
	}
	if st := txnStatus(t, x, 0); st.State != "completed" || st.ID == first {
		t.Errorf("second transaction: %+v", st)
	}
	x.Close()
	x.Close()
	if n := len(s.Batches()); n != 0 || e.Stats().Batches != 0 {
		t.Errorf("after close: %d batches in the table, %d in the engine", n, e.Stats().Batches)
	}
	got := make([]byte, 4096)
	if _, err := s.ReadMemory(s.Memory("buf"), got, 4096); err != nil || !bytes.Equal(got, data[4096:8192]) {
		t.Errorf("memory differs from the file: %v", err)
	}
}

// TestTxnAppend: an O_APPEND handle takes a document's chunks whatever
// offsets the kernel gives them.
func TestTxnAppend(t *testing.T) {
	s, _, _ := txnService(t, t.TempDir())
	x := s.NewTxn(nil)
	x.Append()
	if err := x.Write([]byte(txnDoc[:30]), 0); err != nil {
		t.Fatal(err)
	}
	if err := x.Write([]byte(txnDoc[30:]), 0); err != nil {
		t.Fatal(err)
	}
	if st := txnStatus(t, x, 0); st.State != "completed" {
		t.Errorf("status %+v", st)
	}
	x.Close()
}

// TestTxnRefusals: read before write, bad documents, a second document
// before the first was read; each changes nothing and leaves no batch.
func TestTxnRefusals(t *testing.T) {
	s, e, _ := txnService(t, t.TempDir())
	x := s.NewTxn(nil)
	_, err := x.Read(context.Background(), make([]byte, 100), 0)
	wantErrno(t, "read before write", err, syscall.EINVAL, "read before write")
	for _, c := range []struct {
		doc  string
		want syscall.Errno
		text string
	}{
		{`not json`, syscall.EINVAL, "want a JSON object"},
		{`{"op":"read","target":"nope","requests":[{"memory":"buf","length":1}]}`, syscall.ENOENT, `target "nope"`},
		{`{"op":"read","target":"cache","requests":[{"memory":"buf","target_offset":1048575,"length":2}]}`, syscall.ERANGE, "beyond"},
		{`{"op":"read","target":"cache","requests":[{"memory":"buf","length":1}],"x":1}`, syscall.EINVAL, `unknown field "x"`},
	} {
		x := s.NewTxn(nil)
		wantErrno(t, c.doc, x.Write([]byte(c.doc), 0), c.want, c.text)
		if got := string(s.LastError(nil)); !bytes.Contains([]byte(got), []byte(c.text)) {
			t.Errorf("%s: /error = %q", c.doc, got)
		}
		// Dead: later writes, reads and flush repeat the errno.
		wantErrno(t, "write after failure", x.Write([]byte(txnDoc), 0), c.want, "earlier write")
		_, err := x.Read(context.Background(), make([]byte, 10), 0)
		wantErrno(t, "read after failure", err, c.want, "earlier write")
		wantErrno(t, "flush after failure", x.Flush(), c.want, "earlier write")
		x.Close()
		if n := e.Stats().Batches; n != 0 || len(s.Batches()) != 0 {
			t.Errorf("%s: %d engine batches, %d listed", c.doc, n, len(s.Batches()))
		}
	}
	if err := x.Write([]byte(txnDoc), 0); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "second document before reading", x.Write([]byte(txnDoc), int64(len(txnDoc))), syscall.EBUSY, "has not been read")
	if st := txnStatus(t, x, 0); st.State != "completed" || st.Tasks.Total != 1 {
		t.Errorf("the first transaction after the refused second: %+v", st)
	}
	x.Close()
	if n := e.Stats().Batches; n != 0 {
		t.Errorf("%d engine batches after close", n)
	}
	// An incomplete document is reported by flush, every time.
	y := s.NewTxn(nil)
	y.Write([]byte(`{"op":`), 0)
	wantErrno(t, "flush of half a document", y.Flush(), syscall.EINVAL, "incomplete")
	wantErrno(t, "flush again", y.Flush(), syscall.EINVAL, "incomplete")
	y.Close()
}

// BenchmarkTxn is the control-plane work of one transaction on a reused
// handle (write, read), without FUSE, on a tmpfs file.
func BenchmarkTxn(b *testing.B) {
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-bench-")
	if err != nil {
		b.Skip(err)
	}
	defer os.RemoveAll(dir)
	s, _, _ := txnService(b, dir)
	x := s.NewTxn(nil)
	defer x.Close()
	doc, buf := []byte(txnDoc), make([]byte, 64<<10)
	var off int64
	b.ReportAllocs()
	for b.Loop() {
		if err := x.Write(doc, off); err != nil {
			b.Fatal(err)
		}
		off += int64(len(doc))
		r, err := x.Read(context.Background(), buf, off)
		if err != nil || len(r) == 0 {
			b.Fatal(err)
		}
		off += int64(len(r))
	}
}

// serviceOverTB is serviceOver for tests and benchmarks.
func serviceOverTB(t testing.TB, dir string) (*control.Service, *engine.Engine) {
	t.Helper()
	cfg := config.DefaultEngine()
	cfg.AllowedRoots = []string{dir}
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	s := control.New(e, control.Options{Version: "test", DefaultBatchCapacity: 8, MaxDocumentBytes: 4096, CloseTimeout: time.Second})
	t.Cleanup(func() { s.Shutdown(time.Second) })
	return s, e
}

// TestTxnConcurrentHandleUse: writes, reads and a close racing on one
// handle (a dup'd descriptor) neither race nor leak a batch.
func TestTxnConcurrentHandleUse(t *testing.T) {
	s, e, _ := txnService(t, t.TempDir())
	x := s.NewTxn(nil)
	done := make(chan struct{})
	for g := 0; g < 3; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			buf := make([]byte, 1<<16)
			for i := 0; i < 50; i++ {
				x.Write([]byte(txnDoc), int64(i*1000))
				x.Read(context.Background(), buf, 0)
			}
		}()
	}
	<-done
	x.Close()
	<-done
	<-done
	x.Close()
	deadline := time.Now().Add(10 * time.Second)
	for e.Stats().Batches != 0 || len(s.Batches()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d engine batches, %d listed after close", e.Stats().Batches, len(s.Batches()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTxnBadSecondDocumentKeepsFirst: a second document that fails (a
// bad name, an unknown field) leaves the first transaction readable and
// live until close; the handle's later writes stay refused.
func TestTxnBadSecondDocumentKeepsFirst(t *testing.T) {
	for _, bad := range []string{
		`{"op":"read","target":"nosuch","requests":[{"memory":"buf","length":4096}]}`,
		`{"op":"read","target":"cache","bogus":1,"requests":[{"memory":"buf","length":4096}]}`,
		`{"op":"read","target":"cache","requests":[{"memory":"buf","offset":"2MiB","length":4096}]}`,
	} {
		s, e, _ := txnService(t, t.TempDir())
		x := s.NewTxn(nil)
		if err := x.Write([]byte(txnDoc), 0); err != nil {
			t.Fatal(err)
		}
		first := txnStatus(t, x, int64(len(txnDoc)))
		if err := x.Write([]byte(bad), 9000); err == nil {
			t.Fatalf("bad second document %s accepted", bad)
		}
		if s.Batch(first.ID) == nil {
			t.Fatalf("%s: the first transaction's batch %d was freed by a failed second document", bad, first.ID)
		}
		if st := txnStatus(t, x, 0); st.ID != first.ID || st.State != "completed" {
			t.Errorf("%s: reading after the failure: %+v, want batch %d completed", bad, st, first.ID)
		}
		if err := x.Write([]byte(txnDoc), 20000); engine.KindOf(err) != engine.KindInvalid && engine.KindOf(err) != engine.KindNotFound && engine.KindOf(err) != engine.KindRange {
			t.Errorf("%s: write after the failure: %v (want the sticky error)", bad, err)
		}
		x.Close()
		if n := len(s.Batches()); n != 0 || e.Stats().Batches != 0 {
			t.Errorf("%s: after close: %d batches in the table, %d in the engine", bad, n, e.Stats().Batches)
		}
	}
}
