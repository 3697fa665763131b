// inbox.go owns a receiver's completion notifications: a bounded FIFO
// that the server fills and readers (the mount's notifications file, the
// Go API) drain one message at a time.
//
// Invariants:
//   - The inbox never holds more than Max notifications, more than
//     MaxPerSender from one sender name, or more than MaxBytes of
//     messages with their submissions and sender names; Put refuses
//     one that would pass a bound (ErrInboxFull)
//     and changes nothing, so a refused notification was never queued.
//   - A notification is handed to exactly one reader, in arrival order.

package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Notification is one received completion notification.
type Notification struct {
	Sender     string    `json:"sender"`     // the sender's name, as proved at its hello
	Epoch      string    `json:"epoch"`      // the sender's epoch, 16 hex digits
	ID         uint64    `json:"id"`         // unique per sender and epoch
	Submission string    `json:"submission"` // the sender's submission it completes
	Message    string    `json:"message"`
	Received   time.Time `json:"received"`
}

// size is what n holds of an inbox's byte bound: every string the
// sender chose, not the message alone (a submission may be 64 KiB).
func (n *Notification) size() int64 {
	return int64(len(n.Message) + len(n.Submission) + len(n.Sender))
}

// InboxLimits bound an inbox.
type InboxLimits struct {
	Max          int   // notifications held, all senders together
	MaxPerSender int   // notifications held from one sender name
	MaxBytes     int64 // bytes held (message, submission, sender), all senders together
}

// ErrInboxFull says a notification was refused, never queued.
var ErrInboxFull = errors.New("notification inbox full")

// Inbox is a bounded notification queue. Safe for concurrent use.
type Inbox struct {
	lim InboxLimits
	mu  sync.Mutex
	q   []Notification
	// bytes and per are what q holds; ready is closed (and replaced)
	// when q gains a notification, waking every waiting reader.
	bytes int64
	per   map[string]int
	ready chan struct{}
}

// NewInbox makes an empty inbox with the given bounds.
func NewInbox(lim InboxLimits) *Inbox {
	return &Inbox{lim: lim, per: map[string]int{}, ready: make(chan struct{})}
}

// Put queues n, or refuses it with ErrInboxFull naming the bound.
func (b *Inbox) Put(n Notification) error {
	size := n.size()
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case len(b.q) >= b.lim.Max:
		return fmt.Errorf("%w: %d notifications pending, the limit", ErrInboxFull, len(b.q))
	case b.per[n.Sender] >= b.lim.MaxPerSender:
		return fmt.Errorf("%w: %d notifications pending from %q, the per-sender limit", ErrInboxFull, b.per[n.Sender], n.Sender)
	case b.bytes+size > b.lim.MaxBytes:
		return fmt.Errorf("%w: %d bytes pending (messages, submissions, sender names), %d more would pass the %d limit", ErrInboxFull, b.bytes, size, b.lim.MaxBytes)
	}
	b.q = append(b.q, n)
	b.bytes += size
	b.per[n.Sender]++
	close(b.ready)
	b.ready = make(chan struct{})
	return nil
}

// Next removes and returns the oldest notification, waiting for one
// until ctx ends.
func (b *Inbox) Next(ctx context.Context) (Notification, error) {
	for {
		b.mu.Lock()
		if len(b.q) > 0 {
			n := b.q[0]
			b.q[0] = Notification{}
			b.q = b.q[1:]
			b.bytes -= n.size()
			if b.per[n.Sender]--; b.per[n.Sender] == 0 {
				delete(b.per, n.Sender)
			}
			b.mu.Unlock()
			return n, nil
		}
		ready := b.ready
		b.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return Notification{}, ctx.Err()
		}
	}
}

// Len is the number of notifications waiting.
func (b *Inbox) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.q)
}
