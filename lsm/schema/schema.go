// Package schema is the ebbfs metadata key schema and value codecs: the one
// place that knows how inodes, directory entries, extent pointers, segment
// counters, tombstones, orphans and xattrs are laid out in Pebble.
// docs/FORMAT.md describes the same bytes.
package schema

import (
	"encoding/binary"
	"errors"
)

// Key prefixes (one byte each).
const (
	PInode     = 'i' // i | ino                  -> Inode
	PDirent    = 'd' // d | parent | name        -> Dirent
	PExtent    = 'e' // e | ino | index          -> 32-byte segment.Pointer
	PCounter   = 'c' // c | segment id           -> counter (merge operands)
	PTombstone = 't' // t | ino                  -> empty: deleted file awaiting cleanup
	PRangeTomb = 'r' // r | ino | from | to      -> mark: extents of a truncate/punch awaiting cleanup
	POrphan    = 'o' // o | ino                  -> empty: unlinked while open
	PXattr     = 'x' // x | ino | name           -> value
	PSymlink   = 'l' // l | ino                  -> link target
	PFsSystem  = 'n' // n | name                 -> fs engine counters (next inode)
)

var be = binary.BigEndian

// ErrCorrupt means a key or value does not decode.
var ErrCorrupt = errors.New("schema: malformed metadata record")

func k8(p byte, n uint64) []byte {
	b := make([]byte, 9)
	b[0] = p
	be.PutUint64(b[1:], n)
	return b
}

// InodeKey is the key of inode ino.
func InodeKey(ino uint64) []byte { return k8(PInode, ino) }

// SymlinkKey is the key of a symlink's target.
func SymlinkKey(ino uint64) []byte { return k8(PSymlink, ino) }

// TombstoneKey is the key of a deleted file's tombstone.
func TombstoneKey(ino uint64) []byte { return k8(PTombstone, ino) }

// OrphanKey is the key of an unlinked-while-open inode.
func OrphanKey(ino uint64) []byte { return k8(POrphan, ino) }

// CounterKey is the key of a segment's live-byte counter.
func CounterKey(seg uint64) []byte { return k8(PCounter, seg) }

// DirentKey is the key of name in directory parent.
func DirentKey(parent uint64, name string) []byte {
	b := make([]byte, 9+len(name))
	b[0] = PDirent
	be.PutUint64(b[1:], parent)
	copy(b[9:], name)
	return b
}

// DirentPrefix bounds the entries of directory parent: [lower, upper).
func DirentPrefix(parent uint64) (lower, upper []byte) {
	return k8(PDirent, parent), k8(PDirent, parent+1)
}

// XattrKey is the key of xattr name on ino.
func XattrKey(ino uint64, name string) []byte {
	b := make([]byte, 9+len(name))
	b[0] = PXattr
	be.PutUint64(b[1:], ino)
	copy(b[9:], name)
	return b
}

// XattrPrefix bounds the xattrs of ino.
func XattrPrefix(ino uint64) (lower, upper []byte) {
	return k8(PXattr, ino), k8(PXattr, ino+1)
}

// ExtentKey is the key of extent index of ino.
func ExtentKey(ino, index uint64) []byte {
	b := make([]byte, 17)
	b[0] = PExtent
	be.PutUint64(b[1:], ino)
	be.PutUint64(b[9:], index)
	return b
}

// ExtentRange bounds extents [from, to) of ino; to == 0 means to the end.
func ExtentRange(ino, from, to uint64) (lower, upper []byte) {
	if to == 0 {
		return ExtentKey(ino, from), k8(PExtent, ino+1)
	}
	return ExtentKey(ino, from), ExtentKey(ino, to)
}

// ParseExtentKey decodes an extent key.
func ParseExtentKey(k []byte) (ino, index uint64, err error) {
	if len(k) != 17 || k[0] != PExtent {
		return 0, 0, ErrCorrupt
	}
	return be.Uint64(k[1:]), be.Uint64(k[9:]), nil
}

// RangeTombKey is the key of a range tombstone: the pointers of extents
// [from, to) of ino (to == 0: to the end) whose generation is below the
// mark stored as the value are dropped, and the cleaner removes them.
func RangeTombKey(ino, from, to uint64) []byte {
	b := make([]byte, 25)
	b[0] = PRangeTomb
	be.PutUint64(b[1:], ino)
	be.PutUint64(b[9:], from)
	be.PutUint64(b[17:], to)
	return b
}

// ParseRangeTombKey decodes a range tombstone key.
func ParseRangeTombKey(k []byte) (ino, from, to uint64, err error) {
	if len(k) != 25 || k[0] != PRangeTomb {
		return 0, 0, 0, ErrCorrupt
	}
	return be.Uint64(k[1:]), be.Uint64(k[9:]), be.Uint64(k[17:]), nil
}

// ParseDirentKey decodes a dirent key.
func ParseDirentKey(k []byte) (parent uint64, name string, err error) {
	if len(k) < 10 || k[0] != PDirent {
		return 0, "", ErrCorrupt
	}
	return be.Uint64(k[1:]), string(k[9:]), nil
}

// KeyInode returns the inode a key belongs to: an inode's record, its
// directory entries (a directory's), extent pointers, range tombstones,
// tombstone, orphan mark, xattrs and symlink target all start with the
// prefix and the inode number. Segment counters and system keys belong
// to none.
func KeyInode(k []byte) (uint64, bool) {
	if len(k) < 9 {
		return 0, false
	}
	switch k[0] {
	case PInode, PDirent, PExtent, PTombstone, PRangeTomb, POrphan, PXattr, PSymlink:
		return be.Uint64(k[1:9]), true
	}
	return 0, false
}

// ParseU64Key decodes a prefix|u64 key (inode, tombstone, orphan, counter).
func ParseU64Key(k []byte, prefix byte) (uint64, error) {
	if len(k) != 9 || k[0] != prefix {
		return 0, ErrCorrupt
	}
	return be.Uint64(k[1:]), nil
}

// PrefixRange bounds every key with a one-byte prefix.
func PrefixRange(prefix byte) (lower, upper []byte) {
	return []byte{prefix}, []byte{prefix + 1}
}

// NextInoKey holds the next inode number to allocate.
var NextInoKey = []byte{PFsSystem, 'i', 'n', 'o'}

// Inode is the stored form of an inode's attributes.
type Inode struct {
	Mode   uint32
	Uid    uint32
	Gid    uint32
	Nlink  uint32
	Rdev   uint32
	Size   uint64
	Blocks uint64
	Atime  int64
	Mtime  int64
	Ctime  int64
	Gen    uint64
	Parent uint64 // directories: the containing directory
	// Reserved lists the extent ranges [From, To) that fallocate reserved
	// while they held no data and that have not been written since. Sorted,
	// disjoint, not adjacent, at most MaxReservedRanges. Empty for nearly
	// every inode: such records keep the version 1 encoding.
	Reserved []ExtentSpan
	// ExtentShift is log2 of the file's extent size, MinExtentShift to
	// MaxExtentShift; 0 reads as MaxExtentShift (32 KiB). A directory's
	// is what files and directories created in it start with. Records of
	// the default size keep the version 1 or 2 encoding.
	ExtentShift uint8
}

// The extent sizes a file may have: 4 KiB to 32 KiB.
const (
	MinExtentShift = 12
	MaxExtentShift = 15
)

// Shift is the inode's extent shift with the default filled in.
func (n *Inode) Shift() uint8 {
	if n.ExtentShift == 0 {
		return MaxExtentShift
	}
	return n.ExtentShift
}

// ExtentSpan is the extent indexes [From, To).
type ExtentSpan struct{ From, To uint64 }

// MaxReservedRanges bounds Inode.Reserved.
const MaxReservedRanges = 64

const (
	inodeVersion  = 1 // fixed fields only
	inodeVersion2 = 2 // fixed fields, then u16 count and count (from u64, to u64) ranges
	inodeVersion3 = 3 // fixed fields, then u8 extent shift, then u16 count (may be 0) and ranges
)
const inodeLen = 1 + 5*4 + 7*8

// Marshal encodes the inode.
func (n *Inode) Marshal() []byte {
	b := make([]byte, inodeLen, inodeLen+3+16*len(n.Reserved))
	b[0] = inodeVersion
	be.PutUint32(b[1:], n.Mode)
	be.PutUint32(b[5:], n.Uid)
	be.PutUint32(b[9:], n.Gid)
	be.PutUint32(b[13:], n.Nlink)
	be.PutUint32(b[17:], n.Rdev)
	be.PutUint64(b[21:], n.Size)
	be.PutUint64(b[29:], n.Blocks)
	be.PutUint64(b[37:], uint64(n.Atime))
	be.PutUint64(b[45:], uint64(n.Mtime))
	be.PutUint64(b[53:], uint64(n.Ctime))
	be.PutUint64(b[61:], n.Gen)
	be.PutUint64(b[69:], n.Parent)
	if sh := n.Shift(); sh != MaxExtentShift {
		b[0] = inodeVersion3
		b = append(b, sh)
		b = be.AppendUint16(b, uint16(len(n.Reserved)))
	} else if len(n.Reserved) > 0 {
		b[0] = inodeVersion2
		b = be.AppendUint16(b, uint16(len(n.Reserved)))
	}
	for _, r := range n.Reserved {
		b = be.AppendUint64(b, r.From)
		b = be.AppendUint64(b, r.To)
	}
	return b
}

// UnmarshalInode decodes an inode (version 1, 2 or 3).
func UnmarshalInode(b []byte) (Inode, error) {
	if len(b) < inodeLen {
		return Inode{}, ErrCorrupt
	}
	var res []ExtentSpan
	var shift uint8
	ranges := inodeLen // where the count of reserved ranges is
	switch b[0] {
	case inodeVersion:
		if len(b) != inodeLen {
			return Inode{}, ErrCorrupt
		}
	case inodeVersion3:
		if len(b) < inodeLen+3 {
			return Inode{}, ErrCorrupt
		}
		shift = b[inodeLen]
		if shift < MinExtentShift || shift >= MaxExtentShift {
			return Inode{}, ErrCorrupt
		}
		ranges++
		fallthrough
	case inodeVersion2:
		if len(b) < ranges+2 {
			return Inode{}, ErrCorrupt
		}
		count := int(be.Uint16(b[ranges:]))
		if (count == 0 && b[0] == inodeVersion2) || count > MaxReservedRanges || len(b) != ranges+2+16*count {
			return Inode{}, ErrCorrupt
		}
		if count > 0 {
			res = make([]ExtentSpan, count)
		}
		for i := range res {
			o := ranges + 2 + 16*i
			res[i] = ExtentSpan{From: be.Uint64(b[o:]), To: be.Uint64(b[o+8:])}
			if res[i].From >= res[i].To || (i > 0 && res[i].From <= res[i-1].To) {
				return Inode{}, ErrCorrupt
			}
		}
	default:
		return Inode{}, ErrCorrupt
	}
	return Inode{
		Mode:   be.Uint32(b[1:]),
		Uid:    be.Uint32(b[5:]),
		Gid:    be.Uint32(b[9:]),
		Nlink:  be.Uint32(b[13:]),
		Rdev:   be.Uint32(b[17:]),
		Size:   be.Uint64(b[21:]),
		Blocks: be.Uint64(b[29:]),
		Atime:  int64(be.Uint64(b[37:])),
		Mtime:  int64(be.Uint64(b[45:])),
		Ctime:  int64(be.Uint64(b[53:])),
		Gen:    be.Uint64(b[61:]),
		Parent: be.Uint64(b[69:]),

		Reserved:    res,
		ExtentShift: shift,
	}, nil
}

// Dirent is the stored form of a directory entry: child inode and type bits.
type Dirent struct {
	Ino  uint64
	Type uint32
}

// Marshal encodes the dirent.
func (d Dirent) Marshal() []byte {
	b := make([]byte, 12)
	be.PutUint64(b, d.Ino)
	be.PutUint32(b[8:], d.Type)
	return b
}

// UnmarshalDirent decodes a dirent.
func UnmarshalDirent(b []byte) (Dirent, error) {
	if len(b) != 12 {
		return Dirent{}, ErrCorrupt
	}
	return Dirent{Ino: be.Uint64(b), Type: be.Uint32(b[8:])}, nil
}

// U64 encodes a big-endian counter value.
func U64(n uint64) []byte {
	b := make([]byte, 8)
	be.PutUint64(b, n)
	return b
}

// ParseU64 decodes a big-endian counter value.
func ParseU64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, ErrCorrupt
	}
	return be.Uint64(b), nil
}
