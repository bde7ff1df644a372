package segment

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"ebbfs.dev/ebbfs/internal/keys"
)

// FooterSize is the fixed size of the plaintext footer at the end of every
// segment object.
const FooterSize = 64

// FormatVersion is the segment format this build writes and reads.
const FormatVersion = 1

const footerMagic = "EBBFSSEG"

// DirEntrySize is the encoded size of one directory entry.
const DirEntrySize = 36

// MaxFrameBytes bounds the frame area of a segment: pointer offsets and
// lengths are u32.
const MaxFrameBytes = math.MaxUint32

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Footer is the fixed 64-byte plaintext trailer of a segment object.
//
//	0  magic "EBBFSSEG"     8
//	8  version u32          4
//	12 reserved u32 (0)     4
//	16 segment id u64       8
//	24 dir offset u64       8  (== frame bytes: the directory follows the frames)
//	32 dir length u32       4  (sealed directory, nonce and tag included)
//	36 frame count u32      4
//	40 frame bytes u64      8
//	48 reserved (0)         12
//	60 CRC32C of [0,60) u32 4
type Footer struct {
	Version    uint32
	SegID      uint64
	DirOffset  uint64
	DirLen     uint32
	FrameCount uint32
	FrameBytes uint64
}

// ObjectSize is the size of the segment object the footer describes.
func (f Footer) ObjectSize() int64 {
	return int64(f.DirOffset) + int64(f.DirLen) + FooterSize
}

// Marshal returns the 64-byte encoding of f with its checksum.
func (f Footer) Marshal() []byte {
	b := make([]byte, 0, FooterSize)
	b = append(b, footerMagic...)
	b = binary.LittleEndian.AppendUint32(b, f.Version)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, f.SegID)
	b = binary.LittleEndian.AppendUint64(b, f.DirOffset)
	b = binary.LittleEndian.AppendUint32(b, f.DirLen)
	b = binary.LittleEndian.AppendUint32(b, f.FrameCount)
	b = binary.LittleEndian.AppendUint64(b, f.FrameBytes)
	b = append(b, make([]byte, 12)...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// ParseFooter decodes and validates a footer: length, magic, version,
// checksum, reserved bytes, and the consistency of the sizes (the directory
// follows the frames and holds exactly FrameCount entries; every frame
// holds at least the frame overhead). Every failure wraps ErrCorrupt.
func ParseFooter(b []byte) (Footer, error) {
	bad := func(format string, a ...any) (Footer, error) {
		return Footer{}, fmt.Errorf("segment footer: "+format+": %w", append(a, ErrCorrupt)...)
	}
	if len(b) != FooterSize {
		return bad("%d bytes, want %d", len(b), FooterSize)
	}
	if string(b[:8]) != footerMagic {
		return bad("bad magic %q", b[:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[60:]), crc32.Checksum(b[:60], crcTable); got != want {
		return bad("checksum %08x, want %08x", got, want)
	}
	f := Footer{
		Version:    binary.LittleEndian.Uint32(b[8:]),
		SegID:      binary.LittleEndian.Uint64(b[16:]),
		DirOffset:  binary.LittleEndian.Uint64(b[24:]),
		DirLen:     binary.LittleEndian.Uint32(b[32:]),
		FrameCount: binary.LittleEndian.Uint32(b[36:]),
		FrameBytes: binary.LittleEndian.Uint64(b[40:]),
	}
	if f.Version != FormatVersion {
		return bad("version %d; this build reads version %d", f.Version, FormatVersion)
	}
	if binary.LittleEndian.Uint32(b[12:]) != 0 || !bytes.Equal(b[48:60], make([]byte, 12)) {
		return bad("reserved bytes are not zero")
	}
	if f.FrameBytes > MaxFrameBytes {
		return bad("frame bytes %d exceed %d", f.FrameBytes, uint64(MaxFrameBytes))
	}
	if f.DirOffset != f.FrameBytes {
		return bad("directory offset %d != frame bytes %d", f.DirOffset, f.FrameBytes)
	}
	if want := uint64(f.FrameCount)*DirEntrySize + keys.Overhead; uint64(f.DirLen) != want {
		return bad("directory length %d, want %d for %d frames", f.DirLen, want, f.FrameCount)
	}
	if uint64(f.FrameCount)*FrameOverhead > f.FrameBytes {
		return bad("%d frames cannot fit in %d bytes", f.FrameCount, f.FrameBytes)
	}
	return f, nil
}

// DirEntry is one directory entry: where a frame is and what it holds.
//
//	Offset u32 | Length u32 | PlainLen u32 | Ino u64 | Extent u64 | Gen u64
type DirEntry struct {
	Offset, Length, PlainLen uint32
	Ino, Extent, Gen         uint64
}

// ID is the FrameID the entry's frame is sealed for.
func (e DirEntry) ID() FrameID { return FrameID{Ino: e.Ino, Extent: e.Extent, Gen: e.Gen} }

// Pointer is the extent pointer to the entry's frame in segment segID.
func (e DirEntry) Pointer(segID uint64) Pointer {
	return Pointer{Segment: segID, Offset: e.Offset, Length: e.Length, PlainLen: e.PlainLen, Gen: e.Gen}
}

func (e DirEntry) appendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, e.Offset)
	b = binary.LittleEndian.AppendUint32(b, e.Length)
	b = binary.LittleEndian.AppendUint32(b, e.PlainLen)
	b = binary.LittleEndian.AppendUint64(b, e.Ino)
	b = binary.LittleEndian.AppendUint64(b, e.Extent)
	b = binary.LittleEndian.AppendUint64(b, e.Gen)
	return b
}

const dirAADMagic = "ebbfs-dir-v1"

// dirAAD binds the directory to the filesystem, the segment id and the
// footer's geometry.
func dirAAD(uuid [16]byte, f Footer) []byte {
	b := make([]byte, 0, len(dirAADMagic)+16+8+4+8)
	b = append(b, dirAADMagic...)
	b = append(b, uuid[:]...)
	b = binary.LittleEndian.AppendUint64(b, f.SegID)
	b = binary.LittleEndian.AppendUint32(b, f.FrameCount)
	b = binary.LittleEndian.AppendUint64(b, f.FrameBytes)
	return b
}

func sealDirectory(k *keys.Keys, f Footer, entries []DirEntry) []byte {
	plain := make([]byte, 0, len(entries)*DirEntrySize)
	for _, e := range entries {
		plain = e.appendTo(plain)
	}
	return k.Data.Seal(dirAAD(k.UUID, f), plain)
}

// ParseDirectory authenticates the sealed directory of the segment whose
// footer is f (the AAD binds fs uuid, segment id, frame count and frame
// bytes) and validates it: exactly FrameCount entries, frames contiguous
// from offset 0 up to FrameBytes, each frame at least FrameOverhead long
// and consistent with its plain length. Every failure wraps ErrCorrupt and
// names the object key.
func ParseDirectory(k *keys.Keys, f Footer, sealed []byte) ([]DirEntry, error) {
	key := Key(f.SegID)
	bad := func(format string, a ...any) ([]DirEntry, error) {
		return nil, &CorruptError{Key: key, Offset: int64(f.DirOffset), Reason: fmt.Sprintf("directory: "+format, a...)}
	}
	if uint64(len(sealed)) != uint64(f.DirLen) {
		return bad("%d bytes, footer says %d", len(sealed), f.DirLen)
	}
	plain, err := k.Data.Open(dirAAD(k.UUID, f), sealed)
	if err != nil {
		return bad("%v", err)
	}
	if uint64(len(plain)) != uint64(f.FrameCount)*DirEntrySize {
		return bad("%d bytes for %d entries", len(plain), f.FrameCount)
	}
	out := make([]DirEntry, f.FrameCount)
	var next uint64
	for i := range out {
		b := plain[i*DirEntrySize:]
		e := DirEntry{
			Offset:   binary.LittleEndian.Uint32(b[0:]),
			Length:   binary.LittleEndian.Uint32(b[4:]),
			PlainLen: binary.LittleEndian.Uint32(b[8:]),
			Ino:      binary.LittleEndian.Uint64(b[12:]),
			Extent:   binary.LittleEndian.Uint64(b[20:]),
			Gen:      binary.LittleEndian.Uint64(b[28:]),
		}
		if uint64(e.Offset) != next {
			return bad("entry %d at offset %d, want %d", i, e.Offset, next)
		}
		if err := e.Pointer(f.SegID).Validate(); err != nil {
			return bad("entry %d: %v", i, err)
		}
		next += uint64(e.Length)
		if next > f.FrameBytes {
			return bad("entry %d ends at %d past the frame area of %d bytes", i, next, f.FrameBytes)
		}
		out[i] = e
	}
	if next != f.FrameBytes {
		return bad("frames end at %d, footer says %d", next, f.FrameBytes)
	}
	return out, nil
}

// CorruptError reports corrupt bytes in one segment object. It wraps
// ErrCorrupt (and the underlying cause, if any).
type CorruptError struct {
	Key    string // object key
	Offset int64  // where in the object, -1 if unknown
	Reason string
	Err    error // underlying cause, may be nil
}

func (e *CorruptError) Error() string {
	s := fmt.Sprintf("segment object %s is corrupt", e.Key)
	if e.Offset >= 0 {
		s += fmt.Sprintf(" at offset %d", e.Offset)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}
