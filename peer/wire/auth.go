// auth.go owns the challenge-response proofs. Each side proves it holds
// the shared key by an HMAC-SHA256 over both nonces and both identities
// (and the frame protection, when there is one);
// the key itself never crosses the wire, and a proof is bound to one
// connection's nonces, so a recorded proof is useless on another.

package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// The proofs' domain labels: a server proof can never pass as a
// client's.
const (
	labelServer = "orbitefs peer v1 server proof"
	labelClient = "orbitefs peer v1 client proof"
)

// Proof computes one side's proof. server selects the label.
func Proof(key []byte, server bool, h *Hello, c *Challenge) [ProofLen]byte {
	m := hmac.New(sha256.New, key)
	if server {
		m.Write([]byte(labelServer))
	} else {
		m.Write([]byte(labelClient))
	}
	m.Write(h.Nonce[:])
	m.Write(c.Nonce[:])
	var b [8]byte
	for _, s := range []string{h.Name, c.Name} {
		binary.LittleEndian.PutUint64(b[:], uint64(len(s)))
		m.Write(b[:])
		m.Write([]byte(s))
	}
	for _, v := range []uint64{h.Epoch, c.Epoch, uint64(h.Role), h.Session} {
		binary.LittleEndian.PutUint64(b[:], v)
		m.Write(b[:])
	}
	// The frame protection each side ran the handshake with (only when
	// not none: the proofs of an unprotected connection are the
	// original ones), so a protection stripped or added on the way
	// fails the proof instead of downgrading the connection.
	if h.Protect != ProtectNone || c.Protect != ProtectNone {
		m.Write([]byte{byte(h.Protect), byte(c.Protect)})
	}
	var p [ProofLen]byte
	copy(p[:], m.Sum(nil))
	return p
}

// ProofOK compares proofs in constant time.
func ProofOK(got, want [ProofLen]byte) bool { return hmac.Equal(got[:], want[:]) }
