//go:build amd64 && !purego

package keys

import "encoding/binary"

// The AES-256 key schedule (FIPS 197, 5.2), for gcm_amd64.s: Go's own
// schedule is not exported. It runs once per derived key.

// sbox is AES's S-box: the inverse in GF(2^8) mod x^8+x^4+x^3+x+1 (0 for
// 0), through the affine map b ^ rotl(b,1..4) ^ 0x63.
var sbox = func() [256]byte {
	var s [256]byte
	mul := func(a, b byte) byte {
		var p byte
		for b != 0 {
			if b&1 != 0 {
				p ^= a
			}
			a = a<<1 ^ (-(a >> 7) & 0x1b)
			b >>= 1
		}
		return p
	}
	for x := 0; x < 256; x++ {
		inv := byte(0)
		if x != 0 {
			// x^254 = x^-1: square and multiply.
			r, b := byte(1), byte(x)
			for e := 254; e > 0; e >>= 1 {
				if e&1 != 0 {
					r = mul(r, b)
				}
				b = mul(b, b)
			}
			inv = r
		}
		rotl := func(b byte, k uint) byte { return b<<k | b>>(8-k) }
		s[x] = inv ^ rotl(inv, 1) ^ rotl(inv, 2) ^ rotl(inv, 3) ^ rotl(inv, 4) ^ 0x63
	}
	return s
}()

func subWord(w uint32) uint32 {
	return uint32(sbox[w>>24])<<24 | uint32(sbox[w>>16&0xff])<<16 | uint32(sbox[w>>8&0xff])<<8 | uint32(sbox[w&0xff])
}

// expandKey256 writes the 15 round keys of a 32-byte key into rk, in the
// byte order AESENC takes them.
func expandKey256(key []byte, rk *[240]byte) {
	var w [60]uint32
	for i := 0; i < 8; i++ {
		w[i] = binary.BigEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := 8; i < 60; i++ {
		t := w[i-1]
		switch i % 8 {
		case 0:
			t = subWord(t<<8|t>>24) ^ rcon<<24
			rcon = rcon << 1 ^ (-(rcon >> 7) & 0x1b)
		case 4:
			t = subWord(t)
		}
		w[i] = w[i-8] ^ t
	}
	for i, v := range w {
		binary.BigEndian.PutUint32(rk[4*i:], v)
	}
}
