// types.go owns the small value types of the public API: operations,
// permissions, transports, requests and their vector elements.

package engine

import "fmt"

// Op is the direction of a transfer, seen from local memory.
type Op uint8

const (
	// OpRead moves target (file) bytes into local memory.
	OpRead Op = iota
	// OpWrite moves local memory bytes into the target.
	OpWrite
)

func (o Op) String() string {
	if o == OpWrite {
		return "write"
	}
	return "read"
}

// Permission is what a segment allows.
type Permission uint8

const (
	PermRead      Permission             = 1 << iota // RemoteRead: OpRead only
	PermWrite                                        // RemoteWrite: OpWrite only
	PermReadWrite = PermRead | PermWrite             // RemoteReadWrite
)

func (p Permission) String() string {
	switch p {
	case PermRead:
		return "read"
	case PermWrite:
		return "write"
	case PermReadWrite:
		return "read_write"
	}
	return fmt.Sprintf("permission(%d)", uint8(p))
}

// allows reports whether op is permitted.
func (p Permission) allows(op Op) bool {
	if op == OpWrite {
		return p&PermWrite != 0
	}
	return p&PermRead != 0
}

// TransportKind selects a data path. TransportUnspec lets the engine
// choose (eligible GDS first, then io_uring).
type TransportKind uint8

const (
	TransportUnspec TransportKind = iota
	TransportIOUring
	TransportGDS
	// TransportMemory is the local memory transport of memory segments
	// (memgroup.go); tasks report it, requests cannot ask for it.
	TransportMemory
	// TransportCopy: the bytes of a file that lives in memory were copied
	// with pread/pwrite, by the submitting goroutine (callercopy.go) or by
	// the host copy lanes (hostcopy.go); tasks report it, requests cannot
	// ask for it.
	TransportCopy
	// TransportTCP: a peer's region over the peer protocol (peerexec.go);
	// tasks report it, requests cannot ask for it.
	TransportTCP
	// TransportCUDAIPC: device memory and a same-host peer's device
	// region, copied on the GPU through CUDA IPC (ipcexec.go; the
	// reference design's NVLink transport); tasks report it, requests
	// cannot ask for it.
	TransportCUDAIPC
	// TransportMapped: device memory and a tmpfs file, copied by DMA from
	// and into the file's own pages (mappedexec.go); tasks report it,
	// requests cannot ask for it.
	TransportMapped
)

func (t TransportKind) String() string {
	switch t {
	case TransportMemory:
		return "memory"
	case TransportCopy:
		return "copy"
	case TransportTCP:
		return "tcp"
	case TransportCUDAIPC:
		return "cuda_ipc"
	case TransportMapped:
		return "mapped"
	case TransportIOUring:
		return "io_uring"
	case TransportGDS:
		return "gds"
	}
	return "unspec"
}

// Element is one piece of a vectored request, in file order: either a
// registered local range (Address, Length) or Padding bytes of file that
// are zero-filled on write and discarded on read. Exactly one of Length
// and Padding is nonzero.
type Element struct {
	Address uint64
	Length  uint64
	Padding uint64
}

// Range returns a local-range element.
func Range(address, length uint64) Element { return Element{Address: address, Length: length} }

// Pad returns a padding element of n bytes.
func Pad(n uint64) Element { return Element{Padding: n} }

// bytes is the element's extent in the file.
func (e Element) bytes() uint64 { return e.Length + e.Padding }

// Request is one public transfer: Length bytes between local memory at
// Address and the target at TargetOffset, or, when Elements is not
// empty, a vector covering one contiguous target extent starting at
// TargetOffset (Address and Length are then ignored).
type Request struct {
	Transport    TransportKind
	Address      uint64
	TargetOffset uint64
	Length       uint64
	Elements     []Element
	// Producer, when set, is the producer's readiness event for the
	// request's device memory (for example the event recorded after the
	// kernel that wrote a KV block): the engine waits for it before it
	// touches that memory. Only requests touching device memory may
	// carry one; a failed wait fails the task with nothing moved.
	Producer Event
}

// Vector builds a vectored request.
func Vector(t TransportKind, targetOffset uint64, elems ...Element) Request {
	return Request{Transport: t, TargetOffset: targetOffset, Elements: elems}
}

// extent is the request's contiguous length in the target.
func (r *Request) extent() uint64 {
	if len(r.Elements) == 0 {
		return r.Length
	}
	var n uint64
	for _, e := range r.Elements {
		n += e.bytes()
	}
	return n
}

// Notification is a completion message attached to a submission. Local
// file targets reject it (spec: "local files reject attached
// notifications"); it exists for network peers.
type Notification struct {
	Name string
	Data []byte
}

// RemoteEffect tells what a failed task may have done to the target.
type RemoteEffect uint8

const (
	// EffectNone: the target was not changed, or the op was a READ.
	EffectNone RemoteEffect = iota
	// EffectUnknown: a WRITE was submitted and may have changed the target.
	EffectUnknown
	// EffectApplied: a WRITE changed the target, and only by the bytes it
	// confirmed (transferred_bytes; for a group, its tasks' bytes).
	EffectApplied
)

func (r RemoteEffect) String() string {
	switch r {
	case EffectUnknown:
		return "unknown"
	case EffectApplied:
		return "applied"
	}
	return "none"
}
