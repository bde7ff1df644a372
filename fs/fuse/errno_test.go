package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	ebbfs "ebbfs.dev/ebbfs/fs"
)

func TestToErrno(t *testing.T) {
	var logs bytes.Buffer
	f := &fsys{log: slog.New(slog.NewTextHandler(&logs, nil))}
	cases := []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
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
		{fmt.Errorf("lookup %q: %w", "x", ebbfs.ErrNotExist), syscall.ENOENT},
		{fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", ebbfs.ErrNotEmpty)), syscall.ENOTEMPTY},
		{context.Canceled, syscall.EINTR},
		{fmt.Errorf("barrier: %w", context.DeadlineExceeded), syscall.EINTR},
		{fmt.Errorf("cache: %w", syscall.ENOSPC), syscall.ENOSPC},
	}
	for _, c := range cases {
		if got := f.toErrno(c.err, "op", 7); got != c.want {
			t.Errorf("toErrno(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if logs.Len() != 0 {
		t.Fatalf("mapped errors were logged: %s", logs.String())
	}

	for _, err := range []error{
		errors.New("segment 42: authentication failed"),
		ebbfs.ErrFenced,
		fmt.Errorf("x: %w", syscall.EBADF),
	} {
		logs.Reset()
		if got := f.toErrno(err, "read", 9); got != syscall.EIO {
			t.Errorf("toErrno(%v) = %v, want EIO", err, got)
		}
		out := logs.String()
		if strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=ERROR") ||
			!strings.Contains(out, err.Error()) || !strings.Contains(out, "op=read") || !strings.Contains(out, "ino=9") {
			t.Errorf("log for %v: %q", err, out)
		}
	}
}

// TestEngineFailureIsEIOAndLogged closes the engine under a live mount: every
// call then fails with an error that is not a sentinel, which must reach the
// caller as EIO and be logged with the operation.
func TestEngineFailureIsEIOAndLogged(t *testing.T) {
	requireFUSE(t)
	e := openEngine(t)
	dir := t.TempDir()
	logs := &syncBuffer{}
	o := DefaultMountOptions()
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	srv, err := Mount(e, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		srv.Wait()
	})
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = os.Lstat(filepath.Join(dir, "anything"))
	wantErrno(t, "lookup on a closed engine", err, syscall.EIO)
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "op=lookup") || !strings.Contains(out, "err=") {
		t.Fatalf("log: %q", out)
	}
}
