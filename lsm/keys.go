package lsm

import "encoding/binary"

// Key prefixes. Every key in the metadata store starts with one of these
// bytes; the rest of the key is the owner's business (docs/FORMAT.md).
const (
	PrefixInode     byte = 'i' // inode attributes
	PrefixDirent    byte = 'd' // directory entries
	PrefixExtent    byte = 'e' // extent pointers
	PrefixCounter   byte = 'c' // per-segment counters (merge operator)
	PrefixTombstone byte = 't' // deleted files awaiting extent cleanup
	PrefixOrphan    byte = 'o' // unlinked-while-open inodes
	PrefixXattr     byte = 'x' // extended attributes
	PrefixSystem    byte = 's' // system keys
)

// SystemKey returns the system key for name: 's' followed by name. System
// key names starting with "lsm." are reserved for this package.
func SystemKey(name string) []byte {
	k := make([]byte, 0, 1+len(name))
	k = append(k, PrefixSystem)
	return append(k, name...)
}

// KeyAppliedSeq holds the highest journal sequence whose batches this
// database contains (8-byte big-endian). It is written only by lsm, locally:
// after a journal object is durable and after each replayed journal object.
var KeyAppliedSeq = SystemKey("lsm.applied-seq")

func encodeU64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}
