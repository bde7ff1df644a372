package segment

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
)

// cipherKeys returns fresh keys sealing with c.
func cipherKeys(tb testing.TB, c keys.Cipher) *keys.Keys {
	tb.Helper()
	k := &keys.Keys{Cipher: c, Pieced: true}
	rand.Read(k.UUID[:])
	raw := make([]byte, 32)
	rand.Read(raw)
	a, err := keys.NewAEADCipher(raw, c)
	if err != nil {
		tb.Fatal(err)
	}
	k.Data, k.Meta = a, a
	return k
}

var bothCiphers = []keys.Cipher{keys.CipherXAES256GCM, keys.CipherXChaCha20Poly1305}

// Segments round trip under both ciphers, with every codec, through the
// directory and both frame decoders; frames are the same length under
// either cipher.
func TestSegmentRoundTripBothCiphers(t *testing.T) {
	for _, ci := range bothCiphers {
		k := cipherKeys(t, ci)
		for _, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
			data, ids, plains, _ := buildSegment(t, k, 0x51, c, 6)
			f, err := ParseFooter(data[len(data)-FooterSize:])
			if err != nil {
				t.Fatal(err)
			}
			ents, err := ParseDirectory(k, f, data[f.DirOffset:f.DirOffset+uint64(f.DirLen)])
			if err != nil {
				t.Fatalf("%s/%v: directory: %v", ci, c, err)
			}
			for i, e := range ents {
				frame := data[e.Offset : uint64(e.Offset)+uint64(e.Length)]
				if e.ID() != ids[i] {
					t.Fatalf("%s/%v: entry %d id %+v", ci, c, i, e.ID())
				}
				got, err := DecodeFrame(k, e.ID(), frame, int(e.PlainLen))
				if err != nil || !bytes.Equal(got, plains[i]) {
					t.Fatalf("%s/%v: frame %d: %v", ci, c, i, err)
				}
				got, _, err = openTo(k, e.ID(), bytes.Clone(frame), int(e.PlainLen))
				if err != nil || !bytes.Equal(got, plains[i]) {
					t.Fatalf("%s/%v: frame %d into a buffer: %v", ci, c, i, err)
				}
				if err := VerifyFrame(k, e.ID(), frame, int(e.PlainLen)); err != nil {
					t.Fatalf("%s/%v: verify frame %d: %v", ci, c, i, err)
				}
			}
		}
		raw := randomExtent(ExtentSize)
		if n := len(EncodeFrame(nil, k, FrameID{Ino: 1}, raw, CodecLZ4)); n != PiecedLen(len(raw)) {
			t.Fatalf("%s: raw frame of %d bytes, want %d (pieced)", ci, n, PiecedLen(len(raw)))
		}
	}
}

// Tampering is detected under both ciphers: any flipped bit of a frame,
// a truncation, another frame id, and a frame sealed under the other
// cipher with the same key.
func TestFrameTamperingBothCiphers(t *testing.T) {
	for _, ci := range bothCiphers {
		k := cipherKeys(t, ci)
		id := FrameID{Ino: 3, Extent: 4, Gen: 5}
		for _, c := range []Codec{CodecNone, CodecZstd} {
			plain := textExtent(11, 2048)
			f := EncodeFrame(nil, k, id, plain, c)
			for i := range f {
				g := bytes.Clone(f)
				g[i] ^= 1 << (i % 8)
				if out, err := DecodeFrame(k, id, g, len(plain)); !errors.Is(err, ErrCorrupt) || out != nil {
					t.Fatalf("%s/%v: flip at %d: err %v", ci, c, i, err)
				}
				if _, _, err := openTo(k, id, g, len(plain)); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s/%v: flip at %d into a buffer: err %v", ci, c, i, err)
				}
			}
			if _, err := DecodeFrame(k, id, f[:len(f)-1], len(plain)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s/%v: truncated frame: %v", ci, c, err)
			}
			if _, err := DecodeFrame(k, FrameID{Ino: 3, Extent: 4, Gen: 6}, f, len(plain)); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s/%v: frame opened under another gen: %v", ci, c, err)
			}
		}
	}
	// Same raw key, other cipher.
	raw := bytes.Repeat([]byte{0x42}, 32)
	var ks [2]*keys.Keys
	for i, ci := range bothCiphers {
		a, _ := keys.NewAEADCipher(raw, ci)
		ks[i] = &keys.Keys{Cipher: ci, Data: a, Meta: a}
	}
	id := FrameID{Ino: 9}
	plain := textExtent(12, 1000)
	for i := range ks {
		f := EncodeFrame(nil, ks[i], id, plain, CodecLZ4)
		if _, err := DecodeFrame(ks[1-i], id, f, len(plain)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a %s frame opened as %s: %v", ks[i].Cipher, ks[1-i].Cipher, err)
		}
	}
}

// BenchmarkEncodeFrameCipher is EncodeFrame of an incompressible 32 KiB
// extent (LZ4's probe rejects it) under each cipher: the write path's
// per-extent CPU cost.
func BenchmarkEncodeFrameCipher(b *testing.B) {
	plain := randomExtent(ExtentSize)
	for _, ci := range bothCiphers {
		b.Run(string(ci), func(b *testing.B) {
			k := cipherKeys(b, ci)
			dst := make([]byte, 0, ExtentSize+FrameOverhead)
			b.SetBytes(ExtentSize)
			for b.Loop() {
				dst = EncodeFrame(dst[:0], k, FrameID{Ino: 1}, plain, CodecLZ4)
			}
		})
	}
}

// BenchmarkDecodeFrameCipher is the read side: a raw 32 KiB frame
// decrypted into a run's buffer, as the reader does.
func BenchmarkDecodeFrameCipher(b *testing.B) {
	plain := randomExtent(ExtentSize)
	for _, ci := range bothCiphers {
		b.Run(string(ci), func(b *testing.B) {
			k := cipherKeys(b, ci)
			f := EncodeFrame(nil, k, FrameID{Ino: 1}, plain, CodecLZ4)
			g := make([]byte, len(f))
			b.SetBytes(ExtentSize)
			for b.Loop() {
				copy(g, f)
				if _, _, err := openTo(k, FrameID{Ino: 1}, g, ExtentSize); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
