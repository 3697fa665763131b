package peer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// notifyServer is a server with the given inbox bounds (and a 16-byte
// message limit) and a client dialed to it.
func notifyServer(t *testing.T, lim InboxLimits, hook func(hookPoint, *wire.Header, net.Conn)) (*Server, *Conn) {
	t.Helper()
	s := NewServer(ServerConfig{Name: "srv", Key: testKey, IOTimeout: 10 * time.Second, MaxSlice: DefaultMaxSlice,
		Inbox: NewInbox(lim), MaxNotifyBytes: 16, Logger: slog.New(slog.DiscardHandler)}, &memExports{})
	setHook(s, hook)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dial(t, addrOf(s), testKey, 1)
}

var roomy = InboxLimits{Max: 8, MaxPerSender: 8, MaxBytes: 1024}

func TestNotifyDelivered(t *testing.T) {
	s, c := notifyServer(t, roomy, nil)
	d, err := c.Notify(context.Background(), "b7", "kv ready")
	if d != Delivered || err != nil {
		t.Fatalf("Notify = %s, %v; want delivered", d, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := s.Notification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Sender != "cli" || n.Submission != "b7" || n.Message != "kv ready" || len(n.Epoch) != 16 || n.ID == 0 {
		t.Fatalf("received %+v", n)
	}
}

// The sender reports delivered only after the receiver's answer: with
// the receiver held after queueing, Notify has not returned.
func TestNotifyDeliveredOnlyAfterAck(t *testing.T) {
	queued, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // a failure must not leave the server held
	s, c := notifyServer(t, roomy, func(p hookPoint, _ *wire.Header, _ net.Conn) {
		if p == hookNotifyQueued {
			close(queued)
			<-release
		}
	})
	done := make(chan Delivery, 1)
	go func() {
		d, _ := c.Notify(context.Background(), "b1", "m")
		done <- d
	}()
	<-queued
	if s.inbox.Len() != 1 {
		t.Fatalf("inbox holds %d at the hook, want 1", s.inbox.Len())
	}
	select {
	case d := <-done:
		t.Fatalf("Notify returned %s before the receiver answered", d)
	case <-time.After(100 * time.Millisecond):
	}
	once.Do(func() { close(release) })
	if d := <-done; d != Delivered {
		t.Fatalf("Notify = %s after the answer, want delivered", d)
	}
}

// A full inbox answers busy and queues nothing; each bound on its own.
func TestNotifyBusyWhenFull(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  InboxLimits
		msgs []string // the last one is refused
		why  string
	}{
		{"total", InboxLimits{Max: 2, MaxPerSender: 8, MaxBytes: 1024}, []string{"a", "b", "c"}, "2 notifications pending, the limit"},
		{"per sender", InboxLimits{Max: 8, MaxPerSender: 1, MaxBytes: 1024}, []string{"a", "b"}, "per-sender limit"},
		// Each holds its message, its submission ("s") and the sender name.
		{"bytes", InboxLimits{Max: 8, MaxPerSender: 8, MaxBytes: 14}, []string{"0123456", "0123"}, "would pass the 14 limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := notifyServer(t, tc.lim, nil)
			last := len(tc.msgs) - 1
			for _, m := range tc.msgs[:last] {
				if d, err := c.Notify(context.Background(), "s", m); d != Delivered {
					t.Fatalf("Notify(%q) = %s, %v", m, d, err)
				}
			}
			d, err := c.Notify(context.Background(), "s", tc.msgs[last])
			if d != Busy || err == nil || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Notify past the bound = %s, %v; want busy naming %q", d, err, tc.why)
			}
			if errors.Is(err, ErrRefused) {
				t.Fatalf("busy is %v: it matches ErrRefused, but it may be sent again", err)
			}
			if s.inbox.Len() != last || s.Stats().Full != 1 {
				t.Fatalf("inbox %d (want %d), full %d (want 1)", s.inbox.Len(), last, s.Stats().Full)
			}
			// Reading one makes room again, on the same connection.
			if _, err := s.Notification(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d, err := c.Notify(context.Background(), "s", tc.msgs[last]); d != Delivered {
				t.Fatalf("Notify after a read = %s, %v", d, err)
			}
		})
	}
}

// A reply lost after the receiver queued: the sender cannot know, so
// unknown (and the Conn is not reused).
func TestNotifyLostReplyIsUnknown(t *testing.T) {
	s, c := notifyServer(t, roomy, func(p hookPoint, _ *wire.Header, conn net.Conn) {
		if p == hookNotifyQueued {
			conn.Close()
		}
	})
	d, err := c.Notify(context.Background(), "s", "m")
	if d != Unknown || err == nil {
		t.Fatalf("Notify = %s, %v; want unknown", d, err)
	}
	if s.inbox.Len() != 1 {
		t.Fatalf("inbox %d, want 1 (it was queued; only the answer was lost)", s.inbox.Len())
	}
	if d, err := c.Notify(context.Background(), "s", "m2"); d != NotSent || errors.Is(err, ErrRefused) {
		t.Fatalf("Notify on the failed Conn = %s, %v; want not_sent, not refused (nothing was posted)", d, err)
	}
}

func TestNotifyTooLargeNotSent(t *testing.T) {
	s, c := notifyServer(t, roomy, nil)
	d, err := c.Notify(context.Background(), "s", strings.Repeat("x", 17))
	if d != NotSent || err == nil || !strings.Contains(err.Error(), "over the receiver's 16") {
		t.Fatalf("Notify = %s, %v; want not_sent, too large", d, err)
	}
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("a too large notification: %v, want ErrRefused (sending it again would be refused again)", err)
	}
	if s.inbox.Len() != 0 {
		t.Fatalf("inbox %d, want 0", s.inbox.Len())
	}
	if d, err := c.Notify(context.Background(), "s", "ok"); d != Delivered {
		t.Fatalf("next Notify = %s, %v (the connection should stay in step)", d, err)
	}
}

func TestInboxNextWaits(t *testing.T) {
	b := NewInbox(roomy)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on an empty inbox = %v, want the context's end", err)
	}
	got := make(chan Notification, 1)
	go func() {
		n, _ := b.Next(context.Background())
		got <- n
	}()
	if err := b.Put(Notification{Sender: "a", ID: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(Notification{Sender: "a", ID: 2}); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n.ID != 1 {
		t.Fatalf("first Next got id %d, want 1 (FIFO)", n.ID)
	}
	if n, _ := b.Next(context.Background()); n.ID != 2 {
		t.Fatalf("second Next got id %d, want 2", n.ID)
	}
}

// The byte bound covers everything a notification holds in the inbox,
// not its message alone: the submission (up to 64 KiB of the frame's
// metadata) and the sender's name come from the sender too.
func TestInboxBytesCountSubmissionAndSender(t *testing.T) {
	b := NewInbox(InboxLimits{Max: 100, MaxPerSender: 100, MaxBytes: 1000})
	long := strings.Repeat("s", 600)
	if err := b.Put(Notification{Sender: "a", ID: 1, Submission: long}); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(Notification{Sender: "a", ID: 2, Submission: long}); !errors.Is(err, ErrInboxFull) {
		t.Fatalf("a second 600-byte submission into 1000 bytes: %v, want inbox full", err)
	}
	if err := b.Put(Notification{Sender: long, ID: 3}); !errors.Is(err, ErrInboxFull) {
		t.Fatalf("a 600-byte sender name into the 400 bytes left: %v, want inbox full", err)
	}
	if n, _ := b.Next(context.Background()); n.ID != 1 {
		t.Fatalf("got %d", n.ID)
	}
	if err := b.Put(Notification{Sender: "a", ID: 2, Submission: long}); err != nil {
		t.Fatalf("after the first was read, its bytes are free again: %v", err)
	}
}
