package keys

import (
	"bytes"
	"crypto/sha3"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The two test vectors of c2sp.org/XAES-256-GCM, with the intermediate
// values the specification lists (L, K1, Kx): one for each branch of the
// doubling that makes K1.
func TestXAESVectors(t *testing.T) {
	for _, v := range []struct {
		name                  string
		key                   byte
		l, k1, kx             string
		plain, aad, sealedHex string
	}{
		{
			name:      "top bit of L clear",
			key:       0x01,
			l:         "7298caa565031eadc6ce23d23ea66378",
			k1:        "e531954aca063d5b8d9c47a47d4cc6f0",
			kx:        "c8612c9ed53fe43e8e005b828a1631a0bbcb6ab2f46514ec4f439fcfd0fa969b",
			plain:     "XAES-256-GCM",
			sealedHex: "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271",
		},
		{
			name:      "top bit of L set",
			key:       0x03,
			l:         "91c08762876dccf9ba204a33768fa5fe",
			k1:        "23810ec50edb99f374409466ed1f4b7b",
			kx:        "e9c621d4cdd9b11b00a6427ad7e559aeedd66b3857646677748f8ca796cb3fd8",
			plain:     "XAES-256-GCM",
			aad:       "c2sp.org/XAES-256-GCM",
			sealedHex: "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d",
		},
	} {
		t.Run(v.name, func(t *testing.T) {
			key := bytes.Repeat([]byte{v.key}, 32)
			nonce := []byte("ABCDEFGHIJKLMNOPQRSTUVWX")
			x, err := newXAES(key)
			if err != nil {
				t.Fatal(err)
			}
			var l [16]byte
			x.block.Encrypt(l[:], l[:])
			if got := hex.EncodeToString(l[:]); got != v.l {
				t.Errorf("L = %s, want %s", got, v.l)
			}
			if got := hex.EncodeToString(x.k1[:]); got != v.k1 {
				t.Errorf("K1 = %s, want %s", got, v.k1)
			}
			kx := x.deriveKey(nonce)
			if got := hex.EncodeToString(kx[:]); got != v.kx {
				t.Errorf("Kx = %s, want %s", got, v.kx)
			}
			sealed := x.Seal(nil, nonce, []byte(v.plain), []byte(v.aad))
			if got := hex.EncodeToString(sealed); got != v.sealedHex {
				t.Fatalf("sealed = %s, want %s", got, v.sealedHex)
			}
			plain, err := x.Open(nil, nonce, unhex(t, v.sealedHex), []byte(v.aad))
			if err != nil || string(plain) != v.plain {
				t.Fatalf("open = %q, %v", plain, err)
			}
			// Through AEAD: nonce || ciphertext || tag.
			a, err := NewAEADCipher(key, CipherXAES256GCM)
			if err != nil {
				t.Fatal(err)
			}
			blob := append(append([]byte(nil), nonce...), sealed...)
			if got, err := a.Open([]byte(v.aad), blob); err != nil || string(got) != v.plain {
				t.Fatalf("AEAD.Open = %q, %v", got, err)
			}
			blob[len(blob)-1] ^= 1
			if _, err := a.Open([]byte(v.aad), blob); !errors.Is(err, ErrAuth) {
				t.Fatalf("tampered tag accepted: %v", err)
			}
		})
	}
}

// The specification's accumulated randomized test: keys, nonces,
// plaintexts and AADs drawn from SHAKE-128 of the empty string, every
// ciphertext absorbed into a second SHAKE-128, whose first 32 bytes are
// given for 10,000 and 1,000,000 iterations (EBBFS_XAES_MILLION=1; about
// 7 s on a 2-core VM).
func TestXAESAccumulated(t *testing.T) {
	iterations, want := 10_000, "e6b9edf2df6cec60c8cbd864e2211b597fb69a529160cd040d56c0c210081939"
	if os.Getenv("EBBFS_XAES_MILLION") == "1" {
		iterations, want = 1_000_000, "2163ae1445985a30b60585ee67daa55674df06901b890593e824b8a7c885ab15"
	}
	src, sink := sha3.NewSHAKE128(), sha3.NewSHAKE128()
	var key [32]byte
	var nonce [24]byte
	var n [1]byte
	plain := make([]byte, 256)
	aad := make([]byte, 256)
	var sealed, opened []byte
	for i := range iterations {
		src.Read(key[:])
		src.Read(nonce[:])
		src.Read(n[:])
		p := plain[:n[0]]
		src.Read(p)
		src.Read(n[:])
		a := aad[:n[0]]
		src.Read(a)
		x, err := newXAES(key[:])
		if err != nil {
			t.Fatal(err)
		}
		sealed = x.Seal(sealed[:0], nonce[:], p, a)
		opened, err = x.Open(opened[:0], nonce[:], sealed, a)
		if err != nil || !bytes.Equal(opened, p) {
			t.Fatalf("iteration %d: open: %v", i, err)
		}
		sink.Write(sealed)
	}
	var sum [32]byte
	sink.Read(sum[:])
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("%d iterations: %s, want %s", iterations, got, want)
	}
}

func BenchmarkSeal32K(b *testing.B) {
	key := bytes.Repeat([]byte{7}, 32)
	plain := make([]byte, 32<<10)
	for _, c := range []Cipher{CipherXAES256GCM, CipherXChaCha20Poly1305} {
		b.Run(string(c), func(b *testing.B) {
			a, err := NewAEADCipher(key, c)
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]byte, 0, len(plain)+Overhead)
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				dst = a.SealTo(dst[:0], []byte("aad"), plain)
			}
		})
	}
}

func BenchmarkOpen32K(b *testing.B) {
	key := bytes.Repeat([]byte{7}, 32)
	plain := make([]byte, 32<<10)
	for _, c := range []Cipher{CipherXAES256GCM, CipherXChaCha20Poly1305} {
		b.Run(string(c), func(b *testing.B) {
			a, err := NewAEADCipher(key, c)
			if err != nil {
				b.Fatal(err)
			}
			sealed := a.Seal([]byte("aad"), plain)
			dst := make([]byte, 0, len(plain))
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				var err error
				if dst, err = a.OpenTo(dst[:0], []byte("aad"), sealed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGCM measures the AES-256-GCM under XAES-256-GCM (Go's
// crypto/aes and crypto/cipher) on a piece (4 KiB) and a frame (32 KiB),
// and the derivation of a group's key and AES-GCM that gcmCache saves.
func BenchmarkGCM(b *testing.B) {
	x, err := newXAES(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	nonce, aad := make([]byte, xaesNonceSize), make([]byte, 40)
	g := x.gcm(nonce)
	for _, size := range []int{4096, 32768} {
		plain := make([]byte, size)
		sealed := g.Seal(nil, nonce[12:], plain, aad)
		b.Run(fmt.Sprintf("seal/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			out := make([]byte, 0, size+xaesTagSize)
			for b.Loop() {
				g.Seal(out[:0], nonce[12:], plain, aad)
			}
		})
		b.Run(fmt.Sprintf("open/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := g.Open(plain[:0], nonce[12:], sealed, aad); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("derive", func(b *testing.B) {
		for b.Loop() {
			x.gcm(nonce)
		}
	})
}
