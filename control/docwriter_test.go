package control

import (
	"errors"
	"strings"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

// newTestWriter returns a DocWriter whose commits are collected and
// refused when the document contains "refuse".
func newTestWriter(max int) (*DocWriter, *[]string) {
	var done []string
	w := &DocWriter{doc: NewDocument(max, nil),
		commit: func(doc []byte) error {
			if strings.Contains(string(doc), "refuse") {
				return detail(engine.KindRange, "refused %s", doc)
			}
			done = append(done, string(doc))
			return nil
		},
		fail: func(err error) error { return err }}
	return w, &done
}

func TestDocWriterOffsets(t *testing.T) {
	doc := `{"a":1}`
	for _, c := range []struct {
		name   string
		writes []int64 // offsets; each write is doc+"\n"
		app    bool
		want   int // documents committed
		errAt  int // index of the first failing write, -1 for none
		kind   engine.Kind
	}{
		{"sequential", []int64{0, 8, 16}, false, 3, -1, 0},
		{"seek forward", []int64{5}, false, 0, 0, engine.KindInvalid},
		{"identical retry at 0", []int64{0, 0}, false, 1, 1, engine.KindInvalid},
		{"gap", []int64{0, 9}, false, 1, 1, engine.KindInvalid},
		{"append ignores offsets", []int64{0, 0, 3}, true, 3, -1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, done := newTestWriter(1024)
			if c.app {
				w.Append()
			}
			errAt := -1
			var first error
			for i, off := range c.writes {
				if err := w.Write([]byte(doc+"\n"), off); err != nil && errAt < 0 {
					errAt, first = i, err
				}
			}
			if errAt != c.errAt || (first != nil && engine.KindOf(first) != c.kind) {
				t.Fatalf("first error %v at write %d, want kind %v at %d", first, errAt, c.kind, c.errAt)
			}
			if len(*done) != c.want {
				t.Errorf("%d documents committed, want %d", len(*done), c.want)
			}
			if c.errAt >= 0 {
				// Sticky: a correct write afterwards fails the same way and
				// runs nothing; so does flush.
				n := len(*done)
				if err := w.Write([]byte(doc), 1<<20); engine.KindOf(err) != c.kind {
					t.Errorf("write after the failure: %v", err)
				}
				if err := w.Flush(); engine.KindOf(err) != c.kind || !strings.Contains(err.Error(), "earlier write") {
					t.Errorf("flush after the failure: %v", err)
				}
				if len(*done) != n {
					t.Errorf("a write after the failure was acted on")
				}
			}
		})
	}
}

func TestDocWriterSticky(t *testing.T) {
	// A refused document, then a valid one on the same handle: the valid
	// one is not run, and every later call reports the first error's kind.
	w, done := newTestWriter(1024)
	first := w.Write([]byte(`{"refuse":1}`), 0)
	if engine.KindOf(first) != engine.KindRange {
		t.Fatalf("refused document: %v", first)
	}
	for i := 0; i < 3; i++ {
		err := w.Write([]byte(`{"ok":1}`), 12)
		if engine.KindOf(err) != engine.KindRange || !errors.Is(err, first) {
			t.Fatalf("write %d after a refusal: %v", i, err)
		}
	}
	if err := w.Flush(); engine.KindOf(err) != engine.KindRange {
		t.Fatalf("flush after a refusal: %v", err)
	}
	if len(*done) != 0 {
		t.Fatalf("documents after a refusal were run: %q", *done)
	}

	// An oversized document whose tail is a valid document: the tail is
	// never run.
	w, done = newTestWriter(64)
	big := `{"pad":"` + strings.Repeat("x", 100)
	if err := w.Write([]byte(big), 0); engine.KindOf(err) != engine.KindTooLarge {
		t.Fatalf("oversized: %v", err)
	}
	if err := w.Write([]byte(`"}{"a":1}`), int64(len(big))); engine.KindOf(err) != engine.KindTooLarge {
		t.Fatalf("tail: %v", err)
	}
	if len(*done) != 0 {
		t.Fatalf("the tail was run: %q", *done)
	}
}

// TestDocWriterBudgetNotSticky: a write refused by the buffer budget
// changes nothing, not even the expected offset: retried once another
// handle released its buffer, the same write is accepted.
func TestDocWriterBudgetNotSticky(t *testing.T) {
	budget := NewBudget(1024, 0)
	w1 := &DocWriter{doc: NewDocument(4096, budget), commit: func([]byte) error { return nil }, fail: func(err error) error { return err }}
	w2 := &DocWriter{doc: NewDocument(4096, budget), commit: func([]byte) error { return nil }, fail: func(err error) error { return err }}
	if err := w1.Write([]byte(`{"a":"`+strings.Repeat("x", 700)), 0); err != nil {
		t.Fatal(err)
	}
	piece := []byte(`{"b":"` + strings.Repeat("y", 400))
	if err := w2.Write(piece, 0); engine.KindOf(err) != engine.KindExhausted {
		t.Fatalf("over the budget: %v", err)
	}
	w1.Close()
	if budget.Used() != 0 {
		t.Fatalf("released handle still holds %d bytes", budget.Used())
	}
	if err := w2.Write(piece, 0); err != nil {
		t.Fatalf("the same write retried after the release: %v", err)
	}
	if err := w2.Write([]byte(`"}`), int64(len(piece))); err != nil {
		t.Fatalf("finishing: %v", err)
	}
	if err := w1.Write([]byte(`{}`), 0); err == nil || budget.Used() != 0 {
		t.Fatalf("write after release: %v, %d bytes held", err, budget.Used())
	}
}

// TestDocWriterRestartable: on a restartable handle (qos/resolve) each
// document's first write may land anywhere; its later chunks may not.
func TestDocWriterRestartable(t *testing.T) {
	w, done := newTestWriter(1024)
	w.Restartable()
	if err := w.Write([]byte(`{"a":1}`+"\n"), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]byte(`{"b":`), 500); err != nil {
		t.Fatalf("second document at another offset: %v", err)
	}
	if err := w.Write([]byte(`2}`), 505); err != nil {
		t.Fatalf("its second chunk: %v", err)
	}
	if len(*done) != 2 {
		t.Fatalf("committed %q", *done)
	}
	if err := w.Write([]byte(`{"c":`), 900); err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]byte(`3}`), 0); engine.KindOf(err) != engine.KindInvalid {
		t.Fatalf("a chunk out of place inside a document: %v", err)
	}
}
