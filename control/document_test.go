package control

import (
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
		{"balanced but malformed is left to the parser", 1024, []string{`{"op":`, ` read}`}, []string{`{"op": read}`}, -1, 0, ""},
		{"too large incomplete", 10, []string{`{"op":"read",`}, nil, 0, engine.KindTooLarge, "at least 13 bytes"},
		{"too large across writes", 16, []string{`{"op":"r`, `ead","x":1}`}, nil, 1, engine.KindTooLarge, "exceeds mount.max_document_bytes (16)"},
		{"leading whitespace counts", len(doc), []string{" " + doc}, nil, 0, engine.KindTooLarge, "exceeds"},
		{"recovers after error", 1024, []string{"oops", doc}, nil, 0, engine.KindInvalid, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := NewDocument(c.max)
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
	d := NewDocument(1024)
	if _, err := d.Append([]byte("oops")); err == nil {
		t.Fatal("want an error")
	}
	doc, err := d.Append([]byte(`{"a":1}`))
	if err != nil || string(doc) != `{"a":1}` {
		t.Fatalf("after an error: %q, %v", doc, err)
	}
}

func TestDocumentPending(t *testing.T) {
	d := NewDocument(1024)
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
