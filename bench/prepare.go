// prepare.go owns the one way bench creates or grows a file: Prepare,
// behind the explicit --create flag.
//
// Invariants:
//   - Prepare never truncates and never rewrites bytes below the file's
//     current size; it only creates a missing file and appends.
//   - Appended bytes are written data (not holes or unwritten extents),
//     so reads hit the device and writes overwrite allocated blocks.

package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
)

// Prepare makes path a regular file of at least size bytes: it creates it
// (mode 0644) when missing and appends pseudo-random bytes up to size when
// it is shorter. It returns how many bytes it wrote; a file already size
// bytes or longer is left untouched. The parent directory must exist.
func Prepare(path string, size uint64) (uint64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("--create: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("--create: %w", err)
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("--create: %s is not a regular file", path)
	}
	cur := uint64(st.Size())
	if cur >= size {
		return 0, nil
	}
	rng := rand.NewChaCha8([32]byte{'o', 'r', 'b', 'i', 't', 'e'})
	chunk := make([]byte, 4<<20)
	for off := cur; off < size; {
		n := min(uint64(len(chunk)), size-off)
		rng.Read(chunk[:n])
		if _, err := f.WriteAt(chunk[:n], int64(off)); err != nil {
			return off - cur, fmt.Errorf("--create: %w", err)
		}
		off += n
	}
	if err := f.Sync(); err != nil {
		return size - cur, fmt.Errorf("--create: %w", err)
	}
	return size - cur, f.Close()
}
