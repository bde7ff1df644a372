package keys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"errors"
	"sync"
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

// xaes holds K's key schedule and the CMAC subkey K1, and the AES-GCM
// instances of the nonce prefixes opened last (opened).
type xaes struct {
	block  cipher.Block
	k1     [aes.BlockSize]byte
	opened gcmCache
}

// gcmCacheSize is how many derived AES-GCM instances an xaes keeps for
// opening (about 1 KiB each): one per group of pieces sealed together
// (Sealer), up to 8 frames of up to 32 KiB, so 4,096 cover the groups of
// a 1 GiB file. A random 4 KiB read opens one piece; without the cache
// each such read would derive its group's key, AES key schedule and GCM
// tables again, and allocate two objects (BenchmarkGCM/derive).
const gcmCacheSize = 4096

// gcmCache maps nonce prefixes to their AES-GCM instances, evicting the
// oldest entry first. cipher.AEAD instances are safe for concurrent use.
type gcmCache struct {
	mu   sync.Mutex
	m    map[[sharedNonce]byte]cipher.AEAD
	ring [][sharedNonce]byte // insertion order, a circular buffer
	next int
}

// gcmFor returns the AES-256-GCM instance for nonce's prefix, derived or
// kept from an earlier call.
func (x *xaes) gcmFor(nonce []byte) cipher.AEAD {
	var p [sharedNonce]byte
	copy(p[:], nonce)
	c := &x.opened
	c.mu.Lock()
	g, ok := c.m[p]
	c.mu.Unlock()
	if ok {
		return g
	}
	g = x.gcm(nonce)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[sharedNonce]byte]cipher.AEAD, gcmCacheSize)
		c.ring = make([][sharedNonce]byte, 0, gcmCacheSize)
	}
	if _, ok := c.m[p]; ok {
		return g
	}
	if len(c.ring) < gcmCacheSize {
		c.ring = append(c.ring, p)
	} else {
		delete(c.m, c.ring[c.next])
		c.ring[c.next] = p
		c.next = (c.next + 1) % gcmCacheSize
	}
	c.m[p] = g
	return g
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
