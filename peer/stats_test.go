package peer

import (
	"context"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// A tracked Conn shows its bytes, frames, RTT and lanes; the server shows
// the session's; an error reply counts on both; Close unlists the Conn.
func TestConnAndSessionStats(t *testing.T) {
	var exp memExports
	exp.add(1, "kv", 4<<20, wire.PermReadWrite)
	exp.add(2, "ro", 4096, wire.PermRead)
	s, _ := startServer(t, &exp, "127.0.0.1:0", testKey)
	tr := NewTracker()
	c, err := Dial(context.Background(), addrOf(s), Config{Name: "cli", Key: testKey, Lanes: 2, IOTimeout: 10 * time.Second, Tracker: tr})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(context.Background(), "kv", 0, pattern(1<<20, 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Read(context.Background(), "kv", 0, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(context.Background(), "ro", 0, []byte("x")); err == nil {
		t.Fatal("a write to a read-only region succeeded")
	}
	cs := tr.Conns()
	if len(cs) != 1 {
		t.Fatalf("%d tracked conns, want 1", len(cs))
	}
	st := cs[0]
	if st.BytesSent < 1<<20 || st.BytesReceived < 4096 || st.Frames < 4 || st.Errors != 1 ||
		st.RTTMicros <= 0 || st.OpenLanes != 2 || st.Lanes != 2 || st.Name != "srv" || st.State != "connected" {
		t.Fatalf("conn stats %+v", st)
	}
	ss := s.Sessions()
	if len(ss) != 1 || ss[0].Name != "cli" || ss[0].BytesReceived != 1<<20 ||
		ss[0].BytesSent != 4096 || ss[0].Errors != 1 || ss[0].Lanes != 2 {
		t.Fatalf("session stats %+v", ss)
	}
	c.Close()
	if n := len(tr.Conns()); n != 0 {
		t.Fatalf("%d conns tracked after Close", n)
	}
}
