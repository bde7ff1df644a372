package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/nbd"
)

// NBDDir is the directory whose regular files are the NBD exports.
const NBDDir = ".nbd"

// zeroChunk bounds one write of zeroes for WRITE_ZEROES with NO_HOLE.
const zeroChunk = 1 << 20

// engineFS is the part of *fs.Engine the NBD adapter uses.
type engineFS interface {
	Lookup(ctx context.Context, parent uint64, name string) (fs.Attr, error)
	ReadDir(ctx context.Context, ino uint64) ([]fs.DirEntry, error)
	GetAttr(ctx context.Context, ino uint64) (fs.Attr, error)
	Open(ctx context.Context, ino uint64) error
	Release(ctx context.Context, ino uint64) error
	Read(ctx context.Context, ino uint64, p []byte, off int64) (int, error)
	Write(ctx context.Context, ino uint64, p []byte, off int64) (int, error)
	Punch(ctx context.Context, ino uint64, off, length int64) error
	Barrier(ctx context.Context) error
}

var _ engineFS = (*fs.Engine)(nil)

// nbdBackend serves the regular files of /.nbd/ as NBD exports.
type nbdBackend struct {
	e engineFS
}

var (
	_ nbd.Backend = (*nbdBackend)(nil)
	_ nbd.Export  = (*nbdExport)(nil)
)

func (b *nbdBackend) dir(ctx context.Context) (uint64, error) {
	a, err := b.e.Lookup(ctx, fs.RootIno, NBDDir)
	if err != nil {
		return 0, err
	}
	if !a.IsDir() {
		return 0, fmt.Errorf("/%s is not a directory: %w", NBDDir, fs.ErrNotDir)
	}
	return a.Ino, nil
}

func (b *nbdBackend) List(ctx context.Context) ([]nbd.ExportInfo, error) {
	dir, err := b.dir(ctx)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, nbdErr(err)
	}
	ents, err := b.e.ReadDir(ctx, dir)
	if err != nil {
		return nil, nbdErr(err)
	}
	var out []nbd.ExportInfo
	for _, de := range ents {
		if de.Mode&fs.ModeType != fs.ModeRegular || !validExportName(de.Name) {
			continue
		}
		a, err := b.e.GetAttr(ctx, de.Ino)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile
			}
			return nil, nbdErr(err)
		}
		out = append(out, nbd.ExportInfo{Name: de.Name, Size: int64(a.Size)})
	}
	return out, nil
}

func validExportName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00") && len(n) <= fs.MaxNameLen
}

func (b *nbdBackend) Open(ctx context.Context, name string) (nbd.Export, error) {
	if !validExportName(name) {
		return nil, fmt.Errorf("export %q: %w", name, nbd.ErrNoSuchExport)
	}
	dir, err := b.dir(ctx)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("export %q (no /%s directory): %w", name, NBDDir, nbd.ErrNoSuchExport)
	}
	if err != nil {
		return nil, nbdErr(err)
	}
	a, err := b.e.Lookup(ctx, dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("export %q: %w", name, nbd.ErrNoSuchExport)
	}
	if err != nil {
		return nil, nbdErr(err)
	}
	if !a.IsRegular() {
		return nil, fmt.Errorf("export %q is not a regular file: %w", name, nbd.ErrNoSuchExport)
	}
	// Hold the file open so that an unlink while a client is connected
	// makes it an orphan instead of freeing its extents under the client.
	if err := b.e.Open(ctx, a.Ino); err != nil {
		return nil, nbdErr(err)
	}
	return &nbdExport{e: b.e, ino: a.Ino}, nil
}

type nbdExport struct {
	e    engineFS
	ino  uint64
	once sync.Once
}

func (x *nbdExport) Size() (int64, error) {
	a, err := x.e.GetAttr(context.Background(), x.ino)
	if err != nil {
		return 0, nbdErr(err)
	}
	return int64(a.Size), nil
}

func (x *nbdExport) ReadAt(ctx context.Context, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := x.e.Read(ctx, x.ino, p, off)
		if err != nil && !errors.Is(err, fs.ErrNoData) {
			return nbdErr(err)
		}
		if n <= 0 {
			// The file shrank under the client: past its end reads as zeroes.
			clear(p)
			return nil
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}

func (x *nbdExport) WriteAt(ctx context.Context, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := x.e.Write(ctx, x.ino, p, off)
		if err != nil {
			return nbdErr(err)
		}
		if n <= 0 {
			return nbdErr(syscall.EIO)
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}

func (x *nbdExport) Trim(ctx context.Context, off, length int64) error {
	return nbdErr(x.e.Punch(ctx, x.ino, off, length))
}

func (x *nbdExport) Zero(ctx context.Context, off, length int64, mayTrim bool) error {
	if mayTrim {
		return nbdErr(x.e.Punch(ctx, x.ino, off, length))
	}
	zero := make([]byte, min(length, zeroChunk))
	for length > 0 {
		n := min(length, int64(len(zero)))
		if err := x.WriteAt(ctx, zero[:n], off); err != nil {
			return err
		}
		off += n
		length -= n
	}
	return nil
}

func (x *nbdExport) Flush(ctx context.Context) error {
	return nbdErr(x.e.Barrier(ctx))
}

func (x *nbdExport) Close() error {
	var err error
	x.once.Do(func() { err = nbdErr(x.e.Release(context.Background(), x.ino)) })
	return err
}

// nbdErr attaches the errno the NBD server reports for engine errors it
// knows; the original error stays in the chain for the log.
func nbdErr(err error) error {
	if err == nil {
		return nil
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return err
	}
	switch {
	case errors.Is(err, fs.ErrReadOnly):
		errno = syscall.EROFS
	case errors.Is(err, fs.ErrInvalid):
		errno = syscall.EINVAL
	case errors.Is(err, fs.ErrFileTooBig):
		errno = syscall.EOVERFLOW
	case errors.Is(err, fs.ErrNotSupported):
		errno = syscall.EOPNOTSUPP
	default:
		return err
	}
	return fmt.Errorf("%w: %w", errno, err)
}

// ensureNBDDir creates /.nbd when it is missing.
func ensureNBDDir(ctx context.Context, e *fs.Engine) error {
	_, err := e.Lookup(ctx, fs.RootIno, NBDDir)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	_, err = e.Mkdir(ctx, fs.RootIno, NBDDir, fs.ModeDir|0o755, 0, 0)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	return err
}

// startNBD listens on the configured addresses and serves the exports. It
// returns the addresses (as nbd:// URIs) and a stop function.
func startNBD(c *config.Config, e *fs.Engine, readOnly bool, log *slog.Logger) ([]string, func(), error) {
	var ls []net.Listener
	var addrs []string
	fail := func(err error) ([]string, func(), error) {
		for _, l := range ls {
			l.Close()
		}
		return nil, nil, err
	}
	for _, a := range c.NBD.Listen {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return fail(fmt.Errorf("nbd: listen %s: %w", a, err))
		}
		ls = append(ls, l)
		addrs = append(addrs, "nbd://"+l.Addr().String()+"/")
	}
	if p := c.NBDUnixSocket(); p != "" {
		l, err := listenUnixSocket(p, 0o600)
		if err != nil {
			return fail(fmt.Errorf("nbd: listen %s: %w", p, err))
		}
		ls = append(ls, l)
		addrs = append(addrs, "nbd+unix:///?socket="+p)
	}
	if len(ls) == 0 {
		return nil, func() {}, nil
	}
	srv := nbd.NewServer(&nbdBackend{e: e}, nbd.Options{Logger: log, ReadOnly: readOnly})
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(l); err != nil {
				log.Error("nbd: serve", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	stop := func() {
		if err := srv.Close(); err != nil {
			log.Warn("nbd: close", "err", err)
		}
		wg.Wait()
		if p := c.NBDUnixSocket(); p != "" {
			_ = removeIfSocket(p)
		}
	}
	return addrs, stop, nil
}
