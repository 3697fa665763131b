// key.go owns reading the shared key from its file.

package peer

import (
	"bytes"
	"fmt"
	"os"
)

// MinKeyLen is the shortest key accepted (after trimming white space).
const MinKeyLen = 16

// LoadKey reads the shared secret from path. The file must not be
// readable by group or others, and holds at least MinKeyLen bytes;
// surrounding white space (a trailing newline) is not part of the key.
func LoadKey(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("key file %s: mode %#o lets others read the key; chmod 600 it", path, m)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinKeyLen {
		return nil, fmt.Errorf("key file %s: %d bytes of key, want at least %d (for example: head -c 32 /dev/urandom | base64 > %s)", path, len(b), MinKeyLen, path)
	}
	return b, nil
}
