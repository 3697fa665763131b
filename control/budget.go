// budget.go owns the mount-wide budget of buffered document bytes
// (mount.max_buffered_document_bytes): the memory that unfinished
// documents on open files may hold together. Without it, every open
// handle could pin mount.max_document_bytes, and a client opening
// thousands of files could grow the daemon without bound.
//
// Invariants:
//   - 0 <= used <= max at all times: take never overshoots, even when
//     many handles race for the last bytes.
//   - Every byte taken is given back exactly once, by the Document that
//     took it (document.go), when its buffer is dropped.

package control

import "sync/atomic"

// Budget is a bounded pool of bytes shared by every Document of a
// Service. A nil *Budget is unlimited. Safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// take reserves n bytes; false (and nothing reserved) when that would
// exceed the budget.
func (b *Budget) take(n int) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+int64(n) > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+int64(n)) {
			return true
		}
	}
}

// give returns n bytes taken earlier.
func (b *Budget) give(n int) {
	if b != nil && n > 0 {
		b.used.Add(-int64(n))
	}
}

// Used is the number of bytes held now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// newDocument returns an empty document buffer drawing on s's budget.
func (s *Service) newDocument() *Document {
	return NewDocument(s.opts.MaxDocumentBytes, s.docs)
}

// BufferedDocumentBytes is what unfinished documents hold now.
func (s *Service) BufferedDocumentBytes() int64 { return s.docs.Used() }

// defaultMaxBufferedDocumentBytes is mount.max_buffered_document_bytes's
// default.
const defaultMaxBufferedDocumentBytes = 64 << 20
