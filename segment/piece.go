package segment

import (
	"encoding/binary"
	"fmt"

	"ebbfs.dev/ebbfs/internal/keys"
)

// Pieced frames. An extent longer than PieceSize that is stored raw (no
// compression, or none that helps) is sealed as consecutive pieces of
// PieceSize plaintext bytes (the last one shorter), each its own AEAD
// message:
//
//	piece = nonce (24) || ciphertext || tag (16)
//
// so that a small read of the extent fetches and authenticates only the
// pieces it covers: a 4 KiB random read of a 32 KiB extent reads 4,136
// bytes, not 32,809. The pieces of the frames sealed together (up to
// sealGroup consecutive frames of Builder.AddFrames, or one frame) share
// the first 12 bytes of their nonces (keys.Sealer), so XAES-256-GCM
// derives one key per group.
//
// A pieced frame of plainLen bytes is PiecedLen(plainLen) long: plainLen
// plus 40 bytes for each of at least two pieces. A whole frame is at most
// plainLen + 41 bytes, so the two kinds never have the same length for
// the same plain length, and the pointer's Length says which one it is.
//
// Each piece's AAD is "ebbfs-piece-v1" || fs uuid || ino || extent || gen
// (u64 LE) || piece index || piece count (u32 LE): a piece authenticates
// only as itself, in its place, in its frame.
const PieceSize = 4096

// PieceOverhead is what each piece adds: its nonce and tag.
const PieceOverhead = keys.Overhead

const pieceAADMagic = "ebbfs-piece-v1"

const pieceAADLen = len(pieceAADMagic) + 16 + 3*8 + 2*4

// pieceCount is the number of pieces of plainLen bytes.
func pieceCount(plainLen int) int { return (plainLen + PieceSize - 1) / PieceSize }

// PiecedLen is the length of the pieced frame of plainLen bytes.
func PiecedLen(plainLen int) int { return plainLen + pieceCount(plainLen)*PieceOverhead }

// Pieced reports whether a frame of frameLen bytes holding plainLen plain
// bytes is sealed in pieces.
func Pieced(frameLen, plainLen int) bool {
	return plainLen > PieceSize && frameLen == PiecedLen(plainLen)
}

// IsPieced reports whether the frame p points at is sealed in pieces.
func (p Pointer) IsPieced() bool { return Pieced(int(p.Length), int(p.PlainLen)) }

// MaxFrameLen is the longest frame an extent of plainLen bytes can have.
func MaxFrameLen(plainLen int) int {
	if plainLen > PieceSize {
		return PiecedLen(plainLen)
	}
	return plainLen + FrameOverhead
}

func pieceAAD(buf *[pieceAADLen]byte, uuid [16]byte, id FrameID, i, n int) []byte {
	b := appendFrameID(append(buf[:0], pieceAADMagic...), uuid, id)
	b = binary.LittleEndian.AppendUint32(b, uint32(i))
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	return b
}

// sealPieces appends the pieced frame of plain (longer than PieceSize) to
// dst, its pieces sealed by s (nil: a Sealer of its own).
func sealPieces(dst []byte, k *keys.Keys, s *keys.Sealer, id FrameID, plain []byte) []byte {
	if s == nil {
		own := k.Data.NewSealer()
		s = &own
	}
	var ab [pieceAADLen]byte
	n := pieceCount(len(plain))
	for i := 0; i < n; i++ {
		piece := plain[i*PieceSize : min((i+1)*PieceSize, len(plain))]
		dst = s.SealTo(dst, pieceAAD(&ab, k.UUID, id, i, n), piece)
	}
	return dst
}

// PieceSpan returns the pieces of a pieced frame of plainLen bytes that
// hold plaintext [from, to) (0 <= from < to <= plainLen): the first one's
// index, and the byte range [a, b) they take in the frame.
func PieceSpan(plainLen, from, to int) (first, a, b int) {
	first = from / PieceSize
	end := (to + PieceSize - 1) / PieceSize
	a = first * (PieceSize + PieceOverhead)
	b = min(end*(PieceSize+PieceOverhead), PiecedLen(plainLen))
	return first, a, b
}

// openPieces authenticates and decrypts span, consecutive pieces of the
// pieced frame of plainLen bytes sealed for id starting with piece first,
// and appends their plaintext to dst.
func openPieces(dst []byte, k *keys.Keys, id FrameID, plainLen, first int, span []byte) ([]byte, error) {
	return OpenPiecesTo(dst, false, k, nil, id, plainLen, first, span)
}

// openPiecesInPlace is openPieces decrypting over span: it returns
// span[:plaintext length], each piece's plaintext moved down to close the
// gaps of the nonces and tags (piece i lands at (i-first)*PieceSize, before
// the bytes of the pieces after it). span is destroyed either way.
func openPiecesInPlace(k *keys.Keys, id FrameID, plainLen, first int, span []byte) ([]byte, error) {
	return OpenPiecesTo(span[:0], true, k, nil, id, plainLen, first, span)
}

// OpenPiecesTo authenticates and decrypts span, consecutive pieces of the
// pieced frame of plainLen bytes sealed for id starting with piece first,
// and appends their plaintext to dst; or, inPlace (dst then span[:0]),
// decrypts over span, each piece's plaintext moved down to close the gaps
// of the nonces and tags. It opens the pieces with o, which keeps the key
// it derived for the frames after this one (nil: an Opener of its own).
func OpenPiecesTo(dst []byte, inPlace bool, k *keys.Keys, o *keys.Opener, id FrameID, plainLen, first int, span []byte) ([]byte, error) {
	if o == nil {
		own := k.Data.NewOpener()
		o = &own
	}
	n := pieceCount(plainLen)
	var ab [pieceAADLen]byte
	at := 0
	for i := first; at < len(span); i++ {
		m := min(PieceSize, plainLen-i*PieceSize) + PieceOverhead
		if i >= n || m > len(span)-at {
			return nil, fmt.Errorf("frame (ino %d, extent %d, gen %d): %d bytes of pieces from piece %d of %d do not end at a piece: %w",
				id.Ino, id.Extent, id.Gen, len(span), first, n, ErrCorrupt)
		}
		sealed := span[at : at+m]
		aad := pieceAAD(&ab, k.UUID, id, i, n)
		if inPlace {
			out, err := o.OpenTo(sealed[keys.NonceSize:keys.NonceSize], aad, sealed)
			if err != nil {
				return nil, pieceErr(id, i, n, err)
			}
			dst = append(dst, out...) // moves down over bytes already opened
		} else {
			out, err := o.OpenTo(dst, aad, sealed)
			if err != nil {
				return nil, pieceErr(id, i, n, err)
			}
			dst = out
		}
		at += m
	}
	return dst, nil
}

func pieceErr(id FrameID, i, n int, err error) error {
	return fmt.Errorf("frame (ino %d, extent %d, gen %d), piece %d of %d: %w: %w", id.Ino, id.Extent, id.Gen, i, n, err, ErrCorrupt)
}
