package nbd

import (
	"context"
	"errors"
	"syscall"
)

// errnoOf maps a backend error to the NBD error sent to the client. This is
// the package's one errno boundary; callers log the original error.
func errnoOf(err error) uint32 {
	switch {
	case err == nil:
		return errnoOK
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errnoNoSpc
	case errors.Is(err, syscall.EROFS), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return errnoPerm
	case errors.Is(err, syscall.ENOMEM):
		return errnoNoMem
	case errors.Is(err, syscall.EOVERFLOW):
		return errnoOverflow
	case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOTSUP):
		return errnoNotSup
	case errors.Is(err, syscall.EINVAL):
		return errnoInval
	case errors.Is(err, syscall.ESHUTDOWN), errors.Is(err, context.Canceled):
		return errnoShutdown
	default:
		return errnoIO
	}
}

func errnoName(e uint32) string {
	switch e {
	case errnoOK:
		return "OK"
	case errnoPerm:
		return "EPERM"
	case errnoIO:
		return "EIO"
	case errnoNoMem:
		return "ENOMEM"
	case errnoInval:
		return "EINVAL"
	case errnoNoSpc:
		return "ENOSPC"
	case errnoOverflow:
		return "EOVERFLOW"
	case errnoNotSup:
		return "ENOTSUP"
	case errnoShutdown:
		return "ESHUTDOWN"
	}
	return "E?"
}
