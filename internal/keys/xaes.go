package keys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"errors"
)

// XAES-256-GCM (c2sp.org/XAES-256-GCM): AES-256-GCM with a 192-bit nonce.
// A per-message AES-256 key Kx is derived from the key K and the first 12
// nonce bytes with NIST SP 800-108r1 counter-mode KDF over AES-256-CMAC
// (two blocks, label "X", empty context); the message is then sealed with
// AES-256-GCM under Kx and the last 12 nonce bytes. Random 24-byte nonces
// are safe for practically unlimited messages under one key, which the
// 96-bit nonces of plain AES-GCM are not.
//
// Everything but the CMAC subkey K1 depends on the nonce, so a message
// costs two AES blocks, one AES-256 key schedule and one GCM setup beyond
// the AES-256-GCM seal itself.

const (
	xaesKeySize   = 32
	xaesNonceSize = 24
	xaesTagSize   = 16
)

// xaes holds K's key schedule and the CMAC subkey K1.
type xaes struct {
	block cipher.Block
	k1    [aes.BlockSize]byte
}

func newXAES(key []byte) (*xaes, error) {
	if len(key) != xaesKeySize {
		return nil, errors.New("keys: XAES-256-GCM key must be 32 bytes")
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	x := &xaes{block: b}
	// L = AES-256_K(0^128); K1 = L doubled in GF(2^128): shifted left one
	// bit, with 0x87 folded into the last byte when the top bit was set.
	var l [aes.BlockSize]byte
	b.Encrypt(l[:], l[:])
	carry := l[0] >> 7
	for i := 0; i < aes.BlockSize-1; i++ {
		x.k1[i] = l[i]<<1 | l[i+1]>>7
	}
	x.k1[aes.BlockSize-1] = l[aes.BlockSize-1]<<1 ^ (-carry & 0x87)
	return x, nil
}

// deriveKey returns Kx = AES_K(M1 ^ K1) || AES_K(M2 ^ K1), where
// Mi = i (16-bit BE) || "X" || 0x00 || nonce[:12].
func (x *xaes) deriveKey(nonce []byte) [xaesKeySize]byte {
	var m [aes.BlockSize]byte
	m[0], m[1], m[2], m[3] = 0, 1, 'X', 0
	copy(m[4:], nonce[:12])
	subtle.XORBytes(m[:], m[:], x.k1[:])
	var kx [xaesKeySize]byte
	x.block.Encrypt(kx[:aes.BlockSize], m[:])
	// M2 differs from M1 in the counter's low byte only: 1^2 = 3.
	m[1] ^= 3
	x.block.Encrypt(kx[aes.BlockSize:], m[:])
	return kx
}

// gcm returns the AES-256-GCM instance for one message's nonce.
func (x *xaes) gcm(nonce []byte) cipher.AEAD {
	kx := x.deriveKey(nonce)
	b, err := aes.NewCipher(kx[:])
	if err != nil {
		panic("keys: aes.NewCipher of a 32-byte key: " + err.Error())
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic("keys: cipher.NewGCM: " + err.Error())
	}
	return g
}

// Seal appends the ciphertext and tag of plain to dst; nonce must be 24
// bytes. dst and plain may overlap exactly, as with cipher.AEAD.
func (x *xaes) Seal(dst, nonce, plain, aad []byte) []byte {
	return x.gcm(nonce).Seal(dst, nonce[12:xaesNonceSize], plain, aad)
}

// Open authenticates and decrypts ciphertext||tag, appending to dst.
func (x *xaes) Open(dst, nonce, sealed, aad []byte) ([]byte, error) {
	return x.gcm(nonce).Open(dst, nonce[12:xaesNonceSize], sealed, aad)
}
