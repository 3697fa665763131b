// ipcmap.go owns the metadata of the CUDA IPC mapping frames: a client
// that maps an exported region's CUDA IPC handle says so before its
// first copy, and says when it closed the mapping, so the exporter never
// frees memory a peer may still copy into.
//
// Invariants:
//   - Like every message, decoding consumes the metadata exactly.

package wire

// IPCMap names the region (its descriptor id) a TypeIPCMap or
// TypeIPCUnmap is about. One map request counts one mapping (a client
// maps a region once per local device); each unmap returns one.
type IPCMap struct {
	Region uint64
}

func (m *IPCMap) Marshal() []byte {
	var e enc
	e.u64(m.Region)
	return e.b
}

func (m *IPCMap) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Region = d.u64("ipc map region")
	return d.done("ipc map")
}
