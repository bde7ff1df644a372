package nbd

import (
	"context"
	"errors"
)

// ErrNoSuchExport is returned (possibly wrapped) by Backend.Open when no
// export has the requested name.
var ErrNoSuchExport = errors.New("nbd: no such export")

// Backend is what the server serves: a set of named exports. The ebbfs
// engine implements it over the regular files of /.nbd/; tests implement it
// in memory. Implementations must be safe for concurrent use.
type Backend interface {
	// List returns every export with its current size.
	List(ctx context.Context) ([]ExportInfo, error)
	// Open opens the named export. It returns an error satisfying
	// errors.Is(err, ErrNoSuchExport) when the export does not exist.
	Open(ctx context.Context, name string) (Export, error)
}

// ExportInfo describes one export in a listing.
type ExportInfo struct {
	Name string
	Size int64
}

// Export is one open export. One Export is opened per client connection
// and used concurrently by up to maxInFlight requests of that connection;
// Close is called once, after the last request has finished.
//
// Errors wrapping syscall.ENOSPC, EDQUOT, EROFS, EPERM, EACCES, ENOMEM,
// EOVERFLOW, EOPNOTSUPP or EINVAL are reported to the client with the
// matching NBD error; every other error is reported as EIO.
type Export interface {
	// Size returns the current size in bytes. The file may be resized
	// through the mount while the export is open. The server calls it once
	// per request and checks the request's range against that value; the
	// other methods need not read it again.
	Size() (int64, error)
	// ReadAt fills p from offset off. The range was within Size; whatever
	// lies past the end of a file that has shrunk since reads as zeroes.
	ReadAt(ctx context.Context, p []byte, off int64) error
	// WriteAt writes p at offset off. The range was within Size; WriteAt
	// must never extend the export, and fails (ENOSPC) if it has shrunk
	// below the end of the range since.
	//
	// WriteAt, Trim, Zero and Flush are called with a context that is
	// never cancelled: once started, they run to their end.
	WriteAt(ctx context.Context, p []byte, off int64) error
	// Trim punches a hole: the range reads as zeroes afterwards and its
	// space is freed.
	Trim(ctx context.Context, off, length int64) error
	// Zero makes the range read as zeroes. If mayTrim is false
	// (NBD_CMD_FLAG_NO_HOLE) the space must stay allocated.
	Zero(ctx context.Context, off, length int64, mayTrim bool) error
	// Flush is the global durability barrier: when it returns nil, every
	// write that completed before it was called, through any export or
	// connection, is durable. CAN_MULTI_CONN is advertised because of it.
	Flush(ctx context.Context) error
	// Extents describes [off, off+length) (within Size) for
	// NBD_CMD_BLOCK_STATUS and structured READs: consecutive extents
	// starting at off, each either data or a hole that reads as zeroes.
	// It may describe less than length (at least one byte) and the server
	// asks again from where it stopped. Reporting everything as data is
	// always correct; a hole must really read as zeroes. It must not read
	// the data to find out.
	Extents(ctx context.Context, off, length int64) ([]Extent, error)
	// BlockSize is the export's preferred I/O size (ebbfs: the file's
	// extent size), advertised in NBD_INFO_BLOCK_SIZE; 0 means 4096.
	BlockSize() int
	// Close releases the export.
	Close() error
}

// Extent is a run of an export reported by Export.Extents.
type Extent struct {
	Length int64
	Hole   bool // reads as zeroes and holds no data
}
