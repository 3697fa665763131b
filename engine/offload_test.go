package engine_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
)

// TestLargeBufferedOpsOffloaded: a large request through the page cache
// runs on the kernel's worker threads (offload.go), so several copy on
// several cores; a small one, and any O_DIRECT one, stays inline. The
// bytes moved are the same either way, for reads and writes. The
// requests ask for io_uring: left to the engine, 4 MiB on tmpfs would go
// to the host copy lanes (hostcopy.go).
func TestLargeBufferedOpsOffloaded(t *testing.T) {
	needIOUring(t)
	const big, small = 4 << 20, 4096
	for name, dir := range filesystems(t) {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, nil)
			path, data := randomFile(t, dir, "f", 2*big+small)
			s := openSeg(t, e, path, engine.PermReadWrite)
			info, err := e.FileSegmentInfo(s)
			if err != nil {
				t.Fatal(err)
			}
			r := register(t, e, 2*big+small)
			base := r.BaseAddress()
			reqs := []engine.Request{
				{Transport: engine.TransportIOUring, Address: base, TargetOffset: 0, Length: big},
				{Transport: engine.TransportIOUring, Address: base + big, TargetOffset: big, Length: big},
				{Transport: engine.TransportIOUring, Address: base + 2*big, TargetOffset: 2 * big, Length: small},
			}
			before := e.Stats().IOUring.OffloadedOps
			if _, err := e.SubmitAndWait(engine.OpRead, s, reqs, ioTimeout); err != nil {
				t.Fatal(err)
			}
			if got := regionBytes(t, r); !bytes.Equal(got, data) {
				t.Fatal("read: region does not hold the file's bytes")
			}
			want := uint64(2) // the two 4 MiB requests, not the 4 KiB one
			if info.DirectIO {
				want = 0 // aligned requests go through the O_DIRECT fd
			}
			if got := e.Stats().IOUring.OffloadedOps - before; got != want {
				t.Fatalf("read: %d ops offloaded, want %d (direct %v)", got, want, info.DirectIO)
			}

			// Write different bytes back the same way.
			fresh := make([]byte, len(data))
			for i := range fresh {
				fresh[i] = data[i] ^ 0xa5
			}
			if _, err := r.WriteAt(fresh, 0); err != nil {
				t.Fatal(err)
			}
			before = e.Stats().IOUring.OffloadedOps
			if _, err := e.SubmitAndWait(engine.OpWrite, s, reqs, ioTimeout); err != nil {
				t.Fatal(err)
			}
			if got := e.Stats().IOUring.OffloadedOps - before; got != want {
				t.Fatalf("write: %d ops offloaded, want %d", got, want)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, fresh) {
				t.Fatal("write: file does not hold the region's bytes")
			}
		})
	}
}
