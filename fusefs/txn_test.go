package fusefs_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/control"
)

// TestTxnGoClient drives /ctl/batches/txn as a Go client does: one
// write, one read of a large buffer returning the whole status, then a
// second transaction on the same descriptor; close frees the batch.
func TestTxnGoClient(t *testing.T) {
	m := mount(t)
	data := m.setup(t)
	f, err := os.OpenFile(m.path("ctl/batches/txn"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i, off := range []int{0, 8192} {
		doc := `{"op":"read","target":"cache","requests":[{"memory":"buf","offset":` + strconv.Itoa(off) + `,"target_offset":` + strconv.Itoa(off) + `,"length":4096}]}`
		if _, err := f.Write([]byte(doc)); err != nil {
			t.Fatalf("transaction %d: write: %v", i, err)
		}
		k, err := f.Read(buf)
		if err != nil {
			t.Fatalf("transaction %d: read: %v", i, err)
		}
		var st struct {
			ID    uint64 `json:"id"`
			State string `json:"state"`
		}
		if err := json.Unmarshal(buf[:k], &st); err != nil || st.State != "completed" {
			t.Fatalf("transaction %d: status %q: %v", i, buf[:k], err)
		}
		if k2, err := f.Read(buf); k2 != 0 || err == nil {
			t.Errorf("transaction %d: second read: %d bytes, %v; want EOF", i, k2, err)
		}
		if got := names(t, m.path("ctl/batches")); got != strconv.Itoa(int(st.ID))+" clone txn" {
			t.Errorf("transaction %d: ls ctl/batches = %q", i, got)
		}
	}
	got, _ := os.ReadFile(m.path("memory/buf/data"))
	if !bytes.Equal(got[:4096], data[:4096]) || !bytes.Equal(got[8192:12288], data[8192:12288]) {
		t.Errorf("the transactions' bytes differ from the file")
	}
	if err := f.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	onlyFixed(t, m, "after close")
}

// TestTxnErrors: read before write is EINVAL, a second document before
// the first was read is EBUSY and sticky, a bad document changes nothing
// and leaves no batch, and only O_RDWR opens are accepted.
func TestTxnErrors(t *testing.T) {
	m := mount(t)
	m.setup(t)
	_, err := os.ReadFile(m.path("ctl/batches/txn"))
	wantErrno(t, "open txn read-only", err, syscall.EACCES)
	f, err := os.OpenFile(m.path("ctl/batches/txn"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(make([]byte, 100))
	wantErrno(t, "read before write", err, syscall.EINVAL)
	if got := m.read(t, "error"); !strings.Contains(got, "read before write") {
		t.Errorf("/error = %q", got)
	}
	_, err = f.Write([]byte(`{"op":"read","target":"nope","requests":[{"memory":"buf","length":4096}]}`))
	wantErrno(t, "write to a missing target", err, syscall.ENOENT)
	if got := m.read(t, "error"); !strings.Contains(got, `txn batches/txn: not found: target "nope"`) {
		t.Errorf("/error = %q", got)
	}
	if got := names(t, m.path("ctl/batches")); got != "clone txn" {
		t.Errorf("after a refused transaction: ls ctl/batches = %q", got)
	}
	_, err = f.Read(make([]byte, 100))
	wantErrno(t, "read after a failed write", err, syscall.ENOENT)
	wantErrno(t, "close after a failed write", f.Close(), syscall.ENOENT)

	f, err = os.OpenFile(m.path("ctl/batches/txn"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(`{"op":"read","target":"cache","requests":[{"memory":"buf","length":4096}]}`)
	if _, err := f.Write(doc); err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(doc)
	wantErrno(t, "second document before reading", err, syscall.EBUSY)
	var st control.StatusJSON
	b := make([]byte, 1<<16)
	k, err := f.Read(b)
	if err != nil || json.Unmarshal(b[:k], &st) != nil || st.State != "completed" || st.Tasks.Total != 1 {
		t.Errorf("the first transaction after a refused second: %q %v", b[:k], err)
	}
	wantErrno(t, "close after the refused second document", f.Close(), syscall.EBUSY)
	onlyFixed(t, m, "after close")
}

// onlyFixed waits (bounded) until /ctl/batches lists only clone and txn:
// the kernel sends RELEASE, which frees the batch, after close returned.
func onlyFixed(t *testing.T, m *testMount, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := names(t, m.path("ctl/batches"))
		if got == "clone txn" {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: ls ctl/batches = %q after 10s, want \"clone txn\"", what, got)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
