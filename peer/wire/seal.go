// seal.go owns frame protection: with ProtectAEAD, every frame after the
// handshake is sealed with AES-256-GCM under keys drawn for that one
// connection and direction.
//
// A sealed frame (FlagSealed) is its 48-byte header in the clear, then
// the metadata's ciphertext and its 16-byte tag, then, when the payload
// is not empty, the payload's ciphertext and its 16-byte tag (the
// frame's trailer). The header's lengths count the plaintext; its
// checksums of metadata and payload are 0 (the tags cover both).
//
// Invariants:
//   - Keys: HKDF-SHA256 of the shared key, salted with both nonces of
//     the connection's handshake, over the transcript (both names and
//     epochs, role, session): a key serves one connection and one
//     direction, so no nonce is ever used twice under a key.
//   - Nonces: a part (0 metadata, 1 payload) and the sender's frame
//     counter, which starts at 0 after the handshake and counts every
//     frame. The receiver expects its own count: a replayed, reordered
//     or dropped frame opens under the wrong nonce and fails.
//   - The header is the associated data of both parts: a header changed
//     on the way (type, id, slice, lengths, flags) fails the metadata's
//     tag, before anything acts on the frame.
//   - The metadata has its own tag so that a receiver trusts the header
//     and metadata before it reads the payload (and refuses a request
//     as it does unsealed); the payload is opened in a buffer, and the
//     caller uses it only after Open returned nil.

package wire

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
)

// Protection is what guards frames after the handshake.
type Protection uint8

// The protections. ProtectNone is the wire as it always was: frames in
// the clear, checksummed against accidents only.
const (
	ProtectNone Protection = 0
	ProtectAEAD Protection = 1
)

func (p Protection) String() string {
	switch p {
	case ProtectNone:
		return "none"
	case ProtectAEAD:
		return "aead"
	}
	return fmt.Sprintf("protection(%d)", uint8(p))
}

// ParseProtection is the inverse of Protection.String.
func ParseProtection(s string) (Protection, error) {
	switch s {
	case "none":
		return ProtectNone, nil
	case "aead":
		return ProtectAEAD, nil
	}
	return 0, fmt.Errorf("frame protection %q: want none or aead", s)
}

// TagLen is the size of a GCM tag.
const TagLen = 16

// SealedLen is the size on the wire of a frame body (metadata and
// payload) of these plaintext lengths.
func SealedLen(metaLen uint32, payloadLen uint64) uint64 {
	n := uint64(metaLen) + TagLen + payloadLen
	if payloadLen > 0 {
		n += TagLen
	}
	return n
}

const (
	keyLabel = "orbitefs peer v1 frame keys"
	partMeta = 0
	partBody = 1
)

// FrameKeys derives a connection's two keys, client to server and
// server to client, from the shared key and its handshake.
func FrameKeys(key []byte, h *Hello, c *Challenge) (c2s, s2c []byte, err error) {
	salt := make([]byte, 0, 2*NonceLen)
	salt = append(append(salt, h.Nonce[:]...), c.Nonce[:]...)
	info := []byte(keyLabel)
	for _, s := range []string{h.Name, c.Name} {
		info = binary.LittleEndian.AppendUint64(info, uint64(len(s)))
		info = append(info, s...)
	}
	for _, v := range []uint64{h.Epoch, c.Epoch, uint64(h.Role), h.Session, uint64(h.Protect)} {
		info = binary.LittleEndian.AppendUint64(info, v)
	}
	k, err := hkdf.Key(sha256.New, key, salt, string(info), 64)
	if err != nil {
		return nil, nil, err
	}
	return k[:32], k[32:], nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// counter is one direction's frame count and cipher.
type counter struct {
	aead  cipher.AEAD
	n     uint64
	nonce [12]byte
}

func (c *counter) nonceFor(part uint32) []byte {
	binary.LittleEndian.PutUint32(c.nonce[0:], part)
	binary.LittleEndian.PutUint64(c.nonce[4:], c.n)
	return c.nonce[:]
}

// Sealer seals the frames one side sends on a connection, in the order
// they go out. Not safe for concurrent use (a writer's lock covers it).
type Sealer struct{ c counter }

// NewSealer makes a sealer under key (32 bytes).
func NewSealer(key []byte) (*Sealer, error) {
	a, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return &Sealer{c: counter{aead: a}}, nil
}

// Seal appends f's header and sealed metadata onto head, and its sealed
// payload (ciphertext and tag; nothing when f has none) onto body, and
// counts the frame. f.PayloadCRC is ignored: the tag covers more.
func (s *Sealer) Seal(head, body []byte, f *Frame) ([]byte, []byte) {
	h := Header{Type: f.Type, Flags: FlagSealed, ID: f.ID, Slice: f.Slice, MetaLen: uint32(len(f.Meta)), PayloadLen: uint64(len(f.Payload))}
	n := len(head)
	head = append(head, make([]byte, HeaderLen)...)
	h.Marshal(head[n:])
	hdr := head[n : n+HeaderLen]
	head = s.c.aead.Seal(head, s.c.nonceFor(partMeta), f.Meta, hdr)
	// Seal may have moved head: take the header again for the payload.
	hdr = head[n : n+HeaderLen]
	if len(f.Payload) > 0 {
		body = s.c.aead.Seal(body, s.c.nonceFor(partBody), f.Payload, hdr)
	}
	s.c.n++
	return head, body
}

// Opener opens the frames one side receives on a connection, in order.
// Not safe for concurrent use (the connection's one reader holds it).
type Opener struct{ c counter }

// NewOpener makes an opener under key (32 bytes).
func NewOpener(key []byte) (*Opener, error) {
	a, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	return &Opener{c: counter{aead: a}}, nil
}

// header encodes h again: for a header that passed Unmarshal, the bytes
// that were received (the associated data).
func (h *Header) header() []byte {
	b := make([]byte, HeaderLen)
	h.Marshal(b)
	return b
}

// Meta reads and opens the metadata of the sealed frame h. A frame
// without payload is counted here.
func (o *Opener) Meta(r io.Reader, h *Header) ([]byte, error) {
	if h.Flags&FlagSealed == 0 {
		return nil, fmt.Errorf("%w: an unsealed %s frame on a connection with frame protection aead", ErrCorrupt, h.Type)
	}
	b := make([]byte, int(h.MetaLen)+TagLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	m, err := o.c.aead.Open(b[:0], o.c.nonceFor(partMeta), b, h.header())
	if err != nil {
		return nil, fmt.Errorf("%w: %s frame %d: header or metadata failed its authentication tag (forged, altered, replayed or out of order)", ErrCorrupt, h.Type, o.c.n)
	}
	if h.PayloadLen == 0 {
		o.c.n++
	}
	return m, nil
}

// Payload reads the sealed payload of h into buf (cap(buf) >=
// h.PayloadLen+TagLen) and opens it there; the plaintext is
// buf[:h.PayloadLen], valid only when the error is nil. It counts the
// frame.
func (o *Opener) Payload(r io.Reader, h *Header, buf []byte) ([]byte, error) {
	b := buf[:h.PayloadLen+TagLen]
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	p, err := o.c.aead.Open(b[:0], o.c.nonceFor(partBody), b, h.header())
	o.c.n++
	if err != nil {
		return nil, fmt.Errorf("%w: %s %d slice %d payload failed its authentication tag (altered on the way)", ErrCorrupt, h.Type, h.ID, h.Slice)
	}
	return p, nil
}
