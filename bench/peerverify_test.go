package bench

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/peer"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// The pattern is the same whatever the alignment of the buffer's start,
// and differs by offset and by key.
func TestFillPattern(t *testing.T) {
	whole := make([]byte, 64)
	fillPattern(whole, 0, 7)
	for start := range 16 {
		part := make([]byte, 64-start-3)
		fillPattern(part, uint64(start), 7)
		if string(part) != string(whole[start:start+len(part)]) {
			t.Fatalf("offset %d: pattern differs from the whole buffer's", start)
		}
	}
	other := make([]byte, 64)
	fillPattern(other, 0, 8)
	if string(other) == string(whole) {
		t.Fatal("keys 7 and 8 give the same pattern")
	}
	fillPattern(other, 64, 7)
	if string(other) == string(whole) {
		t.Fatal("offsets 0 and 64 give the same pattern")
	}
}

// faultyMem is a test backend that, every nth call of its kind, breaks
// what it was asked to do while answering success: it flips a byte of a
// WRITE, drops a WRITE to an offset written before (so the region holds
// the same offset's older bytes), or flips a byte of what a READ returns.
type faultyMem struct {
	mem
	fault   string // flip-write, drop-rewrite, flip-read or "" (none)
	n       int
	mu      sync.Mutex
	calls   int
	written map[int64]bool
}

func (f *faultyMem) rewrite(off int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.written == nil {
		f.written = map[int64]bool{}
	}
	again := f.written[off]
	f.written[off] = true
	return again
}

func (f *faultyMem) hit() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.n > 0 && f.calls%f.n == 0
}

func (f *faultyMem) WriteAt(p []byte, off int64) (int, error) {
	switch {
	case f.fault == "drop-rewrite" && f.rewrite(off) && f.hit():
		return len(p), nil
	case f.fault == "flip-write" && f.hit():
		q := append([]byte(nil), p...)
		q[len(q)/2] ^= 0x10
		return f.mem.WriteAt(q, off)
	}
	return f.mem.WriteAt(p, off)
}

func (f *faultyMem) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.mem.ReadAt(p, off)
	if f.fault == "flip-read" && f.hit() {
		p[0] ^= 1
	}
	return n, err
}

// A --verify run over a real server moves and checks bytes, and sees the
// region go wrong behind its back: a flipped byte in a WRITE, a WRITE
// acknowledged but never applied (the slot keeps an older round of the
// same offset), a flipped byte in a READ.
func TestRunPeerVerify(t *testing.T) {
	const region, size = 4 << 20, 64 << 10
	for _, tc := range []struct {
		op, fault string
		bad       bool
	}{
		{"write", "", false},
		{"read", "", false},
		{"write", "flip-write", true},
		{"write", "drop-rewrite", true},
		{"write", "flip-read", true},
		{"read", "flip-write", true},
		{"read", "flip-read", true},
	} {
		t.Run(tc.op+"/"+tc.fault, func(t *testing.T) {
			key := []byte("a key for the bench verify test, long enough")
			m := &faultyMem{mem: mem{b: make([]byte, region)}, fault: tc.fault, n: 5}
			exp := oneExport{peer.Export{Descriptor: wire.Descriptor{ID: 1, Name: "kv", Location: "cpu", Bytes: region, Perm: wire.PermReadWrite},
				Mem: m}}
			s := peer.NewServer(peer.ServerConfig{Name: "srv", Key: key, IOTimeout: 10 * time.Second, MaxSlice: peer.DefaultMaxSlice}, exp)
			if err := s.Listen("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c, err := peer.Dial(context.Background(), s.Addr().String(), peer.Config{Name: "cli", Key: key, Lanes: 2, IOTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r, err := RunPeer(context.Background(), c, PeerOptions{Op: tc.op, Region: "kv", RegionBytes: region, Size: size,
				Concurrency: 3, Runtime: 10 * time.Second, Verify: true, Total: 32 << 20})
			v := r.Verify
			if v == nil {
				t.Fatalf("no verify result: %+v, %v", r, err)
			}
			if v.MovedBytes < 32<<20 || v.CheckedBytes == 0 || v.Seconds >= 10 {
				t.Fatalf("moved %d, checked %d in %.1f s: want 32 MiB moved before the runtime ended", v.MovedBytes, v.CheckedBytes, v.Seconds)
			}
			if !tc.bad {
				if err != nil || v.MismatchedBytes != 0 || v.MismatchedRequests != 0 || v.FirstMismatch != -1 {
					t.Fatalf("clean region: %+v, %v", v, err)
				}
				return
			}
			if v.MismatchedBytes == 0 || v.MismatchedRequests == 0 || v.FirstMismatch < 0 {
				t.Fatalf("%s: no mismatch seen: %+v", tc.fault, v)
			}
			if err == nil || !strings.Contains(err.Error(), "mismatched") {
				t.Fatalf("%s: %d mismatches but err %v", tc.fault, v.MismatchedBytes, err)
			}
			if !strings.Contains(r.String(), "mismatched bytes") {
				t.Fatalf("text output lacks the mismatches: %s", r)
			}
		})
	}
}

func TestPeerOptionsValidateVerify(t *testing.T) {
	ok := PeerOptions{Op: "write", RegionBytes: 1 << 20, Size: 4096, Concurrency: 1, Runtime: time.Second, Verify: true}
	for _, tc := range []struct {
		name string
		edit func(*PeerOptions)
		want string
	}{
		{"ok", func(*PeerOptions) {}, ""},
		{"stream", func(o *PeerOptions) { o.Stream = 4096 }, "--verify with --stream"},
		{"slots", func(o *PeerOptions) { o.Size, o.Concurrency = 512<<10, 3 }, "fewer than --concurrency 3"},
		{"total", func(o *PeerOptions) { o.Verify, o.Total = false, 1<<30 }, "--total needs --verify"},
		{"notify", func(o *PeerOptions) { o.Op, o.Count = "notify", 10 }, "--verify and --total are for"},
	} {
		o := ok
		tc.edit(&o)
		err := o.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
