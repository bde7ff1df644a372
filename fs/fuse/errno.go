package fuse

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	ebbfs "ebbfs.dev/ebbfs/fs"
)

// errnoTable maps the engine's sentinel errors to errno values. Order does
// not matter: every engine error wraps at most one sentinel.
var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{ebbfs.ErrNotExist, syscall.ENOENT},
	{ebbfs.ErrExist, syscall.EEXIST},
	{ebbfs.ErrNotDir, syscall.ENOTDIR},
	{ebbfs.ErrIsDir, syscall.EISDIR},
	{ebbfs.ErrNotEmpty, syscall.ENOTEMPTY},
	{ebbfs.ErrInvalid, syscall.EINVAL},
	{ebbfs.ErrNameTooLong, syscall.ENAMETOOLONG},
	{ebbfs.ErrReadOnly, syscall.EROFS},
	{ebbfs.ErrNoXattr, syscall.ENODATA},
	{ebbfs.ErrXattrRange, syscall.ERANGE},
	{ebbfs.ErrFileTooBig, syscall.EFBIG},
	{ebbfs.ErrNotSupported, syscall.EOPNOTSUPP},
	{ebbfs.ErrTooManyLinks, syscall.EMLINK},
	{ebbfs.ErrNoData, syscall.ENXIO},
	{ebbfs.ErrPermission, syscall.EPERM},
	{ebbfs.ErrNoSpace, syscall.ENOSPC},
	{ebbfs.ErrBusy, syscall.EBUSY},
	{ebbfs.ErrStale, syscall.ESTALE},
}

// eioSentinels are the engine's sentinel errors that are EIO on purpose:
// the filesystem can no longer serve (a newer writer took over, or it is
// shutting down), which is an I/O error to the caller and worth the log
// line toErrno writes. Every other sentinel has a row in errnoTable; a test
// holds the two lists to the engine's exported Err variables.
// ErrRestoreGone is a restore's refusal (checkpoint restore, over the
// admin endpoint); no FUSE operation returns it.
var eioSentinels = []error{ebbfs.ErrFenced, ebbfs.ErrClosed, ebbfs.ErrRestoreGone}

// toErrno converts an engine error into the errno returned to the kernel.
// This is the only place where errors become errno values. Errors that are
// not one of the engine's sentinels become EIO and are logged once, here,
// with the operation and inode they happened on.
func (f *fsys) toErrno(err error, op string, ino uint64) syscall.Errno {
	if err == nil {
		return 0
	}
	if errno, ok := mapErr(err); ok {
		return errno
	}
	f.log.Error("fuse: operation failed", slog.String("op", op), slog.Uint64("ino", ino), slog.Any("err", err))
	return syscall.EIO
}

// mapErr returns the errno for a known error, or false for one that must be
// reported as EIO.
func mapErr(err error) (syscall.Errno, bool) {
	for _, m := range errnoTable {
		if errors.Is(err, m.err) {
			return m.errno, true
		}
	}
	// A store timeout also matches context.DeadlineExceeded: it is an
	// I/O error, not the request being interrupted.
	if !ebbfs.IsStoreUnavailable(err) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return syscall.EINTR, true
	}
	// Running out of local space (cache directory) is worth telling the
	// caller precisely; other local errnos are reported as EIO and logged.
	var errno syscall.Errno
	if errors.As(err, &errno) && (errno == syscall.ENOSPC || errno == syscall.EDQUOT) {
		return errno, true
	}
	return 0, false
}
