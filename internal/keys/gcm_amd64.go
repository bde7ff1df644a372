//go:build amd64 && !purego

package keys

import (
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// AES-256-GCM with 512-bit VAES and VPCLMULQDQ (gcm_amd64.s), for the
// XAES-256-GCM keys derived per group of pieces. Go's own AES-GCM uses
// 128-bit AES-NI: on this project's 2-core test machine (an AMD EPYC with
// VAES) it opened 4.1 GB/s of 32 KiB frames, and decryption was about
// 40% of a cold sequential read's CPU. Where the CPU lacks the
// instructions, or with the purego tag, Go's AES-GCM is used.

// vaesGCMOK reports whether the CPU (and the OS, which must save the
// 512-bit registers) can run gcm_amd64.s. A variable, for tests.
var vaesGCMOK = cpu.X86.HasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VAES && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasAES

//go:noescape
func ctrBlocks(rk *[240]byte, ctr *[16]byte, dst, src *byte, n int)

//go:noescape
func expandKey256(key *[32]byte, rk *[240]byte)

//go:noescape
func gcmOpenBlocks(rk *[240]byte, hpow *[256]byte, acc, ctr *[16]byte, dst, src *byte, n int)

//go:noescape
func encryptBlock(rk *[240]byte, dst, src *[16]byte)

//go:noescape
func ghashBlocks(acc *[16]byte, hpow *[256]byte, data *byte, n int)

// vaesGCM is an AES-256-GCM cipher.AEAD with 12-byte nonces and 16-byte
// tags, byte for byte what cipher.NewGCM(aes.NewCipher(key)) seals.
type vaesGCM struct {
	rk   [240]byte // the AES-256 key schedule
	hpow [256]byte // H^16 .. H^1, premultiplied (hPrime), for ghashBlocks and gcmOpenBlocks
}

// newVAESGCM returns the AES-256-GCM of a 32-byte key, or nil where the
// CPU cannot run it.
func newVAESGCM(key []byte) cipher.AEAD {
	if !vaesGCMOK || len(key) != 32 {
		return nil
	}
	g := &vaesGCM{}
	expandKey256((*[32]byte)(key), &g.rk)
	var zero, h [16]byte
	encryptBlock(&g.rk, &h, &zero) // H = AES_K(0^128)
	hp := hPrime(h)
	copy(g.hpow[240:], hp[:])
	// H^(k+1) = H^k * H: a block of zeroes folded into an accumulator
	// holding H^k multiplies it by H.
	p := hp
	for i := 14; i >= 0; i-- {
		ghashBlocks(&p, &g.hpow, &zero[0], 1)
		copy(g.hpow[16*i:], p[:])
	}
	return g
}

// hPrime returns H byte-reversed and multiplied by x, reduced: the form
// in which ghashBlocks multiplies by H.
func hPrime(h [16]byte) [16]byte {
	hi, lo := binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])
	carry := hi >> 63
	hi, lo = hi<<1|lo>>63, lo<<1
	hi ^= -carry & 0xc200000000000000
	lo ^= carry
	var out [16]byte
	binary.LittleEndian.PutUint64(out[:8], lo)
	binary.LittleEndian.PutUint64(out[8:], hi)
	return out
}

// gcmMaxPlain is the longest message GCM takes, (2^32 - 2) blocks: the
// 32-bit counter starts at 2 and must not come round to the tag's 1.
const gcmMaxPlain = (1<<32 - 2) * 16

func (*vaesGCM) NonceSize() int { return 12 }
func (*vaesGCM) Overhead() int  { return 16 }

// Seal appends the encryption of plain and its tag to dst; dst and plain
// may overlap exactly.
func (g *vaesGCM) Seal(dst, nonce, plain, aad []byte) []byte {
	if len(nonce) != 12 {
		panic("keys: AES-GCM nonce of the wrong length")
	}
	if uint64(len(plain)) > gcmMaxPlain {
		panic("keys: AES-GCM message too long")
	}
	ret, out := sliceForAppend(dst, len(plain)+16)
	if inexactOverlap(out[:len(plain)], plain) {
		panic("keys: AES-GCM output overlaps the input other than exactly")
	}
	ct := out[:len(plain)]
	mask := g.mask(nonce)
	// Encrypted, then hashed: one pass for both (as Open has) was no
	// faster, the hash of a stretch waiting for its encryption.
	ctr := counterBlock(nonce, 2)
	g.ctr(&ctr, ct, plain)
	var acc [16]byte
	g.ghash(&acc, aad)
	g.ghash(&acc, ct)
	tag := g.finish(&acc, &mask, len(aad), len(ct))
	copy(out[len(plain):], tag[:])
	return ret
}

// Open authenticates ciphertext||tag and appends its decryption to dst;
// dst and sealed may overlap exactly. On failure the bytes it wrote are
// zeroes (in place, the ciphertext is gone, as with Go's AES-GCM).
func (g *vaesGCM) Open(dst, nonce, sealed, aad []byte) ([]byte, error) {
	if len(nonce) != 12 {
		panic("keys: AES-GCM nonce of the wrong length")
	}
	if len(sealed) < 16 || uint64(len(sealed)) > gcmMaxPlain+16 {
		return nil, ErrAuth
	}
	ct, tag := sealed[:len(sealed)-16], sealed[len(sealed)-16:]
	ret, out := sliceForAppend(dst, len(ct))
	if inexactOverlap(out, sealed) {
		panic("keys: AES-GCM output overlaps the input other than exactly")
	}
	// Whole 256-byte stretches are hashed and decrypted in one pass
	// (gcmOpenBlocks), the rest hashed before it is decrypted (in place,
	// decrypting first would hash plaintext).
	mask := g.mask(nonce)
	var acc [16]byte
	g.ghash(&acc, aad)
	ctr := counterBlock(nonce, 2)
	full := len(ct) &^ 255
	if full > 0 {
		gcmOpenBlocks(&g.rk, &g.hpow, &acc, &ctr, &out[0], &ct[0], full/16)
	}
	g.ghash(&acc, ct[full:])
	want := g.finish(&acc, &mask, len(aad), len(ct))
	g.ctr(&ctr, out[full:], ct[full:])
	if subtle.ConstantTimeCompare(want[:], tag) != 1 {
		// As Go's AES-GCM: no plaintext of a forgery is left behind.
		clear(out)
		return nil, ErrAuth
	}
	return ret, nil
}

// counterBlock returns nonce || n, n a 32-bit big-endian counter.
func counterBlock(nonce []byte, n uint32) [16]byte {
	var b [16]byte
	copy(b[:12], nonce)
	binary.BigEndian.PutUint32(b[12:], n)
	return b
}

// ctr XORs src with the keystream from *ctr into dst (len(src) bytes).
func (g *vaesGCM) ctr(ctr *[16]byte, dst, src []byte) {
	full := len(src) &^ 63
	if full > 0 {
		ctrBlocks(&g.rk, ctr, &dst[0], &src[0], full/16)
	}
	if rest := len(src) - full; rest > 0 {
		var buf [64]byte
		copy(buf[:], src[full:])
		ctrBlocks(&g.rk, ctr, &buf[0], &buf[0], 4)
		copy(dst[full:], buf[:rest])
	}
}

// mask returns AES_K(J0), J0 = nonce || 1, which masks the tag. It is
// made before any output is written, which may lie over the nonce.
func (g *vaesGCM) mask(nonce []byte) [16]byte {
	var m [16]byte
	j0 := counterBlock(nonce, 1)
	encryptBlock(&g.rk, &m, &j0)
	return m
}

// finish returns the tag from acc, which holds the AAD and ciphertext
// folded in: their lengths folded in too, and the result masked.
func (g *vaesGCM) finish(acc *[16]byte, mask *[16]byte, aadLen, ctLen int) [16]byte {
	var lens [16]byte
	binary.BigEndian.PutUint64(lens[:8], uint64(aadLen)*8)
	binary.BigEndian.PutUint64(lens[8:], uint64(ctLen)*8)
	ghashBlocks(acc, &g.hpow, &lens[0], 1)
	var t [16]byte
	for i := range t {
		t[i] = acc[15-i] ^ mask[i]
	}
	return t
}

// ghash folds b, zero-padded to whole blocks, into acc.
func (g *vaesGCM) ghash(acc *[16]byte, b []byte) {
	full := len(b) &^ 15
	if full > 0 {
		ghashBlocks(acc, &g.hpow, &b[0], full/16)
	}
	if len(b) > full {
		var last [16]byte
		copy(last[:], b[full:])
		ghashBlocks(acc, &g.hpow, &last[0], 1)
	}
}

// inexactOverlap reports whether x and y share memory at different
// offsets: an output written block by block over such an input would
// read bytes it has already overwritten.
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	x0, y0 := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return x0 <= y0+uintptr(len(y)-1) && y0 <= x0+uintptr(len(x)-1)
}

// sliceForAppend extends in by n bytes, reallocating if needed, and
// returns the whole and the extension.
func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	return head, head[len(in):]
}
