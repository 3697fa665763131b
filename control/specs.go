// specs.go owns the two creator documents: memory/register and
// segments/open. Like Submission they are specs: parsed, validated, pure
// data; Service turns them into engine objects.

package control

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// MemorySpec is the document written to /memory/register.
type MemorySpec struct {
	Name     string      `json:"name"`
	Location string      `json:"location"`
	Bytes    config.Size `json:"bytes"`
	// Shm maps an existing file (normally under /dev/shm) MAP_SHARED
	// instead of allocating private memory; cpu only.
	Shm string `json:"shm,omitempty"`
	// CUDAIPCHandle imports another process's CUDA allocation (the 64-byte
	// cuIpcGetMemHandle handle as 128 hex digits); cuda:N only.
	CUDAIPCHandle string `json:"cuda_ipc_handle,omitempty"`
	// Export says what peers may do with it: none (the default), read,
	// write or read_write. A peer reaches a cuda:N registration
	// through this daemon's pinned copy staging, or, on this host,
	// through CUDA IPC.
	Export string `json:"export,omitempty"`
}

// Location kinds.
const (
	LocationCPU    = "cpu"
	LocationPinned = "pinned"
	cudaPrefix     = "cuda:"
)

// ParseMemorySpec decodes and validates a register document. Whether the
// machine can serve pinned or cuda:N is the engine's answer
// (KindUnavailable, at registration); every problem here is KindInvalid
// (KindTooLarge for size).
func ParseMemorySpec(data []byte, max int) (*MemorySpec, error) {
	var m MemorySpec
	if err := decodeStrict(data, max, &m); err != nil {
		return nil, err
	}
	if err := ValidateName(m.Name); err != nil {
		return nil, invalid("%v", err)
	}
	if m.Bytes == 0 {
		return nil, invalid("bytes is missing or 0: want a size like 1048576 or \"1MiB\"")
	}
	switch {
	case m.Location == LocationCPU:
		if m.CUDAIPCHandle != "" {
			return nil, invalid("cuda_ipc_handle needs location \"cuda:N\", not %s", quoteText(m.Location, quoteRunes))
		}
		if m.Shm != "" && !filepath.IsAbs(m.Shm) {
			return nil, invalid("shm %s: want an absolute path such as /dev/shm/NAME", quoteText(m.Shm, 200))
		}
	case m.Location == LocationPinned:
		if m.Shm != "" || m.CUDAIPCHandle != "" {
			return nil, invalid("location pinned takes neither shm nor cuda_ipc_handle")
		}
	case strings.HasPrefix(m.Location, cudaPrefix):
		n, err := strconv.Atoi(strings.TrimPrefix(m.Location, cudaPrefix))
		if err != nil || n < 0 {
			return nil, invalid("location %s: want cpu, pinned or cuda:N with N a device index", quoteText(m.Location, quoteRunes))
		}
		if m.Shm != "" {
			return nil, invalid("shm goes with location cpu, not %s", quoteText(m.Location, quoteRunes))
		}
		if _, err := engine.ParseLocation(m.Location); err != nil {
			return nil, invalid("%v", err)
		}
		if h := m.CUDAIPCHandle; h != "" {
			if b, err := hex.DecodeString(h); err != nil || len(b) != 64 {
				return nil, invalid("cuda_ipc_handle: want the 64-byte handle as 128 hex digits, got %d characters", len(h))
			}
		}
	case m.Location == "":
		return nil, invalid("location is missing: want cpu, pinned or cuda:N")
	default:
		return nil, invalid("location %s: want cpu, pinned or cuda:N", quoteText(m.Location, quoteRunes))
	}
	switch m.Export {
	case "", ExportNone, "read", "write", "read_write":
	default:
		return nil, invalid("export %q: want \"none\", \"read\", \"write\" or \"read_write\"", m.Export)
	}
	return &m, nil
}

// ExportNone is the export of a registration peers cannot reach.
const ExportNone = "none"

// SegmentSpec is the document written to /segments/open.
type SegmentSpec struct {
	Name       string `json:"name"`
	URI        string `json:"uri"`
	Permission string `json:"permission"`
}

// ParsePermission maps "read", "write" and "read_write".
func ParsePermission(s string) (engine.Permission, error) {
	switch s {
	case "read":
		return engine.PermRead, nil
	case "write":
		return engine.PermWrite, nil
	case "read_write":
		return engine.PermReadWrite, nil
	case "":
		return 0, fmt.Errorf("permission is missing: want \"read\", \"write\" or \"read_write\"")
	}
	return 0, fmt.Errorf("permission %s: want \"read\", \"write\" or \"read_write\"", quoteText(s, quoteRunes))
}

// maxURIBytes bounds a segment's uri: "file://" and a PATH_MAX path.
const maxURIBytes = len("file://") + 4096

// ParseSegmentSpec decodes and validates an open document. The URI's
// path is checked by the engine (existence, allowed roots).
func ParseSegmentSpec(data []byte, max int) (*SegmentSpec, engine.Permission, error) {
	var s SegmentSpec
	if err := decodeStrict(data, max, &s); err != nil {
		return nil, 0, err
	}
	if err := ValidateName(s.Name); err != nil {
		return nil, 0, invalid("%v", err)
	}
	if s.URI == "" {
		return nil, 0, invalid("uri is missing: want file:///absolute/path, mem://MEMORY or tcp://HOST:PORT/REGION")
	}
	if len(s.URI) > maxURIBytes {
		// Refused before anything quotes it whole.
		return nil, 0, invalid("uri %s: longer than %d bytes (a path is at most PATH_MAX)", quoteText(s.URI, quoteRunes), maxURIBytes)
	}
	if mem, ok := strings.CutPrefix(s.URI, "mem://"); ok {
		if err := ValidateName(mem); err != nil {
			return nil, 0, invalid("uri %s: memory name: %v", quoteText(s.URI, 300), err)
		}
	} else if _, ok, err := ParseRemoteURI(s.URI); ok {
		if err != nil {
			return nil, 0, err
		}
	} else if _, err := engine.ParseFileURI(s.URI); err != nil {
		return nil, 0, invalid("%v", err)
	}
	perm, err := ParsePermission(s.Permission)
	if err != nil {
		return nil, 0, invalid("%v", err)
	}
	return &s, perm, nil
}
