package control

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

// feed writes chunks in order and returns the documents completed and the
// first error (with the chunk index).
func feed(d *Document, chunks ...string) (docs []string, errAt int, err error) {
	for i, c := range chunks {
		doc, e := d.Append([]byte(c))
		if e != nil {
			return docs, i, e
		}
		if doc != nil {
			docs = append(docs, string(doc))
		}
	}
	return docs, -1, nil
}

func TestDocumentChunks(t *testing.T) {
	doc := `{"op":"read","target":"c","requests":[{"memory":"b","length":4,"note":"a}\"{["}]}`
	for _, c := range []struct {
		name   string
		max    int
		chunks []string
		want   []string
		errAt  int
		kind   engine.Kind
		msg    string
	}{
		{"one write", 1024, []string{doc + "\n"}, []string{doc}, -1, 0, ""},
		{"leading whitespace kept", 1024, []string{"\n  " + doc}, []string{"\n  " + doc}, -1, 0, ""},
		{"byte by byte", 1024, strings.Split(doc+"\n", ""), []string{doc}, -1, 0, ""},
		{"split in a string", 1024, []string{doc[:60], doc[60:]}, []string{doc}, -1, 0, ""},
		{"two documents, two writes", 1024, []string{doc + "\n", doc + "\n"}, []string{doc, doc}, -1, 0, ""},
		{"trailing whitespace in a later write", 1024, []string{doc, "   \n"}, []string{doc}, -1, 0, ""},
		{"trailing whitespace beyond max", len(doc), []string{doc + strings.Repeat(" ", 100)}, []string{doc}, -1, 0, ""},
		{"two documents, one write", 1024, []string{doc + doc}, nil, 0, engine.KindInvalid, "trailing data"},
		{"not an object", 1024, []string{"[1,2]"}, nil, 0, engine.KindInvalid, "want a JSON object"},
		{"plain text", 1024, []string{"seal\n"}, nil, 0, engine.KindInvalid, "want a JSON object"},
		{"syntax error early", 1024, []string{`{"op" "read"`}, nil, 0, engine.KindInvalid, "invalid JSON at byte 7"},
		{"syntax error in second write", 1024, []string{`{"op":`, ` read,`}, nil, 1, engine.KindInvalid, "invalid JSON"},
		{"malformed value in a later write", 1024, []string{`{"op":`, ` read}`}, nil, 1, engine.KindInvalid, "invalid JSON at byte 8: invalid character 'r' looking for beginning of value"},
		{"too large incomplete", 10, []string{`{"op":"read",`}, nil, 0, engine.KindTooLarge, "at least 13 bytes"},
		{"too large across writes", 16, []string{`{"op":"r`, `ead","x":1}`}, nil, 1, engine.KindTooLarge, "exceeds mount.max_document_bytes (16)"},
		{"leading whitespace counts", len(doc), []string{" " + doc}, nil, 0, engine.KindTooLarge, "exceeds"},
		{"recovers after error", 1024, []string{"oops", doc}, nil, 0, engine.KindInvalid, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := NewDocument(c.max, nil)
			docs, at, err := feed(d, c.chunks...)
			if c.kind != 0 {
				if err == nil || at != c.errAt || engine.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("got docs %q, error %v at chunk %d; want %v %q at chunk %d", docs, err, at, c.kind, c.msg, c.errAt)
				}
				if d.Pending() != nil {
					t.Errorf("buffer not emptied after an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v at chunk %d", err, at)
			}
			if strings.Join(docs, "|") != strings.Join(c.want, "|") {
				t.Errorf("docs = %q, want %q", docs, c.want)
			}
			if err := d.Pending(); err != nil {
				t.Errorf("Pending after complete documents: %v", err)
			}
		})
	}
}

func TestDocumentRecovers(t *testing.T) {
	d := NewDocument(1024, nil)
	if _, err := d.Append([]byte("oops")); err == nil {
		t.Fatal("want an error")
	}
	doc, err := d.Append([]byte(`{"a":1}`))
	if err != nil || string(doc) != `{"a":1}` {
		t.Fatalf("after an error: %q, %v", doc, err)
	}
}

func TestDocumentPending(t *testing.T) {
	d := NewDocument(1024, nil)
	if err := d.Pending(); err != nil {
		t.Fatalf("empty: %v", err)
	}
	d.Append([]byte("  \n"))
	if err := d.Pending(); err != nil {
		t.Fatalf("whitespace: %v", err)
	}
	d.Append([]byte(`{"op":`))
	for i := 0; i < 3; i++ { // idempotent
		err := d.Pending()
		if err == nil || engine.KindOf(err) != engine.KindInvalid || !strings.Contains(err.Error(), "incomplete JSON document") {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	doc, err := d.Append([]byte(`"read"}`))
	if err != nil || string(doc) != "  \n{\"op\":\"read\"}" {
		t.Fatalf("completing after a flush: %q, %v", doc, err)
	}
}

// tinyWritesDoc is a 64 KiB document (padding inside a string).
var tinyWritesDoc = []byte(`{"name":"x","pad":"` + strings.Repeat("y", 64<<10-27) + `","n":1}`)

// TestDocumentTinyWritesLinear feeds a 64 KiB document one byte per
// write. Re-checking the prefix on each write (as a decoder would) costs
// a decoder and a pass over the prefix per write; the resumable scanner
// costs neither, so the allocations stay those of the buffer's doubling.
func TestDocumentTinyWritesLinear(t *testing.T) {
	allocs := testing.AllocsPerRun(1, func() {
		d := NewDocument(1<<20, nil)
		for i := range tinyWritesDoc {
			doc, err := d.Append(tinyWritesDoc[i : i+1])
			if err != nil || (doc != nil) != (i == len(tinyWritesDoc)-1) {
				t.Fatalf("byte %d: %v, %d bytes", i, err, len(doc))
			}
		}
	})
	// Every byte examined once: the scanner resumes, never rescans.
	d := NewDocument(1<<20, nil)
	for i := range tinyWritesDoc {
		d.Append(tinyWritesDoc[i : i+1])
	}
	if d.scan.steps != int64(len(tinyWritesDoc)) {
		t.Errorf("%d-byte document in 1-byte writes: %d bytes scanned, want each once", len(tinyWritesDoc), d.scan.steps)
	}
	if allocs > 64 {
		t.Fatalf("%d-byte document in 1-byte writes: %.0f allocations, want at most 64 (one per buffer growth)", len(tinyWritesDoc), allocs)
	}
}

func BenchmarkDocumentTinyWrites(b *testing.B) {
	for _, n := range []int{1, 16, 4096} {
		b.Run(fmt.Sprintf("write=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(tinyWritesDoc)))
			for b.Loop() {
				d := NewDocument(1<<20, nil)
				for i := 0; i < len(tinyWritesDoc); i += n {
					if _, err := d.Append(tinyWritesDoc[i:min(i+n, len(tinyWritesDoc))]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func TestDocumentBudget(t *testing.T) {
	budget := NewBudget(1024, 0)
	a, b := NewDocument(4096, budget), NewDocument(4096, budget)
	if _, err := a.Append([]byte(`{"pad":"` + strings.Repeat("x", 592))); err != nil {
		t.Fatalf("first unfinished document: %v", err)
	}
	if got := budget.Used(); got != 600 {
		t.Fatalf("budget holds %d bytes, want 600", got)
	}
	// A second unfinished document does not fit: refused, nothing held.
	_, err := b.Append([]byte(`{"pad":"` + strings.Repeat("x", 492)))
	if engine.KindOf(err) != engine.KindExhausted || !strings.Contains(err.Error(), "mount.max_buffered_document_bytes") {
		t.Fatalf("second unfinished document: %v", err)
	}
	if b.Pending() != nil || budget.Used() != 600 {
		t.Fatalf("refused write left %d bytes held", budget.Used())
	}
	// A document that arrives whole needs no budget.
	if doc, err := b.Append([]byte(`{"a":"` + strings.Repeat("x", 700) + `"}`)); err != nil || doc == nil {
		t.Fatalf("whole document while the budget is spent: %v", err)
	}
	// Growing the held document past the budget is refused and changes
	// nothing: the same bytes are accepted once there is room.
	more := []byte(strings.Repeat("z", 500))
	if _, err := a.Append(more); engine.KindOf(err) != engine.KindExhausted {
		t.Fatalf("growing past the budget: %v", err)
	}
	if _, err := a.Append([]byte(`"}`)); err != nil {
		t.Fatalf("finishing after a refused write: %v", err)
	}
	if budget.Used() != 0 {
		t.Fatalf("completed document still holds %d bytes", budget.Used())
	}
	// Reset (a released handle) gives everything back.
	a.Append([]byte(`{"pad":"`))
	a.Reset()
	if budget.Used() != 0 {
		t.Fatalf("reset document still holds %d bytes", budget.Used())
	}
}

// TestDocumentErrorQuotesPrefix checks that error texts quote a short
// prefix, never the whole buffer.
func TestDocumentErrorQuotesPrefix(t *testing.T) {
	d := NewDocument(4<<20, nil)
	d.Append([]byte(`{"pad":"` + strings.Repeat("x", 1<<20)))
	err := d.Pending()
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("pending error of %d bytes: %.300v", len(err.Error()), err)
	}
	allocated := testing.AllocsPerRun(1, func() { _ = d.Pending().Error() })
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	for i := 0; i < 10; i++ {
		_ = d.Pending()
	}
	runtime.ReadMemStats(&ms)
	if grown := ms.TotalAlloc - before; grown > 64<<10 {
		t.Fatalf("10 pending errors allocated %d bytes (%.0f allocations each): the buffer is copied", grown, allocated)
	}
}

// TestErrorTextsQuoteAPrefix: refusals of long client text quote a short
// prefix and say how long it was.
func TestErrorTextsQuoteAPrefix(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	for name, err := range map[string]error{
		"ctl":       func() error { _, err := ParseCtl(long); return err }(),
		"ctl arg":   func() error { _, err := ParseCtl("cancel " + long); return err }(),
		"engine":    func() error { _, err := ParseEngineCtl(long); return err }(),
		"strict":    decodeStrict([]byte(long), 2<<20, &struct{}{}),
		"transport": func() error { _, err := ParseTransport(long); return err }(),
		"uri": func() error {
			_, _, err := ParseSegmentSpec([]byte(`{"name":"a","uri":"file:///`+long+`","permission":"read"}`), 2<<20)
			return err
		}(),
		"location": func() error {
			_, err := ParseMemorySpec([]byte(`{"name":"a","location":"`+long+`","bytes":1}`), 2<<20)
			return err
		}(),
	} {
		if err == nil || len(err.Error()) > 400 || !strings.Contains(err.Error(), "xxxx") {
			t.Errorf("%s: %d-byte error: %.200v", name, len(err.Error()), err)
		}
	}
}

// TestDocumentBudgetShare: a capped uid holds at most its share; the
// rest stays for other uids and uncapped (privileged) callers, and what
// a uid gives back is its own again.
func TestDocumentBudgetShare(t *testing.T) {
	budget := NewBudget(2048, 1024)
	doc := func(p payer) *Document {
		d := NewDocument(4096, budget)
		d.payer = p
		return d
	}
	alice, bob := payer{uid: 1, capped: true}, payer{uid: 2, capped: true}
	piece := []byte(`{"pad":"` + strings.Repeat("x", 592)) // 600 bytes
	a1, a2 := doc(alice), doc(alice)
	if _, err := a1.Append(piece); err != nil {
		t.Fatal(err)
	}
	_, err := a2.Append(piece)
	if engine.KindOf(err) != engine.KindExhausted || !strings.Contains(err.Error(), "uid 1's") || !strings.Contains(err.Error(), "mount.max_buffered_document_bytes_per_user") {
		t.Fatalf("alice past her share: %v", err)
	}
	if _, err := doc(bob).Append(piece); err != nil {
		t.Fatalf("bob while alice holds her share: %v", err)
	}
	if _, err := doc(payer{}).Append(piece); err != nil {
		t.Fatalf("an uncapped caller while alice and bob hold theirs: %v", err)
	}
	if got := budget.Used(); got != 1800 {
		t.Fatalf("budget holds %d, want 1800", got)
	}
	a1.Reset()
	if _, err := a2.Append(piece); err != nil {
		t.Fatalf("alice after giving her bytes back: %v", err)
	}
}
