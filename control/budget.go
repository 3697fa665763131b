// budget.go owns the mount-wide budget of buffered document bytes
// (mount.max_buffered_document_bytes): the memory that unfinished
// documents on open files may hold together. Without it, every open
// handle could pin mount.max_document_bytes, and a client opening
// thousands of files could grow the daemon without bound. Within it each
// unprivileged uid may hold at most its share
// (mount.max_buffered_document_bytes_per_user), so one user leaving
// documents unfinished cannot spend the whole budget and refuse every
// other user's multi-write documents.
//
// Invariants:
//   - 0 <= used <= max at all times, and for every capped uid
//     0 <= users[uid] <= perUser: take never overshoots, even when many
//     handles race for the last bytes.
//   - Every byte taken is given back exactly once, by the Document that
//     took it (document.go), when its buffer is dropped, to the uid it
//     was taken for.
//   - users holds only uids that hold bytes now.

package control

import (
	"sync"

	"github.com/orbitefs/orbitefs/engine"
)

// Budget is a bounded pool of bytes shared by every Document of a
// Service. A nil *Budget is unlimited. Safe for concurrent use.
type Budget struct {
	max     int64
	perUser int64 // a capped uid's share; at most max

	mu    sync.Mutex
	used  int64
	users map[uint32]int64 // capped uids' bytes held
}

// NewBudget returns a budget of max bytes of which one capped uid may
// hold at most perUser (perUser <= 0 or above max: max).
func NewBudget(max, perUser int64) *Budget {
	if perUser <= 0 || perUser > max {
		perUser = max
	}
	return &Budget{max: max, perUser: perUser, users: make(map[uint32]int64)}
}

// payer is whom a Document's bytes are charged to: a uid, and whether
// that uid is held to its share (unprivileged callers are, owner.go).
type payer struct {
	uid    uint32
	capped bool
}

// take reserves n bytes for p; false (and nothing reserved) when that
// would exceed the budget or p's share.
func (b *Budget) take(p payer, n int) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+int64(n) > b.max {
		return false
	}
	if p.capped {
		if b.users[p.uid]+int64(n) > b.perUser {
			return false
		}
		b.users[p.uid] += int64(n)
	}
	b.used += int64(n)
	return true
}

// give returns n bytes taken earlier for p.
func (b *Budget) give(p payer, n int) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= int64(n)
	if p.capped {
		if b.users[p.uid] -= int64(n); b.users[p.uid] == 0 {
			delete(b.users, p.uid)
		}
	}
}

// Used is the number of bytes held now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// usedBy is what p holds now (all held bytes for an uncapped p).
func (b *Budget) usedBy(p payer) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !p.capped {
		return b.used
	}
	return b.users[p.uid]
}

// newDocument returns an empty document buffer drawing on s's budget
// for c.
func (s *Service) newDocument(c *engine.Caller) *Document {
	d := NewDocument(s.opts.MaxDocumentBytes, s.docs)
	if !s.privileged(c) {
		d.payer = payer{uid: c.UID, capped: true}
	}
	return d
}

// BufferedDocumentBytes is what unfinished documents hold now.
func (s *Service) BufferedDocumentBytes() int64 { return s.docs.Used() }

// defaultMaxBufferedDocumentBytes is mount.max_buffered_document_bytes's
// default.
const defaultMaxBufferedDocumentBytes = 64 << 20
