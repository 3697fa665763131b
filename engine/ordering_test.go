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

	"github.com/orbitefs/orbitefs/engine"
)

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
