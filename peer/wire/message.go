// message.go owns the typed metadata of each frame type and its binary
// encoding: fixed-width little-endian integers, strings as a uint16
// length and bytes.
//
// Invariants:
//   - Decoding consumes the metadata exactly: a short buffer, a length
//     past its end or trailing bytes wrap ErrCorrupt, never panic.

package wire

import (
	"encoding/binary"
	"fmt"
)

// NonceLen is the size of a hello or challenge nonce.
const NonceLen = 32

// ProofLen is the size of an HMAC-SHA256 proof.
const ProofLen = 32

// Role says what a connection is for.
type Role uint8

// The connection roles.
const (
	RoleControl Role = 1 // descriptors and keep-alive; one per peer
	RoleLane    Role = 2 // data: READ and WRITE
)

// Hello opens every connection (client to server).
type Hello struct {
	Name    string
	Epoch   uint64
	Role    Role
	Session uint64 // a lane names its control connection's session; 0 for control
	Nonce   [NonceLen]byte
	// Protect is the frame protection the client runs; sent only when
	// not ProtectNone, so a hello without it is the original one.
	Protect Protection
}

// Challenge answers a hello (server to client): the server's identity,
// its nonce, and its proof that it holds the key too.
type Challenge struct {
	Name  string
	Epoch uint64
	Nonce [NonceLen]byte
	Proof [ProofLen]byte
	// Protect echoes the hello's frame protection once the server
	// agreed to it; sent only when not ProtectNone.
	Protect Protection
}

// Auth is the client's proof.
type Auth struct {
	Proof [ProofLen]byte
}

// Welcome says the server accepted the client, and the largest payload
// it accepts in one frame (the client cuts its slices to fit).
type Welcome struct {
	Session    uint64
	MaxPayload uint64
}

// Perm is what peers may do with an exported region.
type Perm uint8

// The permissions. PermNone is never exported.
const (
	PermNone      Perm = 0
	PermRead      Perm = 1
	PermWrite     Perm = 2
	PermReadWrite Perm = PermRead | PermWrite
)

func (p Perm) String() string {
	switch p {
	case PermNone:
		return "none"
	case PermRead:
		return "read"
	case PermWrite:
		return "write"
	case PermReadWrite:
		return "read_write"
	}
	return fmt.Sprintf("perm(%d)", uint8(p))
}

// ParsePerm is the inverse of Perm.String.
func ParsePerm(s string) (Perm, error) {
	for _, p := range []Perm{PermNone, PermRead, PermWrite, PermReadWrite} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("export %q: want none, read, write or read_write", s)
}

// Descriptor describes one exported region. ID is unique among the
// server's registrations for its epoch: a region unregistered and
// registered again under the same name gets a new ID, so an old
// descriptor never reaches the new memory.
type Descriptor struct {
	ID       uint64
	Name     string
	Location string
	Bytes    uint64
	Perm     Perm
	// IPC is the region's CUDA IPC handle (IPCHandleLen bytes), sent
	// only for device memory and only to a client that named this
	// server's host in its RegionsQuery; empty otherwise.
	IPC []byte
}

// IPCHandleLen is the size of a CUDA IPC handle.
const IPCHandleLen = 64

// RegionsQuery is the metadata of a TypeRegions request: the client's
// host identity (its boot id), so the server knows whether a CUDA IPC
// handle can be opened there, and the capabilities it speaks. Empty
// metadata (no host) is valid, and so is a host without capabilities
// (a client from before they existed): each newer field is optional at
// the end, so a newer server reads an older client's query.
type RegionsQuery struct {
	Host string
	Caps Caps
}

// Caps are the optional parts of the protocol a client speaks.
type Caps uint64

// CapIPCMap: the client announces each CUDA IPC mapping it opens
// (TypeIPCMap, before its first copy) and closes (TypeIPCUnmap). A
// server sends CUDA IPC handles only to clients that have it, so it
// always knows who maps its regions.
const CapIPCMap Caps = 1 << 0

// Regions is the reply to TypeRegions.
type Regions struct {
	List []Descriptor
}

// Read asks for [Offset, Offset+Length) of region Region.
type Read struct {
	Region, Offset, Length uint64
}

// Write asks to store the frame's payload at Offset of region Region.
type Write struct {
	Region, Offset uint64
}

// Pong answers a ping with the server's epoch.
type Pong struct {
	Epoch uint64
}

// Notify is a completion notification's metadata; its message is the
// frame's payload. The sender's name and epoch are not repeated: the
// receiver takes them from the session, where the sender proved them.
type Notify struct {
	ID         uint64 // unique per sender and epoch
	Submission string // the sender's submission the notification completes
}

// Code classifies a TypeError reply.
type Code uint8

// The error codes.
const (
	CodeInternal Code = 1 // the server failed (I/O on the region, ...)
	CodeNotFound Code = 2 // no exported region with that id (stale descriptor)
	CodeDenied   Code = 3 // the region is not exported for this operation
	CodeRange    Code = 4 // offset or length outside the region
	CodeBusy     Code = 5 // a local transfer holds those bytes
	CodeCorrupt  Code = 6 // the request frame failed a check
	CodeAuth     Code = 7 // authentication failed
	CodeProtocol Code = 8 // a frame out of place
	CodeTooLarge Code = 9 // over the server's frame limit
	CodeShutdown Code = 10
	CodeFull     Code = 11 // a notification inbox is full: the notification was not queued
	CodeCredit   Code = 12 // past the sender's receiver credit window: nothing was done
	maxKnownCode      = CodeCredit
)

var codeNames = map[Code]string{CodeInternal: "internal", CodeNotFound: "not found", CodeDenied: "denied",
	CodeRange: "range", CodeBusy: "busy", CodeCorrupt: "corrupt", CodeAuth: "auth", CodeProtocol: "protocol",
	CodeTooLarge: "too large", CodeShutdown: "shutting down", CodeFull: "inbox full", CodeCredit: "over credit"}

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Applied says whether an error reply's request may have changed the
// region: false means the server refused before touching it.
type Applied uint8

// The values of Error.Applied.
const (
	AppliedNone    Applied = 0
	AppliedUnknown Applied = 1
)

// Error is a failed request's reply.
type Error struct {
	Code    Code
	Applied Applied
	Message string
}

// enc appends fields.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) bytes(v []byte) {
	e.b = append(e.b, v...)
}
func (e *enc) str(s string) {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	e.b = binary.LittleEndian.AppendUint16(e.b, uint16(len(s)))
	e.b = append(e.b, s...)
}

// dec consumes fields; the first failure sticks.
type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("%w: metadata ends inside %s", ErrCorrupt, what)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8(what string) uint8 {
	if v := d.need(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) u64(what string) uint64 {
	if v := d.need(8, what); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *dec) fixed(dst []byte, what string) {
	if v := d.need(len(dst), what); v != nil {
		copy(dst, v)
	}
}

func (d *dec) str(what string) string {
	v := d.need(2, what)
	if v == nil {
		return ""
	}
	return string(d.need(int(binary.LittleEndian.Uint16(v)), what))
}

func (d *dec) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes after %s", ErrCorrupt, len(d.b), what)
	}
	return d.err
}

// Marshal and Unmarshal of each message.

func (m *Hello) Marshal() []byte {
	var e enc
	e.str(m.Name)
	e.u64(m.Epoch)
	e.u8(uint8(m.Role))
	e.u64(m.Session)
	e.bytes(m.Nonce[:])
	if m.Protect != ProtectNone {
		e.u8(uint8(m.Protect))
	}
	return e.b
}

func (m *Hello) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Name = d.str("hello name")
	m.Epoch = d.u64("hello epoch")
	m.Role = Role(d.u8("hello role"))
	m.Session = d.u64("hello session")
	d.fixed(m.Nonce[:], "hello nonce")
	m.Protect = ProtectNone
	if d.err == nil && len(d.b) > 0 {
		// Sent only when not none: a 0 here is no frame of ours.
		if m.Protect = Protection(d.u8("hello frame protection")); m.Protect == ProtectNone && d.err == nil {
			d.err = fmt.Errorf("%w: hello names frame protection none (sent only when not none)", ErrCorrupt)
		}
	}
	if err := d.done("hello"); err != nil {
		return err
	}
	if m.Role != RoleControl && m.Role != RoleLane {
		return fmt.Errorf("%w: hello role %d", ErrCorrupt, m.Role)
	}
	// A protection this side does not know stays as it is: the
	// handshake refuses it by name.
	return nil
}

func (m *Challenge) Marshal() []byte {
	var e enc
	e.str(m.Name)
	e.u64(m.Epoch)
	e.bytes(m.Nonce[:])
	e.bytes(m.Proof[:])
	if m.Protect != ProtectNone {
		e.u8(uint8(m.Protect))
	}
	return e.b
}

func (m *Challenge) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Name = d.str("challenge name")
	m.Epoch = d.u64("challenge epoch")
	d.fixed(m.Nonce[:], "challenge nonce")
	d.fixed(m.Proof[:], "challenge proof")
	m.Protect = ProtectNone
	if d.err == nil && len(d.b) > 0 {
		// Sent only when not none: a 0 here is no frame of ours.
		if m.Protect = Protection(d.u8("challenge frame protection")); m.Protect == ProtectNone && d.err == nil {
			d.err = fmt.Errorf("%w: challenge names frame protection none (sent only when not none)", ErrCorrupt)
		}
	}
	return d.done("challenge")
}

func (m *Auth) Marshal() []byte { return append([]byte(nil), m.Proof[:]...) }

func (m *Auth) Unmarshal(b []byte) error {
	d := dec{b: b}
	d.fixed(m.Proof[:], "auth proof")
	return d.done("auth")
}

func (m *Welcome) Marshal() []byte {
	var e enc
	e.u64(m.Session)
	e.u64(m.MaxPayload)
	return e.b
}

func (m *Welcome) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Session = d.u64("welcome session")
	m.MaxPayload = d.u64("welcome max payload")
	return d.done("welcome")
}

// RegionsBase is the encoded size of an empty region list (the
// metadata of a regions-ok frame); each descriptor adds DescriptorSize.
// A list over MaxMetaLen cannot be sent, so an exporter keeps its list
// within it.
const RegionsBase = 8

// DescriptorSize is the largest encoded size of a descriptor with this
// name and location: with its CUDA IPC handle when device is set (what
// a client on the server's host gets).
func DescriptorSize(name, location string, device bool) int {
	n := 8 + 2 + len(name) + 2 + len(location) + 8 + 1 + 2
	if device {
		n += IPCHandleLen
	}
	return n
}

func (m *Regions) Marshal() []byte {
	var e enc
	e.u64(uint64(len(m.List)))
	for _, r := range m.List {
		e.u64(r.ID)
		e.str(r.Name)
		e.str(r.Location)
		e.u64(r.Bytes)
		e.u8(uint8(r.Perm))
		e.str(string(r.IPC))
	}
	return e.b
}

func (m *RegionsQuery) Marshal() []byte {
	if m.Host == "" && m.Caps == 0 {
		return nil
	}
	var e enc
	e.str(m.Host)
	if m.Caps != 0 {
		e.u64(uint64(m.Caps))
	}
	return e.b
}

func (m *RegionsQuery) Unmarshal(b []byte) error {
	m.Host, m.Caps = "", 0
	if len(b) == 0 {
		return nil
	}
	d := dec{b: b}
	m.Host = d.str("regions host")
	if d.err == nil && len(d.b) > 0 {
		m.Caps = Caps(d.u64("regions capabilities"))
	}
	return d.done("regions query")
}

func (m *Regions) Unmarshal(b []byte) error {
	d := dec{b: b}
	n := d.u64("region count")
	if n > MaxMetaLen {
		return fmt.Errorf("%w: %d regions", ErrCorrupt, n)
	}
	m.List = nil
	for i := uint64(0); i < n && d.err == nil; i++ {
		var r Descriptor
		r.ID = d.u64("region id")
		r.Name = d.str("region name")
		r.Location = d.str("region location")
		r.Bytes = d.u64("region bytes")
		r.Perm = Perm(d.u8("region perm"))
		if r.Perm&^PermReadWrite != 0 {
			return fmt.Errorf("%w: region %q permission %d", ErrCorrupt, r.Name, r.Perm)
		}
		if h := d.str("region ipc handle"); h != "" {
			if len(h) != IPCHandleLen {
				return fmt.Errorf("%w: region %q CUDA IPC handle of %d bytes, want %d", ErrCorrupt, r.Name, len(h), IPCHandleLen)
			}
			r.IPC = []byte(h)
		}
		m.List = append(m.List, r)
	}
	return d.done("regions")
}

func (m *Read) Marshal() []byte {
	var e enc
	e.u64(m.Region)
	e.u64(m.Offset)
	e.u64(m.Length)
	return e.b
}

func (m *Read) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Region = d.u64("read region")
	m.Offset = d.u64("read offset")
	m.Length = d.u64("read length")
	return d.done("read")
}

func (m *Write) Marshal() []byte {
	var e enc
	e.u64(m.Region)
	e.u64(m.Offset)
	return e.b
}

func (m *Write) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Region = d.u64("write region")
	m.Offset = d.u64("write offset")
	return d.done("write")
}

func (m *Pong) Marshal() []byte {
	var e enc
	e.u64(m.Epoch)
	return e.b
}

func (m *Pong) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Epoch = d.u64("pong epoch")
	return d.done("pong")
}

func (m *Error) Marshal() []byte {
	var e enc
	e.u8(uint8(m.Code))
	e.u8(uint8(m.Applied))
	e.str(m.Message)
	return e.b
}

func (m *Error) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Code = Code(d.u8("error code"))
	m.Applied = Applied(d.u8("error effect"))
	m.Message = d.str("error message")
	if err := d.done("error"); err != nil {
		return err
	}
	if m.Code == 0 || m.Code > maxKnownCode || m.Applied > AppliedUnknown {
		return fmt.Errorf("%w: error code %d effect %d", ErrCorrupt, m.Code, m.Applied)
	}
	return nil
}

func (m *Notify) Marshal() []byte {
	var e enc
	e.u64(m.ID)
	e.str(m.Submission)
	return e.b
}

func (m *Notify) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.ID = d.u64("notify id")
	m.Submission = d.str("notify submission")
	return d.done("notify")
}
