package keys

import (
	"bytes"
	"crypto/cipher"

	"golang.org/x/crypto/chacha20poly1305"
)

// sharedNonce is how many leading nonce bytes the messages of one Sealer
// share.
const sharedNonce = 12

// Sealer seals the messages of one group (the pieces of a few frames
// sealed together, segment.Builder.AddFrames) with nonces that share
// their first 12 bytes, random per Sealer, and have 12 random bytes of
// their own. Each message is still nonce || ciphertext || tag and opens on
// its own with AEAD.Open. A Sealer is used by one goroutine at a time.
//
// XAES-256-GCM derives its per-message key from the first 12 nonce bytes
// only, so a group costs one derivation, one AES key schedule and one GCM
// setup instead of one per message. Under that derived key the messages
// are plain AES-256-GCM with random 96-bit nonces, of which a group uses
// at most a few dozen: far inside AES-GCM's limits for random nonces. XChaCha20-Poly1305
// gains nothing from the shared bytes and loses nothing either.
type Sealer struct {
	a      *AEAD
	prefix [sharedNonce]byte
	gcm    cipher.AEAD // XAES: AES-256-GCM under the key derived from prefix
}

// NewSealer starts a group with a fresh random nonce prefix.
func (a *AEAD) NewSealer() Sealer {
	s := Sealer{a: a}
	mustRand(s.prefix[:])
	if a.xaes != nil {
		var nonce [NonceSize]byte
		copy(nonce[:], s.prefix[:])
		s.gcm = a.xaes.gcm(nonce[:])
	}
	return s
}

// SealTo appends nonce || ciphertext || tag of plain to dst, as
// AEAD.SealTo does.
func (s *Sealer) SealTo(dst, aad, plain []byte) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, NonceSize)...)
	copy(dst[n:], s.prefix[:])
	mustRand(dst[n+sharedNonce : n+NonceSize])
	nonce := dst[n : n+NonceSize]
	if s.gcm != nil {
		return s.gcm.Seal(dst, nonce[sharedNonce:], plain, aad)
	}
	c, _ := chacha20poly1305.NewX(s.a.key)
	return c.Seal(dst, nonce, plain, aad)
}

// Opener opens messages as AEAD.OpenTo does, keeping the XAES-256-GCM key
// derived for the last nonce prefix it saw: the pieces of one group
// (sealed by one Sealer) then cost one derivation, and the AEAD keeps the
// last few thousand derived (gcmCache) for the Openers to come.
type Opener struct {
	a      *AEAD
	prefix [sharedNonce]byte
	gcm    cipher.AEAD
}

// NewOpener returns an Opener with nothing derived yet.
func (a *AEAD) NewOpener() Opener { return Opener{a: a} }

// OpenTo is AEAD.OpenTo. Any failure is ErrAuth.
func (o *Opener) OpenTo(dst, aad, sealed []byte) ([]byte, error) {
	if o.a.xaes == nil {
		return o.a.OpenTo(dst, aad, sealed)
	}
	if len(sealed) < Overhead {
		return nil, ErrAuth
	}
	if o.gcm == nil || !bytes.Equal(o.prefix[:], sealed[:sharedNonce]) {
		o.gcm = o.a.xaes.gcmFor(sealed[:NonceSize])
		copy(o.prefix[:], sealed[:sharedNonce])
	}
	out, err := o.gcm.Open(dst, sealed[sharedNonce:NonceSize], sealed[NonceSize:], aad)
	if err != nil {
		return nil, ErrAuth
	}
	return out, nil
}
