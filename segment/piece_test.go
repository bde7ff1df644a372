package segment

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// A raw extent longer than a piece is sealed in pieces: whole-frame reads
// (copying, into a buffer of its size, verify) give it back, any range of pieces opens on
// its own, and a changed, moved, truncated or foreign piece does not.
func TestPiecedFrames(t *testing.T) {
	for _, ci := range bothCiphers {
		k := cipherKeys(t, ci)
		id := FrameID{Ino: 9, Extent: 4, Gen: 11}
		for _, n := range []int{PieceSize + 1, 2 * PieceSize, 12345, MaxPlainLen} {
			t.Run(fmt.Sprintf("%s/%d", ci, n), func(t *testing.T) {
				plain := randomExtent(n)
				f := EncodeFrame(nil, k, id, plain, CodecLZ4)
				if !Pieced(len(f), n) || len(f) != PiecedLen(n) {
					t.Fatalf("frame of %d bytes for %d: not pieced", len(f), n)
				}
				if err := (Pointer{Length: uint32(len(f)), PlainLen: uint32(n)}).Validate(); err != nil {
					t.Fatal(err)
				}
				if got, err := DecodeFrame(k, id, f, n); err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("DecodeFrame: %v", err)
				}
				if got, inPlace, err := openTo(k, id, bytes.Clone(f), n); err != nil || !inPlace || !bytes.Equal(got, plain) || cap(got) != n {
					t.Fatalf("openTo: %v (in its buffer %v, cap %d)", err, inPlace, cap(got))
				}
				if err := VerifyFrame(k, id, f, n); err != nil {
					t.Fatal(err)
				}
				for _, r := range [][2]int{{0, 1}, {1, PieceSize}, {PieceSize - 1, PieceSize + 1}, {n - 1, n}, {PieceSize, n}, {0, n}} {
					first, a, b := PieceSpan(n, r[0], r[1])
					want := plain[first*PieceSize : min(n, (first+(b-a+PieceSize+PieceOverhead-1)/(PieceSize+PieceOverhead))*PieceSize)]
					got, err := openPieces(nil, k, id, n, first, f[a:b])
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("pieces of [%d,%d): %v", r[0], r[1], err)
					}
					got, err = openPiecesInPlace(k, id, n, first, bytes.Clone(f[a:b]))
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("pieces of [%d,%d) in place: %v", r[0], r[1], err)
					}
					if r[0] < first*PieceSize || r[1] > first*PieceSize+len(got) {
						t.Fatalf("pieces [%d,+%d) do not hold [%d,%d)", first*PieceSize, len(got), r[0], r[1])
					}
				}
				bad := func(what string, frame []byte, id FrameID) {
					t.Helper()
					if _, err := DecodeFrame(k, id, frame, n); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("%s: DecodeFrame %v, want ErrCorrupt", what, err)
					}
					if err := VerifyFrame(k, id, frame, n); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("%s: VerifyFrame %v, want ErrCorrupt", what, err)
					}
				}
				last := pieceCount(n) - 1
				for _, i := range []int{0, len(f) / 2, len(f) - 1} {
					g := bytes.Clone(f)
					g[i] ^= 4
					bad(fmt.Sprintf("byte %d flipped", i), g, id)
				}
				bad("another frame id", f, FrameID{Ino: 9, Extent: 5, Gen: 11})
				bad("another generation", f, FrameID{Ino: 9, Extent: 4, Gen: 12})
				// The second piece opened as the first, and the last alone
				// as if it were the first of its frame.
				_, a, b := PieceSpan(n, PieceSize, PieceSize+1)
				if _, err := openPieces(nil, k, id, n, 0, f[a:b]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("piece 1 opened as piece 0: %v", err)
				}
				_, a, _ = PieceSpan(n, last*PieceSize, n)
				if _, err := openPieces(nil, k, id, n, last-1, f[a:]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("last piece opened in another place: %v", err)
				}
				// A span that does not end at a piece's end.
				if _, err := openPieces(nil, k, id, n, 0, f[:PieceSize+PieceOverhead+10]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("span cut inside a piece: %v", err)
				}
				// Two whole pieces swapped.
				if n >= 2*PieceSize+1 {
					g := bytes.Clone(f)
					w := PieceSize + PieceOverhead
					copy(g[:w], f[w:2*w])
					copy(g[w:2*w], f[:w])
					bad("pieces swapped", g, id)
				}
			})
		}
	}
	// What stays whole: a raw extent of one piece or less, and a
	// compressed one.
	k := testKeys(t)
	id := FrameID{Ino: 1}
	if f := EncodeFrame(nil, k, id, randomExtent(PieceSize), CodecNone); len(f) != PieceSize+FrameOverhead {
		t.Fatalf("raw 4 KiB extent: frame of %d bytes", len(f))
	}
	if f := EncodeFrame(nil, k, id, textExtent(1, MaxPlainLen), CodecLZ4); len(f) >= MaxPlainLen {
		t.Fatalf("compressible extent: frame of %d bytes", len(f))
	}
	// Nor does anything in a filesystem older than format 3.
	old := *k
	old.Pieced = false
	if f := EncodeFrame(nil, &old, id, randomExtent(MaxPlainLen), CodecLZ4); len(f) != MaxPlainLen+FrameOverhead {
		t.Fatalf("raw extent of a format-2 filesystem: frame of %d bytes", len(f))
	}
}

// The frame length tells the two kinds apart: a pointer is valid with a
// whole frame's length (up to plain + 41) or exactly a pieced one's.
func TestPointerFrameLengths(t *testing.T) {
	for _, plain := range []int{PieceSize, PieceSize + 1, 8192, MaxPlainLen} {
		pieced := PiecedLen(plain)
		for length := plain; length <= pieced+1; length++ {
			err := (Pointer{Length: uint32(length), PlainLen: uint32(plain)}).Validate()
			want := length <= plain+FrameOverhead || (plain > PieceSize && length == pieced)
			if (err == nil) != want {
				t.Fatalf("plain %d, frame %d: valid %v, want %v (%v)", plain, length, err == nil, want, err)
			}
		}
	}
}
