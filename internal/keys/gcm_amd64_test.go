//go:build amd64 && !purego

package keys

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"testing"
)

// requireVAES skips where the CPU cannot run gcm_amd64.s: Go's own
// AES-GCM then serves, which the XAES tests check (bothGCMs). A CPU
// feature cannot be installed, so this skip holds in CI too.
func requireVAES(t testing.TB) {
	t.Helper()
	if !vaesGCMOK {
		t.Skip("no 512-bit VAES and VPCLMULQDQ on this CPU: Go's AES-GCM serves")
	}
}

func stdGCM(t testing.TB, key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestVAESGCMMatchesGo seals and opens messages of every length up to
// 1,100 bytes and some longer ones, with AADs of several lengths, under
// random keys and nonces, and checks every byte against Go's AES-GCM
// both ways.
func TestVAESGCMMatchesGo(t *testing.T) {
	requireVAES(t)
	rng := mrand.New(mrand.NewPCG(1, 2))
	lengths := []int{}
	for n := 0; n <= 1100; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 4095, 4096, 4097, 8191, 32768, 32768+13, 1<<20+5)
	for _, n := range lengths {
		key := make([]byte, 32)
		rand.Read(key)
		nonce := make([]byte, 12)
		rand.Read(nonce)
		aad := make([]byte, []int{0, 1, 15, 16, 17, 40, 255, 256, 300}[rng.IntN(9)])
		rand.Read(aad)
		plain := make([]byte, n)
		rand.Read(plain)
		fast, std := newVAESGCM(key), stdGCM(t, key)
		got, want := fast.Seal([]byte("prefix"), nonce, plain, aad), std.Seal([]byte("prefix"), nonce, plain, aad)
		if !bytes.Equal(got, want) {
			t.Fatalf("len %d, aad %d: sealed bytes differ from Go's", n, len(aad))
		}
		out, err := fast.Open(nil, nonce, want[6:], aad)
		if err != nil || !bytes.Equal(out, plain) {
			t.Fatalf("len %d, aad %d: open of Go's seal: %v", n, len(aad), err)
		}
		// In place, as the segment reader opens pieces.
		sealed := bytes.Clone(want[6:])
		out, err = fast.Open(sealed[:0], nonce, sealed, aad)
		if err != nil || !bytes.Equal(out, plain) || &out[0:1][0] != &sealed[0:1][0] && n > 0 {
			t.Fatalf("len %d: open in place: %v", n, err)
		}
	}
}

// TestVAESGCMBuffers seals in place and into spare capacity, and checks
// that an output overlapping its input other than exactly panics, as with
// Go's AES-GCM, instead of reading bytes it has overwritten.
func TestVAESGCMBuffers(t *testing.T) {
	requireVAES(t)
	key, nonce, aad := make([]byte, 32), make([]byte, 12), []byte("aad")
	rand.Read(key)
	rand.Read(nonce)
	fast, std := newVAESGCM(key), stdGCM(t, key)
	plain := make([]byte, 1000)
	rand.Read(plain)
	want := std.Seal(nil, nonce, plain, aad)

	buf := make([]byte, 8, 8+len(plain)+16+5)
	in := append(buf, plain...) // plain in place, with room for the tag
	got := fast.Seal(in[:8], nonce, in[8:], aad)
	if !bytes.Equal(got[8:], want) || &got[0] != &buf[:1][0] {
		t.Fatal("seal in place: wrong bytes or a new buffer")
	}
	opened, err := fast.Open(got[8:8], nonce, got[8:], aad)
	if err != nil || !bytes.Equal(opened, plain) {
		t.Fatalf("open in place after seal in place: %v", err)
	}

	spare := make([]byte, 3, 3+len(want))
	got, err = fast.Open(spare, nonce, want, aad)
	if err != nil || !bytes.Equal(got[3:], plain) || &got[0] != &spare[:1][0] {
		t.Fatalf("open into spare capacity: %v", err)
	}

	// A nonce in the output's spare room is read before anything is
	// written over it, as Go's AES-GCM reads it.
	nb := make([]byte, 12, 2000)
	copy(nb, nonce)
	if got := fast.Seal(nb[:0], nb[:12], plain, aad); !bytes.Equal(got, want) {
		t.Fatal("seal over its own nonce: wrong bytes")
	}
	copy(nb, nonce)
	if got, err := fast.Open(nb[:0], nb[:12], want, aad); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open over its own nonce: %v", err)
	}

	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatalf("%s: no panic", what)
			}
		}()
		f()
	}
	shared := make([]byte, 2*len(want))
	copy(shared[1:], want)
	mustPanic("open one byte past its input", func() { fast.Open(shared[2:2], nonce, shared[1:1+len(want)], aad) })
	mustPanic("open one byte before its input", func() { fast.Open(shared[:0], nonce, shared[1:1+len(want)], aad) })
	copy(shared[1:], plain)
	mustPanic("seal one byte past its input", func() { fast.Seal(shared[2:2], nonce, shared[1:1+len(plain)], aad) })
}

// TestVAESCounterWraps runs the keystream across the 32-bit counter's
// wrap, in both of ctrBlocks' loops, against AES of each counter block
// made the way GCM makes them: only the low 32 bits count, modulo 2^32.
func TestVAESCounterWraps(t *testing.T) {
	requireVAES(t)
	key := make([]byte, 32)
	rand.Read(key)
	g := newVAESGCM(key).(*vaesGCM)
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xff}
	for _, start := range []uint32{0xffffffe5, 0xfffffff0, 0xfffffffd, 0xffffffff, 0x7fffffff, 0} {
		for _, n := range []int{4, 8, 16, 20, 64} {
			ctr := counterBlock(prefix, start)
			src := make([]byte, 16*n)
			dst := make([]byte, 16*n)
			ctrBlocks(&g.rk, &ctr, &dst[0], &src[0], n)
			for i := 0; i < n; i++ {
				cb := counterBlock(prefix, start+uint32(i))
				var ks [16]byte
				block.Encrypt(ks[:], cb[:])
				if !bytes.Equal(dst[16*i:16*i+16], ks[:]) {
					t.Fatalf("start %#x, %d blocks: block %d is not AES of counter %#x", start, n, i, start+uint32(i))
				}
			}
			if next := counterBlock(prefix, start+uint32(n)); ctr != next {
				t.Fatalf("start %#x, %d blocks: next counter block %x, want %x", start, n, ctr, next)
			}
		}
	}
}

// TestVAESGCMRejects checks that a flipped bit anywhere in the ciphertext,
// tag, AAD or nonce fails authentication and leaves no plaintext behind:
// what Open wrote is zeroes, the bytes past it untouched.
func TestVAESGCMRejects(t *testing.T) {
	requireVAES(t)
	key := make([]byte, 32)
	rand.Read(key)
	g := newVAESGCM(key)
	nonce, aad, plain := make([]byte, 12), []byte("frame aad"), make([]byte, 4096+7)
	rand.Read(nonce)
	rand.Read(plain)
	sealed := g.Seal(nil, nonce, plain, aad)
	dst := make([]byte, 0, len(plain))
	check := func(what string, nonce, sealed, aad []byte) {
		t.Helper()
		d := dst[:cap(dst)]
		for i := range d {
			d[i] = 0xa5
		}
		if _, err := g.Open(dst, nonce, sealed, aad); err == nil {
			t.Fatalf("%s: opened", what)
		}
		n := max(len(sealed)-16, 0)
		for i := range d {
			if i < n && d[i] != 0 || i >= n && d[i] != 0xa5 {
				t.Fatalf("%s: byte %d of dst is %#x after the failure", what, i, d[i])
			}
		}
	}
	for _, i := range []int{0, 1, 15, 16, 255, 256, 4095, len(sealed) - 17, len(sealed) - 16, len(sealed) - 1} {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x10
		check("flipped ciphertext/tag byte", nonce, bad, aad)
	}
	badAAD := bytes.Clone(aad)
	badAAD[3] ^= 1
	check("flipped aad", nonce, sealed, badAAD)
	badNonce := bytes.Clone(nonce)
	badNonce[11] ^= 0x80
	check("flipped nonce", badNonce, sealed, aad)
	check("truncated", nonce, sealed[:len(sealed)-1], aad)
	check("short", nonce, sealed[:15], aad)
	check("extra aad", nonce, sealed, append(bytes.Clone(aad), 0))
}

// TestExpandKey256 checks the key schedule against FIPS 197's AES-256
// example (appendix A.3): its last round key.
func TestExpandKey256(t *testing.T) {
	key := []byte{
		0x60, 0x3d, 0xeb, 0x10, 0x15, 0xca, 0x71, 0xbe, 0x2b, 0x73, 0xae, 0xf0, 0x85, 0x7d, 0x77, 0x81,
		0x1f, 0x35, 0x2c, 0x07, 0x3b, 0x61, 0x08, 0xd7, 0x2d, 0x98, 0x10, 0xa3, 0x09, 0x14, 0xdf, 0xf4}
	var rk [240]byte
	expandKey256((*[32]byte)(key), &rk)
	want := []byte{0xfe, 0x48, 0x90, 0xd1, 0xe6, 0x18, 0x8d, 0x0b, 0x04, 0x6d, 0xf3, 0x44, 0x70, 0x6c, 0x63, 0x1e}
	if !bytes.Equal(rk[224:], want) {
		t.Fatalf("last round key %x, want %x", rk[224:], want)
	}
}

// benchGCMs runs f for each AES-GCM this CPU has (Go's, and the VAES one
// where it runs) and each message size.
func benchGCMs(b *testing.B, f func(b *testing.B, g cipher.AEAD, size int)) {
	key := make([]byte, 32)
	for _, size := range []int{4096, 32768} {
		for _, c := range []struct {
			name string
			g    cipher.AEAD
		}{{"go", stdGCM(b, key)}, {"vaes", newVAESGCM(key)}} {
			if c.g == nil {
				continue
			}
			b.Run(fmt.Sprintf("%s/%dKiB", c.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				f(b, c.g, size)
			})
		}
	}
}

func BenchmarkGCMSeal(b *testing.B) {
	benchGCMs(b, func(b *testing.B, g cipher.AEAD, size int) {
		nonce, plain, aad := make([]byte, 12), make([]byte, size), make([]byte, 40)
		out := make([]byte, 0, size+16)
		for b.Loop() {
			g.Seal(out[:0], nonce, plain, aad)
		}
	})
}

func BenchmarkGCMOpen(b *testing.B) {
	benchGCMs(b, func(b *testing.B, g cipher.AEAD, size int) {
		nonce, plain, aad := make([]byte, 12), make([]byte, size), make([]byte, 40)
		sealed := g.Seal(nil, nonce, plain, aad)
		for b.Loop() {
			if _, err := g.Open(plain[:0], nonce, sealed, aad); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestXAESUsesVAES checks that derived keys get the VAES AES-GCM where the
// CPU runs it, and Go's where it does not.
func TestXAESUsesVAES(t *testing.T) {
	x, err := newXAES(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, 24)
	if _, fast := x.gcm(nonce).(*vaesGCM); fast != vaesGCMOK {
		t.Fatalf("derived AES-GCM is the VAES one: %v, CPU runs it: %v", fast, vaesGCMOK)
	}
	ok := vaesGCMOK
	defer func() { vaesGCMOK = ok }()
	vaesGCMOK = false
	if _, fast := x.gcm(nonce).(*vaesGCM); fast {
		t.Fatal("VAES AES-GCM used with vaesGCMOK false")
	}
}
