package fuse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
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
		{ebbfs.ErrPermission, syscall.EPERM},
		{ebbfs.ErrNoSpace, syscall.ENOSPC},
		{fmt.Errorf("fallocate: %w", ebbfs.ErrPermission), syscall.EPERM},
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
	logs := &testutil.SyncBuffer{}
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

// engineSentinels parses package fs and returns the message of every
// exported package-level Err variable made with errors.New, by name.
func engineSentinels(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	ents, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, de := range ents {
		name := de.Name()
		if de.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join("..", name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	out := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Err") || i >= len(vs.Values) {
						continue
					}
					call, ok := vs.Values[i].(*ast.CallExpr)
					if !ok || len(call.Args) != 1 {
						continue
					}
					sel, ok := call.Fun.(*ast.SelectorExpr)
					lit, isLit := call.Args[0].(*ast.BasicLit)
					if !ok || sel.Sel.Name != "New" || !isLit {
						continue
					}
					msg, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[name.Name] = msg
				}
			}
		}
	}
	return out
}

// TestEverySentinelHasAnErrno: each exported sentinel error of package fs
// is either mapped in errnoTable or listed as EIO on purpose. A sentinel
// added to the engine without either fails here (it would reach callers as
// EIO, as ErrPermission once did).
func TestEverySentinelHasAnErrno(t *testing.T) {
	sentinels := engineSentinels(t)
	if len(sentinels) < 10 || sentinels["ErrPermission"] == "" {
		t.Fatalf("found only %d sentinels in package fs: %v", len(sentinels), sentinels)
	}
	covered := map[string]bool{}
	for _, m := range errnoTable {
		covered[m.err.Error()] = true
		if errno, ok := mapErr(m.err); !ok || errno != m.errno {
			t.Errorf("mapErr(%v) = %v, %v; want %v", m.err, errno, ok, m.errno)
		}
	}
	for _, err := range eioSentinels {
		if covered[err.Error()] {
			t.Errorf("%v is both mapped and listed as EIO", err)
		}
		covered[err.Error()] = true
		if _, ok := mapErr(err); ok {
			t.Errorf("%v is listed as EIO but maps to an errno", err)
		}
	}
	for name, msg := range sentinels {
		if !covered[msg] {
			t.Errorf("fs.%s (%q) has no errno mapping: add it to errnoTable, or to eioSentinels if EIO is meant", name, msg)
		}
	}
}

// TestStoreTimeoutIsEIO: a store request that ran out of time (net/http's
// header timeout, which matches context.DeadlineExceeded) and that the
// store reports as unavailable is an I/O error, not an interrupted call;
// the caller's own deadline or cancellation still gives EINTR.
func TestStoreTimeoutIsEIO(t *testing.T) {
	if !ebbfs.IsStoreUnavailable(objstore.ErrUnavailable) {
		t.Fatal("the store's ErrUnavailable is not recognised")
	}
	timeout := fmt.Errorf("get segments/01/x: %w: %w", objstore.ErrUnavailable,
		&url.Error{Op: "Get", URL: "http://s3/x", Err: context.DeadlineExceeded})
	if errno, ok := mapErr(timeout); ok {
		t.Errorf("mapErr(store timeout) = %v; want EIO (not mapped)", errno)
	}
	for _, err := range []error{context.Canceled, fmt.Errorf("read: %w", context.DeadlineExceeded)} {
		if errno, ok := mapErr(err); !ok || errno != syscall.EINTR {
			t.Errorf("mapErr(%v) = %v, %v; want EINTR", err, errno, ok)
		}
	}
}
