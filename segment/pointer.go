// Package segment owns ebbfs data on the object store: the frame codec
// (compress, then seal one extent), the segment object format (frames, a
// sealed directory, a fixed 64-byte footer), the in-memory builder that
// collects frames for one segment, and upload. Reading frames back, with
// the memory and disk caches, is package segread.
//
// The byte-level formats are described in docs/FORMAT.md (segment section).
package segment

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// ExtentSize is the default and largest size of a file extent: extent i of
// a file covers bytes [i*ExtentSize, (i+1)*ExtentSize). A file may have
// smaller extents (4, 8 or 16 KiB; the inode records it), so a frame
// holds at most this much.
const ExtentSize = 32 << 10

// MaxPlainLen is the largest plaintext a frame may hold. Frames hold one
// extent, so this is ExtentSize; decoding rejects anything larger before
// allocating.
const MaxPlainLen = ExtentSize

// PointerSize is the encoded size of a Pointer.
const PointerSize = 32

// Pointer is an extent pointer: where the frame holding an extent lives.
//
// Encoded in exactly 32 bytes, little endian:
//
//	Segment u64 | Offset u32 | Length u32 | PlainLen u32 | Gen u64 | Flags u32
type Pointer struct {
	Segment  uint64 // segment id
	Offset   uint32 // frame offset inside the segment object
	Length   uint32 // frame length (encoded bytes, nonce and tag included)
	PlainLen uint32 // plaintext length of the extent
	Gen      uint64 // write generation, bound into the frame's AAD
	Flags    uint32 // reserved for the fs engine; carried verbatim
}

// Marshal returns the 32-byte encoding of p.
func (p Pointer) Marshal() []byte {
	return p.AppendTo(make([]byte, 0, PointerSize))
}

// AppendTo appends the 32-byte encoding of p to dst.
func (p Pointer) AppendTo(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, p.Segment)
	dst = binary.LittleEndian.AppendUint32(dst, p.Offset)
	dst = binary.LittleEndian.AppendUint32(dst, p.Length)
	dst = binary.LittleEndian.AppendUint32(dst, p.PlainLen)
	dst = binary.LittleEndian.AppendUint64(dst, p.Gen)
	dst = binary.LittleEndian.AppendUint32(dst, p.Flags)
	return dst
}

// End is the offset just past the frame.
func (p Pointer) End() uint64 { return uint64(p.Offset) + uint64(p.Length) }

// Validate reports whether p can name a frame: its length holds at least
// the frame overhead, it ends inside a 4 GiB object, and its plaintext
// length is at most MaxPlainLen.
func (p Pointer) Validate() error {
	switch {
	case p.Length < FrameOverhead:
		return fmt.Errorf("pointer: frame length %d below the minimum %d", p.Length, FrameOverhead)
	case p.End() > math.MaxUint32:
		return fmt.Errorf("pointer: frame [%d,+%d) ends past 4 GiB", p.Offset, p.Length)
	case p.PlainLen > MaxPlainLen:
		return fmt.Errorf("pointer: plain length %d above the maximum %d", p.PlainLen, MaxPlainLen)
	case uint64(p.Length) > uint64(p.PlainLen)+FrameOverhead && !p.IsPieced():
		return fmt.Errorf("pointer: frame length %d larger than plain length %d allows", p.Length, p.PlainLen)
	}
	return nil
}

// UnmarshalPointer decodes a 32-byte pointer and validates it.
func UnmarshalPointer(b []byte) (Pointer, error) {
	if len(b) != PointerSize {
		return Pointer{}, fmt.Errorf("pointer: %d bytes, want %d: %w", len(b), PointerSize, ErrCorrupt)
	}
	p := rawPointer(b)
	if err := p.Validate(); err != nil {
		return Pointer{}, fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	return p, nil
}

// Move relocates one extent's frame (repack): from Old to New. fs applies
// it, reclaim produces it.
type Move struct {
	Ino, Extent uint64
	Old, New    Pointer
}

// FrameID names what a frame holds; it is bound into the frame's AAD.
type FrameID struct {
	Ino, Extent, Gen uint64
}

// KeyPrefix is the object-key prefix of every segment.
const KeyPrefix = "segments/"

// Key returns the object key of a segment:
// "segments/<low byte of id as 2 hex digits>/<id as 16 hex digits>".
func Key(segID uint64) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(KeyPrefix)+3+16)
	b = append(b, KeyPrefix...)
	b = append(b, hex[(segID>>4)&0xf], hex[segID&0xf], '/')
	for s := 60; s >= 0; s -= 4 {
		b = append(b, hex[(segID>>uint(s))&0xf])
	}
	return string(b)
}

// ShardPrefix returns the listing prefix of one shard: "segments/<xx>/".
func ShardPrefix(shard uint8) string {
	return fmt.Sprintf("%s%02x/", KeyPrefix, shard)
}

// ParseKey is the inverse of Key. It accepts only the exact form Key
// produces (lower-case hex, matching shard), so sweeps never act on a key
// they do not recognise.
func ParseKey(key string) (uint64, bool) {
	const n = len(KeyPrefix) + 3 + 16
	if len(key) != n || key[:len(KeyPrefix)] != KeyPrefix || key[len(KeyPrefix)+2] != '/' {
		return 0, false
	}
	rest := key[len(KeyPrefix):]
	if !lowerHex(rest[:2]) || !lowerHex(rest[3:]) {
		return 0, false
	}
	id, err := strconv.ParseUint(rest[3:], 16, 64)
	if err != nil {
		return 0, false
	}
	shard, err := strconv.ParseUint(rest[:2], 16, 8)
	if err != nil || shard != id&0xff {
		return 0, false
	}
	return id, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
