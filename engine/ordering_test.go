// ordering_test.go checks that a batch's results equal strict FIFO
// execution when groups reach one file through different entries (another
// permission, a hard link): fences compare the file, not the entry.

package engine_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestFenceAcrossEntries: 256 write/read pairs through different entries
// of one file, every read after the write of its bytes. It can only catch
// a missing fence by chance (when the ring reorders a pair), and never on
// tmpfs, where each small group is copied inside its Submit;
// TestFenceAcrossEntriesHeld checks the fence deterministically.
func TestFenceAcrossEntries(t *testing.T) {
	needIOUring(t)
	for fsName, dir := range filesystems(t) {
		t.Run(fsName, func(t *testing.T) {
			e := newEngine(t, nil)
			const pairs = 256
			path, _ := randomFile(t, dir, "f", pairs*4096)
			link := filepath.Join(dir, "hardlink")
			if err := os.Link(path, link); err != nil {
				t.Fatal(err)
			}
			rw := openSeg(t, e, path, engine.PermReadWrite)
			readers := []*engine.Segment{openSeg(t, e, path, engine.PermRead), openSeg(t, e, link, engine.PermRead)}
			src := register(t, e, pairs*4096)
			dst := register(t, e, pairs*4096)
			data := make([]byte, pairs*4096)
			rand.Read(data)
			src.WriteAt(data, 0)
			b, _ := e.AllocateBatch(2 * pairs)
			for i := uint64(0); i < pairs; i++ {
				off := i * 4096
				if _, err := b.Submit(engine.OpWrite, rw, []engine.Request{{Address: src.BaseAddress() + off, TargetOffset: off, Length: 4096}}, nil, ioTimeout); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Submit(engine.OpRead, readers[i%2], []engine.Request{{Address: dst.BaseAddress() + off, TargetOffset: off, Length: 4096}}, nil, ioTimeout); err != nil {
					t.Fatal(err)
				}
			}
			b.Seal()
			if st, err := b.Wait(ioTimeout); st != engine.StateCompleted {
				t.Fatalf("state %v %v", st, err)
			}
			got := regionBytes(t, dst)
			stale := 0
			for i := 0; i < pairs; i++ {
				if !bytes.Equal(got[i*4096:(i+1)*4096], data[i*4096:(i+1)*4096]) {
					stale++
				}
			}
			if stale > 0 {
				t.Fatalf("%d of %d reads through another entry overtook the write before them", stale, pairs)
			}
		})
	}
}

// TestFenceAcrossEntriesHeld is the deterministic form of the fence
// above, on a file in memory: a WRITE through one entry is held in
// flight (dispatched, its bytes not yet written) while a small READ of
// the same bytes arrives through a hard link's entry. The READ is
// eligible for the caller copy, so without a fence comparing the file
// (not the entry) it would copy the old bytes inside Submit; with it,
// it waits for the WRITE.
func TestFenceAcrossEntriesHeld(t *testing.T) {
	dir := tmpfsDir(t)
	spy := &spyTransport{FileTransport: realTransports(config.DefaultEngine())[0].(engine.FileTransport)}
	e := newEngine(t, nil, spy)
	const n = 1 << 20 // above caller_fast_path_bytes: the WRITE takes the ring
	path, _ := randomFile(t, dir, "f", n)
	link := filepath.Join(dir, "hardlink")
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	rw := openSeg(t, e, path, engine.PermReadWrite)
	reader := openSeg(t, e, link, engine.PermRead)
	src, dst := register(t, e, n), register(t, e, 4096)
	data := make([]byte, n)
	rand.Read(data)
	src.WriteAt(data, 0)
	h := holdFirstWrite(spy)
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	go b.Submit(engine.OpWrite, rw, []engine.Request{{Address: src.BaseAddress(), Length: n}}, nil, ioTimeout)
	<-h.held
	if _, err := b.Submit(engine.OpRead, reader, []engine.Request{{Address: dst.BaseAddress(), TargetOffset: n - 4096, Length: 4096}}, nil, ioTimeout); err != nil {
		close(h.release)
		t.Fatal(err)
	}
	ts, _ := b.TaskStatus(1)
	close(h.release)
	if ts.State == engine.TaskCompleted {
		t.Error("the READ through the hard link completed while the WRITE of its bytes was still held before the kernel")
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if !bytes.Equal(regionBytes(t, dst), data[n-4096:]) {
		t.Fatal("the READ through the hard link overtook the WRITE before it")
	}
}
