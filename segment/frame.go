package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"ebbfs.dev/ebbfs/internal/keys"
)

// ErrCorrupt is wrapped by every error that reports corrupt or tampered
// segment bytes: a frame or directory that fails authentication, a payload
// that does not decompress to the expected length, a malformed footer or
// directory.
var ErrCorrupt = errors.New("segment: corrupt data")

// Codec names the compression of one frame's payload.
type Codec uint8

const (
	CodecNone Codec = 0
	CodecLZ4  Codec = 1
	CodecZstd Codec = 2
)

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecLZ4:
		return "lz4"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// ParseCodec maps a configuration name ("none", "lz4", "zstd") to a Codec.
func ParseCodec(s string) (Codec, error) {
	switch s {
	case "none", "":
		return CodecNone, nil
	case "lz4":
		return CodecLZ4, nil
	case "zstd":
		return CodecZstd, nil
	}
	return 0, fmt.Errorf("unknown compression %q (want none, lz4 or zstd)", s)
}

// FrameOverhead is the number of bytes a frame adds to its payload: the
// nonce, the codec byte and the tag.
const FrameOverhead = keys.Overhead + 1

const frameAADMagic = "ebbfs-frame-v1"

// frameAADLen is the AAD length: magic, uuid, ino, extent, gen.
const frameAADLen = len(frameAADMagic) + 16 + 3*8

func frameAAD(buf *[frameAADLen]byte, uuid [16]byte, id FrameID) []byte {
	return appendFrameID(append(buf[:0], frameAADMagic...), uuid, id)
}

// appendFrameID appends what binds a frame (or a piece) to its place and
// version: fs uuid, ino, extent, gen.
func appendFrameID(b []byte, uuid [16]byte, id FrameID) []byte {
	b = append(b, uuid[:]...)
	b = binary.LittleEndian.AppendUint64(b, id.Ino)
	b = binary.LittleEndian.AppendUint64(b, id.Extent)
	return binary.LittleEndian.AppendUint64(b, id.Gen)
}

var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
	zstdErr  error
)

func zstdCodecs() (*zstd.Encoder, *zstd.Decoder, error) {
	zstdOnce.Do(func() {
		zstdEnc, zstdErr = zstd.NewWriter(nil,
			zstd.WithEncoderCRC(false), // the AEAD tag covers integrity
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithWindowSize(MaxPlainLen),
			zstd.WithSingleSegment(true))
		if zstdErr != nil {
			return
		}
		zstdDec, zstdErr = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxPlainLen),
			zstd.WithDecodeAllCapLimit(true))
	})
	return zstdEnc, zstdDec, zstdErr
}

var lz4Pool = sync.Pool{New: func() any { return new(lz4.Compressor) }}

// compress appends plain compressed with c to dst and reports whether the
// result is smaller than plain. On false dst is returned unchanged.
func compress(dst, plain []byte, c Codec) ([]byte, bool) {
	if len(plain) == 0 {
		return dst, false
	}
	n := len(dst)
	switch c {
	case CodecLZ4:
		if !lz4Worthwhile(plain) {
			return dst, false
		}
		lc := lz4Pool.Get().(*lz4.Compressor)
		defer lz4Pool.Put(lc)
		bound := lz4.CompressBlockBound(len(plain))
		dst = grow(dst, bound)
		m, err := lc.CompressBlock(plain, dst[n:n+bound])
		if err != nil || m == 0 || m >= len(plain) {
			return dst[:n], false
		}
		return dst[:n+m], true
	case CodecZstd:
		enc, _, err := zstdCodecs()
		if err != nil {
			return dst, false
		}
		out := enc.EncodeAll(plain, dst)
		if len(out)-n >= len(plain) {
			return out[:n], false
		}
		return out, true
	}
	return dst, false
}

// Early abort: much of what ebbfs stores (disk images of encrypted or
// compressed data, media, backups) does not compress, and an LZ4 pass over
// a whole extent that is then stored raw costs a third of the CPU of
// sealing it. An extent of at least probeMin bytes is compressed only if
// one of three probeSample samples (start, middle, end) would shrink by at
// least 1/16 under LZ4 (estimated by sampleCompressible), or if two of its
// 4 KiB blocks start alike (a block repeated within the extent, which no
// sample would show).
const (
	probeMin    = 16 << 10
	probeSample = 2 << 10
	probeBlock  = 4 << 10
	probePrefix = 32
)

func lz4Worthwhile(plain []byte) bool {
	if len(plain) < probeMin {
		return true
	}
	for a := 0; a+probeBlock <= len(plain); a += probeBlock {
		for b := a + probeBlock; b+probePrefix <= len(plain); b += probeBlock {
			if bytes.Equal(plain[a:a+probePrefix], plain[b:b+probePrefix]) {
				return true
			}
		}
	}
	for _, at := range [...]int{0, len(plain)/2 - probeSample/2, len(plain) - probeSample} {
		if sampleCompressible(plain[at : at+probeSample]) {
			return true
		}
	}
	return false
}

// sampleCompressible estimates whether LZ4 would shrink s (under 64 KiB)
// by at least len(s)/16, without compressing it: a greedy LZ77 parse like
// LZ4's (4-byte hashes into a table of last positions, skipping faster
// after each 32 misses in a row) that adds up what its matches would save,
// their length less the 3 bytes a match costs. Running LZ4 itself on the
// three 2 KiB samples cost more than sealing the extent with
// XAES-256-GCM; this costs a small fraction of that on data that does not
// compress and stops at the first 1/16 on data that does (the figures:
// bench/README.md, "Figures behind the code's constants").
func sampleCompressible(s []byte) bool {
	// 1024 slots for a 2 KiB sample: clearing the table is a good part of
	// the cost on data that does not compress.
	const hashLog = 10
	var table [1 << hashLog]uint16 // position + 1 of the last 4 bytes with that hash
	n := len(s)
	want := n / 16
	saved, misses := 0, 0
	for i := 0; i+4 <= n; {
		v := binary.LittleEndian.Uint32(s[i:])
		h := (v * 2654435761) >> (32 - hashLog)
		cand := int(table[h]) - 1
		table[h] = uint16(i + 1)
		if cand >= 0 && binary.LittleEndian.Uint32(s[cand:]) == v {
			m := 4
			for i+m < n && s[cand+m] == s[i+m] {
				m++
			}
			if saved += m - 3; saved >= want {
				return true
			}
			i += m
			misses = 0
			continue
		}
		misses++
		i += 1 + misses>>5
	}
	return false
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n][:len(b)]
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}

// EncodeFrame compresses plain with c (falling back to storing it raw when
// compression does not shrink it), seals it under the data key and appends
// the frame to dst:
//
//	nonce (24) || AEAD(codec byte || payload) || tag (16)
//
// In a format-3 filesystem (k.Pieced), an extent longer than PieceSize
// that is stored raw is sealed in pieces instead (piece.go).
//
// The AEAD is the filesystem's cipher (keys.Keys.Cipher): XAES-256-GCM, or
// XChaCha20-Poly1305 for format-1 filesystems and CPUs without AES
// instructions; both have a 24-byte nonce and a 16-byte tag.
//
// The AAD is "ebbfs-frame-v1" || fs uuid || ino || extent || gen (u64 LE
// each). The segment id is not bound, so repack can copy frames verbatim.
func EncodeFrame(dst []byte, k *keys.Keys, id FrameID, plain []byte, c Codec) []byte {
	return encodeFrame(dst, k, nil, id, plain, c)
}

// encodeFrame is EncodeFrame sealing the pieces of a pieced frame with s
// (nil: a Sealer of its own).
func encodeFrame(dst []byte, k *keys.Keys, s *keys.Sealer, id FrameID, plain []byte, c Codec) []byte {
	var ab [frameAADLen]byte
	aad := frameAAD(&ab, k.UUID, id)
	// Build codec byte || payload in a pooled scratch buffer, then seal it.
	sp := scratchPool.Get().(*[]byte)
	scratch, ok := compress(append((*sp)[:0], byte(c)), plain, c)
	if !ok && len(plain) > PieceSize && k.Pieced {
		scratchPool.Put(sp)
		return sealPieces(dst, k, s, id, plain)
	}
	if !ok {
		scratch = append(scratch[:1], plain...)
		scratch[0] = byte(CodecNone)
	}
	dst = k.Data.SealTo(dst, aad, scratch)
	if cap(scratch) <= 2*scratchSize {
		*sp = scratch[:0]
	}
	scratchPool.Put(sp)
	return dst
}

const scratchSize = 1 + MaxPlainLen + MaxPlainLen/128 + 64

var scratchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, scratchSize)
	return &b
}}

// DecodeFrame authenticates a frame made by EncodeFrame for id and returns
// its plaintext, which must be exactly plainLen bytes. Every failure wraps
// ErrCorrupt.
func DecodeFrame(k *keys.Keys, id FrameID, frame []byte, plainLen int) ([]byte, error) {
	return decodeFrameTo(nil, k, id, frame, plainLen)
}

// checkFrameLen validates a frame's length against its plain length.
func checkFrameLen(frame []byte, plainLen int) error {
	if plainLen < 0 || plainLen > MaxPlainLen {
		return fmt.Errorf("frame: plain length %d outside [0,%d]: %w", plainLen, MaxPlainLen, ErrCorrupt)
	}
	if len(frame) < FrameOverhead {
		return fmt.Errorf("frame: %d bytes, shorter than the %d-byte overhead: %w", len(frame), FrameOverhead, ErrCorrupt)
	}
	if len(frame) > plainLen+FrameOverhead && !Pieced(len(frame), plainLen) {
		return fmt.Errorf("frame: %d bytes, too long for %d plain bytes: %w", len(frame), plainLen, ErrCorrupt)
	}
	return nil
}

func decodeFrameTo(dst []byte, k *keys.Keys, id FrameID, frame []byte, plainLen int) ([]byte, error) {
	return DecodeFrameWith(dst, k, nil, id, frame, plainLen)
}

// DecodeFrameWith decodes frame, the frame of plainLen plain bytes sealed
// for id, appending its plaintext to dst (decrypted straight into dst when
// it has room), and opens a pieced frame with o (nil: an Opener of its
// own).
func DecodeFrameWith(dst []byte, k *keys.Keys, o *keys.Opener, id FrameID, frame []byte, plainLen int) ([]byte, error) {
	if err := checkFrameLen(frame, plainLen); err != nil {
		return nil, err
	}
	if Pieced(len(frame), plainLen) {
		return OpenPiecesTo(grow(dst, plainLen), false, k, o, id, plainLen, 0, frame)
	}
	// Decrypt into a pooled scratch buffer and only then into dst (or a
	// new slice of exactly plainLen bytes): codec byte and payload do not
	// fit a 32 KiB allocation, and a plaintext cached in a 33-byte-larger
	// slice would occupy a 40 KiB span.
	sp := scratchPool.Get().(*[]byte)
	defer scratchPool.Put(sp)
	var ab [frameAADLen]byte
	inner, err := k.Data.OpenTo((*sp)[:0], frameAAD(&ab, k.UUID, id), frame)
	if err != nil {
		return nil, fmt.Errorf("frame (ino %d, extent %d, gen %d): %w: %w", id.Ino, id.Extent, id.Gen, err, ErrCorrupt)
	}
	if cap(inner) <= 2*scratchSize {
		*sp = inner[:0]
	}
	if len(inner) < 1 {
		return nil, fmt.Errorf("frame: empty payload: %w", ErrCorrupt)
	}
	return decodePayload(dst, Codec(inner[0]), inner[1:], plainLen)
}

// decodePayload appends the plaintext of a frame's decrypted payload to dst.
func decodePayload(dst []byte, codec Codec, payload []byte, plainLen int) ([]byte, error) {
	switch codec {
	case CodecNone:
		if len(payload) != plainLen {
			return nil, fmt.Errorf("frame: raw payload of %d bytes, want %d: %w", len(payload), plainLen, ErrCorrupt)
		}
		out := grow(dst, plainLen)
		return append(out, payload...), nil
	case CodecLZ4:
		out := grow(dst, plainLen)
		n := len(out)
		m, err := lz4.UncompressBlock(payload, out[n:n+plainLen])
		if err != nil || m != plainLen {
			return nil, fmt.Errorf("frame: lz4 payload does not decode to %d bytes: %w", plainLen, ErrCorrupt)
		}
		return out[:n+plainLen], nil
	case CodecZstd:
		_, dec, err := zstdCodecs()
		if err != nil {
			return nil, fmt.Errorf("frame: zstd unavailable: %v", err)
		}
		out := grow(dst, plainLen)
		n := len(out)
		res, err := dec.DecodeAll(payload, out[:n:n+plainLen])
		if err != nil || len(res)-n != plainLen {
			return nil, fmt.Errorf("frame: zstd payload does not decode to %d bytes: %w", plainLen, ErrCorrupt)
		}
		return res, nil
	}
	return nil, fmt.Errorf("frame: unknown codec %d: %w", uint8(codec), ErrCorrupt)
}

// VerifyFrame authenticates a frame of plainLen plain bytes for id without
// decompressing it.
func VerifyFrame(k *keys.Keys, id FrameID, frame []byte, plainLen int) error {
	if Pieced(len(frame), plainLen) {
		sp := scratchPool.Get().(*[]byte)
		defer scratchPool.Put(sp)
		_, err := openPieces((*sp)[:0], k, id, plainLen, 0, frame)
		return err
	}
	if len(frame) < FrameOverhead {
		return fmt.Errorf("frame: %d bytes, shorter than the %d-byte overhead: %w", len(frame), FrameOverhead, ErrCorrupt)
	}
	var ab [frameAADLen]byte
	inner, err := k.Data.Open(frameAAD(&ab, k.UUID, id), frame)
	if err != nil {
		return fmt.Errorf("frame (ino %d, extent %d, gen %d): %w: %w", id.Ino, id.Extent, id.Gen, err, ErrCorrupt)
	}
	if len(inner) < 1 || Codec(inner[0]) > CodecZstd {
		return fmt.Errorf("frame: bad codec byte: %w", ErrCorrupt)
	}
	return nil
}
