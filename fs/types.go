// Package fs is the ebbfs filesystem engine: namespace, inodes, file I/O,
// deletion paths and the durability barrier. The FUSE binding (fs/fuse) and
// the NBD server both call it; neither sees Pebble or segments.
package fs

import (
	"errors"
	"time"

	"ebbfs.dev/ebbfs/objstore"
)

// RootIno is the inode number of the root directory.
const RootIno uint64 = 1

// MaxNameLen is the longest name a directory entry may have.
const MaxNameLen = 255

// MaxFileSize is the largest file size ebbfs accepts (2^62 bytes).
const MaxFileSize = 1 << 62

// Mode type bits (same values as Linux S_IF*).
const (
	ModeType    = 0o170000
	ModeRegular = 0o100000
	ModeDir     = 0o040000
	ModeSymlink = 0o120000
	ModeFIFO    = 0o010000
	ModeSocket  = 0o140000
	ModeChar    = 0o020000
	ModeBlock   = 0o060000
	ModeSetuid  = 0o4000
	ModeSetgid  = 0o2000
	ModeSticky  = 0o1000
)

// Attr is an inode's attributes. Times are nanoseconds since the Unix epoch.
type Attr struct {
	Ino    uint64
	Mode   uint32 // type bits | permission bits
	Uid    uint32
	Gid    uint32
	Nlink  uint32
	Rdev   uint32
	Size   uint64
	Blocks uint64 // 512-byte blocks held by extents
	Atime  int64
	Mtime  int64
	Ctime  int64
	Gen    uint64 // inode generation
}

// IsDir reports whether the inode is a directory.
func (a Attr) IsDir() bool { return a.Mode&ModeType == ModeDir }

// IsRegular reports whether the inode is a regular file.
func (a Attr) IsRegular() bool { return a.Mode&ModeType == ModeRegular }

// Time converts an Attr timestamp.
func Time(ns int64) time.Time { return time.Unix(0, ns) }

// SetAttr fields are applied when their bit is set in Valid.
type SetAttr struct {
	Valid uint32
	Mode  uint32 // permission bits (and setuid/setgid/sticky); type bits ignored
	Uid   uint32
	Gid   uint32
	Size  uint64
	Atime int64
	Mtime int64
}

// SetAttr.Valid bits.
const (
	SetMode uint32 = 1 << iota
	SetUid
	SetGid
	SetSize
	SetAtime
	SetMtime
	SetAtimeNow
	SetMtimeNow
	SetCtime // touch ctime only
)

// Rename flags (Linux values).
const (
	RenameNoReplace uint32 = 1
	RenameExchange  uint32 = 2
)

// Xattr flags (Linux values).
const (
	XattrCreate  uint32 = 1
	XattrReplace uint32 = 2
)

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32 // type bits only
}

// StatFS describes the filesystem for statfs(2).
type StatFS struct {
	BlockSize  uint32
	Blocks     uint64
	BlocksFree uint64
	Files      uint64
	FilesFree  uint64
	NameLen    uint32
}

// Errors returned by the engine. fs/fuse maps them to errno; anything else
// becomes EIO.
var (
	ErrNotExist     = errors.New("no such file or directory")
	ErrExist        = errors.New("file exists")
	ErrNotDir       = errors.New("not a directory")
	ErrIsDir        = errors.New("is a directory")
	ErrNotEmpty     = errors.New("directory not empty")
	ErrInvalid      = errors.New("invalid argument")
	ErrNameTooLong  = errors.New("file name too long")
	ErrReadOnly     = errors.New("read-only filesystem")
	ErrNoXattr      = errors.New("no such attribute")
	ErrXattrRange   = errors.New("attribute value too large")
	ErrFileTooBig   = errors.New("file too large")
	ErrNotSupported = errors.New("operation not supported")
	ErrTooManyLinks = errors.New("too many links")
	ErrNoData       = errors.New("no data past offset")
	ErrPermission   = errors.New("operation not permitted")
	ErrNoSpace      = errors.New("no space left on device") // [filesystem] max_size reached
	ErrStale        = errors.New("stale file handle")       // an open file deleted by the writer (on a replica) or by a restore
	ErrFenced       = errors.New("this writer was fenced by a newer writer")
	ErrClosed       = errors.New("filesystem is closed")
)

// IsStoreUnavailable reports whether err is the object store being
// unreachable, stalled or failing for now (objstore.ErrUnavailable),
// including a request that ran out of time, which also matches
// context.DeadlineExceeded: an I/O error, not the call being interrupted.
func IsStoreUnavailable(err error) bool { return objstore.IsUnavailable(err) }
