// frame.go owns the frame: the fixed 48-byte header every peer frame
// starts with, its encoding and its checks.
//
// Invariants:
//   - A header is accepted only when its magic, version and header
//     CRC32C match and its lengths are within the reader's limits; a
//     header that fails any check is never acted on, so a corrupt length
//     can never make a reader allocate or wait for a body that was not
//     sent.
//   - The metadata (the typed part of the body) is always covered by its
//     own CRC32C; the payload (bulk bytes) is covered only when the frame
//     carries FlagPayloadCRC, and a frame that carries it is checked.
//   - All integers are little-endian.

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
)

// Magic opens every frame: "ORBP" read as a little-endian uint32.
const Magic uint32 = 0x5042524f

// Version is the protocol version this package speaks. A peer speaking
// another version is refused at the first frame.
const Version uint8 = 1

// HeaderLen is the size of the fixed header.
const HeaderLen = 48

// MaxMetaLen bounds the metadata of one frame (region descriptors are
// the largest: 64 KiB holds hundreds of them).
const MaxMetaLen = 64 << 10

// Type says what a frame carries.
type Type uint8

// The frame types. Requests travel from the dialing peer (the client) to
// the listening one (the server); every request gets exactly one reply
// (its ack, its data or TypeError) with the same request id and slice.
const (
	TypeHello     Type = 1  // client: identity, epoch, role, nonce
	TypeChallenge Type = 2  // server: identity, epoch, nonce, server proof
	TypeAuth      Type = 3  // client: client proof
	TypeWelcome   Type = 4  // server: authenticated; session id
	TypeRegions   Type = 5  // request: list exported regions
	TypeRegionsOK Type = 6  // reply: region descriptors
	TypeRead      Type = 7  // request: read [off, off+len) of a region
	TypeReadData  Type = 8  // reply: the bytes read, as payload
	TypeWrite     Type = 9  // request: write the payload at off
	TypeWriteAck  Type = 10 // reply: the payload is in the region's memory
	TypePing      Type = 11 // request: keep-alive (and lane probe)
	TypePong      Type = 12 // reply: keep-alive, with the server's epoch
	TypeError     Type = 13 // reply: the request failed; says the remote effect
	TypeNotify    Type = 14 // request (control): a completion notification; its message is the payload
	TypeNotified  Type = 15 // reply: the notification is in the receiver's inbox (delivered)
	// Receiver credit (credit.go), on the control connection.
	TypeCreditConnect Type = 16 // request: reserve the sender's window
	TypeCreditGrant   Type = 17 // reply (connect, sync): cumulative grants
	TypeCreditSync    Type = 18 // request: completed totals; answered with fresh grants
	TypeCreditClose   Type = 19 // request: completed totals; return the window
	TypeCreditClosed  Type = 20 // reply: the window is returned
	// CUDA IPC mappings (ipcmap.go), on the control connection; only
	// from a client that announced CapIPCMap in its regions query.
	TypeIPCMap   Type = 21 // request: the client maps a region's CUDA IPC handle
	TypeIPCUnmap Type = 22 // request: the client closed one such mapping
	TypeIPCAck   Type = 23 // reply (map, unmap): recorded
	maxType           = TypeIPCAck
)

var typeNames = map[Type]string{
	TypeHello: "hello", TypeChallenge: "challenge", TypeAuth: "auth", TypeWelcome: "welcome",
	TypeRegions: "regions", TypeRegionsOK: "regions-ok", TypeRead: "read", TypeReadData: "read-data",
	TypeWrite: "write", TypeWriteAck: "write-ack", TypePing: "ping", TypePong: "pong", TypeError: "error",
	TypeNotify: "notify", TypeNotified: "notified",
	TypeCreditConnect: "credit-connect", TypeCreditGrant: "credit-grant", TypeCreditSync: "credit-sync",
	TypeCreditClose: "credit-close", TypeCreditClosed: "credit-closed",
	TypeIPCMap: "ipc-map", TypeIPCUnmap: "ipc-unmap", TypeIPCAck: "ipc-ack",
}

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Flags modify a frame.
type Flags uint16

// FlagPayloadCRC says the header's PayloadCRC covers the payload.
const FlagPayloadCRC Flags = 1 << 0

// FlagSealed says the frame's metadata and payload are sealed (seal.go):
// each followed by its tag, the header their associated data.
const FlagSealed Flags = 1 << 1

// knownFlags are the flags version 1 defines; any other bit is refused,
// so a future flag is never silently ignored.
const knownFlags = FlagPayloadCRC | FlagSealed

// Header is the fixed part of a frame.
//
//	offset size field
//	 0      4   magic "ORBP"
//	 4      1   version
//	 5      1   type
//	 6      2   flags
//	 8      8   request id
//	16      4   slice index
//	20      4   metadata length
//	24      8   payload length
//	32      4   metadata CRC32C
//	36      4   payload CRC32C (0 unless FlagPayloadCRC)
//	40      4   reserved, 0
//	44      4   header CRC32C of bytes [0, 44)
type Header struct {
	Type       Type
	Flags      Flags
	ID         uint64 // request id; a reply carries its request's
	Slice      uint32 // slice index within a striped request (0 if not striped)
	MetaLen    uint32
	PayloadLen uint64
	MetaCRC    uint32
	PayloadCRC uint32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC is CRC32C (Castagnoli) of b.
func CRC(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC extends a CRC32C with b.
func UpdateCRC(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// ErrCorrupt is the kind of every decoding failure: a bad magic,
// version, checksum, length or field. A connection that produced one is
// not trusted again.
var ErrCorrupt = errors.New("corrupt frame")

// Marshal writes h into b[:HeaderLen] with magic, version and header CRC.
func (h *Header) Marshal(b []byte) {
	_ = b[HeaderLen-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], Magic)
	b[4] = Version
	b[5] = byte(h.Type)
	le.PutUint16(b[6:], uint16(h.Flags))
	le.PutUint64(b[8:], h.ID)
	le.PutUint32(b[16:], h.Slice)
	le.PutUint32(b[20:], h.MetaLen)
	le.PutUint64(b[24:], h.PayloadLen)
	le.PutUint32(b[32:], h.MetaCRC)
	le.PutUint32(b[36:], h.PayloadCRC)
	le.PutUint32(b[40:], 0)
	le.PutUint32(b[44:], CRC(b[:44]))
}

// Limits bound what a reader accepts.
type Limits struct {
	MaxPayload uint64 // largest payload of one frame
}

// Unmarshal checks and decodes b[:HeaderLen]. Every failure wraps ErrCorrupt.
func (h *Header) Unmarshal(b []byte, lim Limits) error {
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != Magic {
		return fmt.Errorf("%w: magic %#08x, want %#08x (not an orbitefs peer)", ErrCorrupt, m, Magic)
	}
	if got, want := le.Uint32(b[44:]), CRC(b[:44]); got != want {
		return fmt.Errorf("%w: header checksum %#08x, computed %#08x", ErrCorrupt, got, want)
	}
	if b[4] != Version {
		return fmt.Errorf("%w: protocol version %d, this peer speaks %d", ErrCorrupt, b[4], Version)
	}
	*h = Header{
		Type:       Type(b[5]),
		Flags:      Flags(le.Uint16(b[6:])),
		ID:         le.Uint64(b[8:]),
		Slice:      le.Uint32(b[16:]),
		MetaLen:    le.Uint32(b[20:]),
		PayloadLen: le.Uint64(b[24:]),
		MetaCRC:    le.Uint32(b[32:]),
		PayloadCRC: le.Uint32(b[36:]),
	}
	switch {
	case h.Type < TypeHello || h.Type > maxType:
		return fmt.Errorf("%w: unknown frame type %d", ErrCorrupt, h.Type)
	case h.Flags&^knownFlags != 0:
		return fmt.Errorf("%w: unknown flags %#04x", ErrCorrupt, uint16(h.Flags&^knownFlags))
	case le.Uint32(b[40:]) != 0:
		return fmt.Errorf("%w: reserved field is %#x, want 0", ErrCorrupt, le.Uint32(b[40:]))
	case h.MetaLen > MaxMetaLen:
		return fmt.Errorf("%w: metadata length %d over %d", ErrCorrupt, h.MetaLen, MaxMetaLen)
	case h.PayloadLen > lim.MaxPayload:
		return fmt.Errorf("%w: %s payload length %d over the limit %d", ErrCorrupt, h.Type, h.PayloadLen, lim.MaxPayload)
	case h.Flags&FlagPayloadCRC == 0 && h.PayloadCRC != 0:
		return fmt.Errorf("%w: payload checksum set without its flag", ErrCorrupt)
	case h.Flags&FlagSealed != 0 && (h.Flags&FlagPayloadCRC != 0 || h.MetaCRC != 0):
		return fmt.Errorf("%w: a sealed frame with checksums (its tags cover it)", ErrCorrupt)
	}
	return nil
}

// BodyLen is the size on the wire of what follows the header.
func (h *Header) BodyLen() uint64 {
	if h.Flags&FlagSealed != 0 {
		return SealedLen(h.MetaLen, h.PayloadLen)
	}
	return uint64(h.MetaLen) + h.PayloadLen
}

// ReadHeader reads and checks one header from r.
func ReadHeader(r io.Reader, buf []byte, lim Limits) (Header, error) {
	var h Header
	if _, err := io.ReadFull(r, buf[:HeaderLen]); err != nil {
		return h, err
	}
	return h, h.Unmarshal(buf[:HeaderLen], lim)
}

// ReadMeta reads the metadata that follows h and checks its CRC.
func ReadMeta(r io.Reader, h *Header) ([]byte, error) {
	m := make([]byte, h.MetaLen)
	if _, err := io.ReadFull(r, m); err != nil {
		return nil, err
	}
	if got := CRC(m); got != h.MetaCRC {
		return nil, fmt.Errorf("%w: %s metadata checksum %#08x, computed %#08x", ErrCorrupt, h.Type, h.MetaCRC, got)
	}
	return m, nil
}

// ReadPayload reads h's payload into dst (len(dst) == h.PayloadLen) and,
// when the frame carries one, checks its CRC.
func ReadPayload(r io.Reader, h *Header, dst []byte) error {
	if uint64(len(dst)) != h.PayloadLen {
		return fmt.Errorf("%w: %s payload of %d bytes, want %d", ErrCorrupt, h.Type, h.PayloadLen, len(dst))
	}
	if _, err := io.ReadFull(r, dst); err != nil {
		return err
	}
	if h.Flags&FlagPayloadCRC != 0 {
		if got := CRC(dst); got != h.PayloadCRC {
			return fmt.Errorf("%w: %s payload checksum %#08x, computed %#08x", ErrCorrupt, h.Type, h.PayloadCRC, got)
		}
	}
	return nil
}

// Frame is one frame to send.
type Frame struct {
	Type    Type
	ID      uint64
	Slice   uint32
	Meta    []byte
	Payload []byte
	// PayloadCRC asks for the payload checksum.
	PayloadCRC bool
}

// Append encodes f's header and metadata (not its payload) onto b.
func (f *Frame) Append(b []byte) []byte {
	h := Header{Type: f.Type, ID: f.ID, Slice: f.Slice, MetaLen: uint32(len(f.Meta)),
		PayloadLen: uint64(len(f.Payload)), MetaCRC: CRC(f.Meta)}
	if f.PayloadCRC {
		h.Flags |= FlagPayloadCRC
		h.PayloadCRC = CRC(f.Payload)
	}
	n := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	h.Marshal(b[n:])
	return append(b, f.Meta...)
}

// Write sends f on w: header, metadata and the payload from the caller's
// memory (no copy) in one writev where w is a socket. It returns how many
// bytes went out, so a caller knows whether anything was posted.
func (f *Frame) Write(w io.Writer) (int64, error) {
	bufs := net.Buffers{f.Append(make([]byte, 0, HeaderLen+len(f.Meta)))}
	if len(f.Payload) > 0 {
		bufs = append(bufs, f.Payload)
	}
	return bufs.WriteTo(w)
}
