package nbd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"ebbfs.dev/ebbfs/fs"
)

// ExportDir is the directory, under the root of the filesystem, whose
// regular files are the NBD exports.
const ExportDir = ".nbd"

// zeroChunk bounds one engine write of zeroes (NBD_CMD_WRITE_ZEROES with
// NBD_CMD_FLAG_NO_HOLE), so a 4 GiB request never holds 4 GiB of dirty
// buffers at once.
const zeroChunk = 1 << 20

// zeroes is shared, read-only source data for zero writes; the engine
// copies what it is given and keeps no reference to it.
var zeroes = make([]byte, zeroChunk)

var (
	_ Backend = (*engineBackend)(nil)
	_ Export  = (*engineExport)(nil)
)

// NewEngineBackend serves the regular files of /.nbd/ in e as exports,
// each named after its file and as large as the file. A missing /.nbd
// means no exports (see EnsureExportDir).
//
// Mapping of the commands onto the engine:
//
//   - READ and WRITE are engine Read and Write. A write never extends the
//     file: one past the current end fails with ENOSPC, as the server
//     answers for ranges past the size it announced.
//   - FLUSH (and FUA) is Engine.Barrier, the filesystem-wide durability
//     barrier: every write completed before it, on any connection or
//     through the mount, is durable when it returns. That is what makes
//     CAN_MULTI_CONN safe.
//   - TRIM and WRITE_ZEROES without NO_HOLE are Engine.Punch: fully
//     covered extents lose their pointers and their segments' live-byte
//     counters are debited in the same transaction; the covered part of a
//     partly covered extent is zeroed and rewritten (as a hole if it is
//     now all zeroes) at the next flush.
//   - WRITE_ZEROES with NO_HOLE writes zeroes over the parts of the range
//     that hold data, in engine writes of at most 1 MiB; parts that are
//     already holes read as zeroes and are left alone. The NBD spec says
//     NO_HOLE asks that the area be "fully provisioned, ensuring that
//     future writes to the same area will not cause fragmentation or cause
//     failure due to insufficient space", and that a server advertising
//     WRITE_ZEROES MUST support the flag. ebbfs cannot provision and has
//     no need to: it stores no all-zero extent (the zeroes written here
//     become holes at the next flush, exactly as a punch would leave
//     them), and because every write goes copy-on-write to a new segment,
//     no earlier allocation could make a later write more likely to
//     succeed or less fragmented. So the flag is accepted, the range reads
//     as zeroes, and the only difference the backend keeps is that it
//     never asks the engine to deallocate.
//
// Engine errors are returned wrapping the errno the server reports:
// read-only EROFS, fenced or closed ESHUTDOWN, invalid EINVAL, anything
// else EIO.
func NewEngineBackend(e *fs.Engine) Backend {
	return &engineBackend{e: e}
}

// ExportExtentSize is the extent size EnsureExportDir gives a /.nbd it
// creates, and so the exports created in it: block devices are written
// in 4 KiB blocks at random, and a larger extent would rewrite (and
// upload, and store until reclaimed) the whole extent for each.
const ExportExtentSize = "4096"

// EnsureExportDir creates /.nbd (mode 0700, owned by the calling process's
// user and group, extent size ExportExtentSize) if it does not exist. A
// writer calls it at startup. It fails if /.nbd exists but is not a
// directory; an existing /.nbd keeps its extent size.
func EnsureExportDir(ctx context.Context, e *fs.Engine) error {
	for range 3 {
		a, err := e.Lookup(ctx, fs.RootIno, ExportDir)
		switch {
		case err == nil && a.IsDir():
			return nil
		case err == nil:
			return fmt.Errorf("nbd: /%s exists and is not a directory (mode %#o)", ExportDir, a.Mode)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("nbd: looking up /%s: %w", ExportDir, err)
		}
		d, err := e.Mkdir(ctx, fs.RootIno, ExportDir, 0o700, uint32(os.Getuid()), uint32(os.Getgid()))
		if err == nil {
			if err := e.SetXattr(ctx, d.Ino, fs.XattrExtentSize, []byte(ExportExtentSize), 0); err != nil {
				return fmt.Errorf("nbd: setting the extent size of /%s: %w", ExportDir, err)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("nbd: creating /%s: %w", ExportDir, err)
		}
		// Created concurrently: look again.
	}
	return fmt.Errorf("nbd: /%s keeps changing", ExportDir)
}

type engineBackend struct {
	e *fs.Engine
}

// exportDir returns the inode of /.nbd, or ok=false when there is none.
func (b *engineBackend) exportDir(ctx context.Context) (ino uint64, ok bool, err error) {
	a, err := b.e.Lookup(ctx, fs.RootIno, ExportDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("nbd: looking up /%s: %w", ExportDir, err)
	case !a.IsDir():
		// Not a directory: there are no exports.
		return 0, false, nil
	}
	return a.Ino, true, nil
}

func (b *engineBackend) List(ctx context.Context) ([]ExportInfo, error) {
	dir, ok, err := b.exportDir(ctx)
	if err != nil || !ok {
		return nil, err
	}
	ents, err := b.e.ReadDir(ctx, dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrNotDir) {
		return nil, nil // removed or replaced meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("nbd: listing /%s: %w", ExportDir, err)
	}
	var out []ExportInfo
	for _, d := range ents {
		if d.Mode&fs.ModeType != fs.ModeRegular || !validExportName(d.Name) {
			continue
		}
		a, err := b.e.GetAttr(ctx, d.Ino)
		if errors.Is(err, fs.ErrNotExist) {
			continue // unlinked meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("nbd: /%s/%s: %w", ExportDir, d.Name, err)
		}
		if !a.IsRegular() {
			continue
		}
		out = append(out, ExportInfo{Name: d.Name, Size: int64(a.Size)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// validExportName accepts only a plain file name: no path separators, no
// "." or "..", no NUL, not empty, and no longer than a directory entry.
func validExportName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= fs.MaxNameLen &&
		!strings.ContainsAny(name, "/\x00")
}

func (b *engineBackend) Open(ctx context.Context, name string) (Export, error) {
	if !validExportName(name) {
		return nil, fmt.Errorf("nbd: export name %q: %w", name, ErrNoSuchExport)
	}
	// Look the name up, open the inode, and check the name still leads to
	// it: an unlink or rename in between must not hand out a file that is
	// no longer (or never was) the export.
	for range 3 {
		dir, ok, err := b.exportDir(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("nbd: export %q (no /%s): %w", name, ExportDir, ErrNoSuchExport)
		}
		ino, err := b.lookupRegular(ctx, dir, name)
		if err != nil {
			return nil, err
		}
		if err := b.e.Open(ctx, ino); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("nbd: opening export %q: %w", name, engineErr(err))
		}
		again, err := b.lookupRegular(ctx, dir, name)
		if err == nil && again == ino {
			return &engineExport{e: b.e, name: name, ino: ino, bs: b.extentSize(ctx, ino)}, nil
		}
		b.e.Release(context.Background(), ino)
		if err != nil && !errors.Is(err, ErrNoSuchExport) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("nbd: export %q keeps changing: %w", name, ErrNoSuchExport)
}

// extentSize returns the extent size of ino, or 0 when it cannot be read
// (the server then advertises its default block size).
func (b *engineBackend) extentSize(ctx context.Context, ino uint64) int {
	v, err := b.e.GetXattr(ctx, ino, fs.XattrExtentSize)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// lookupRegular returns the inode of the regular file name in dir.
func (b *engineBackend) lookupRegular(ctx context.Context, dir uint64, name string) (uint64, error) {
	a, err := b.e.Lookup(ctx, dir, name)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrNameTooLong), errors.Is(err, fs.ErrInvalid),
		errors.Is(err, fs.ErrNotDir):
		return 0, fmt.Errorf("nbd: export %q: %w", name, ErrNoSuchExport)
	case err != nil:
		return 0, fmt.Errorf("nbd: looking up export %q: %w", name, engineErr(err))
	case !a.IsRegular():
		return 0, fmt.Errorf("nbd: export %q is not a regular file: %w", name, ErrNoSuchExport)
	}
	return a.Ino, nil
}

// engineExport is one connection's open export: it holds an engine open
// handle, so an export unlinked while connected stays readable and
// writable until Close.
type engineExport struct {
	e      *fs.Engine
	name   string
	ino    uint64
	bs     int // extent size when opened
	closed atomic.Bool
}

var errExportClosed = fmt.Errorf("nbd: export used after Close: %w", syscall.ESHUTDOWN)

// engineErr wraps an engine error with the errno the server reports for it.
func engineErr(err error) error {
	var errno syscall.Errno
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, fs.ErrReadOnly):
		errno = syscall.EROFS
	case errors.Is(err, fs.ErrFenced), errors.Is(err, fs.ErrClosed):
		errno = syscall.ESHUTDOWN
	case errors.Is(err, fs.ErrInvalid):
		errno = syscall.EINVAL
	case errors.Is(err, fs.ErrFileTooBig), errors.Is(err, fs.ErrNoSpace):
		errno = syscall.ENOSPC
	case errors.Is(err, fs.ErrPermission):
		errno = syscall.EPERM
	case errors.Is(err, fs.ErrNotSupported):
		errno = syscall.EOPNOTSUPP
	default:
		return err // EIO
	}
	return fmt.Errorf("%w (%w)", err, errno)
}

func (x *engineExport) Size() (int64, error) {
	if x.closed.Load() {
		return 0, errExportClosed
	}
	a, err := x.e.GetAttr(context.Background(), x.ino)
	if err != nil {
		return 0, fmt.Errorf("nbd: export %q: %w", x.name, engineErr(err))
	}
	return int64(a.Size), nil
}

// checkRange validates a request range. It does not read the size: the
// server read it once for the request and checked the range against it;
// the engine clamps what it does to the size it sees under the inode lock.
func (x *engineExport) checkRange(off, length int64) error {
	if x.closed.Load() {
		return errExportClosed
	}
	if off < 0 || length < 0 {
		return fmt.Errorf("nbd: export %q: range %d+%d: %w", x.name, off, length, syscall.EINVAL)
	}
	return nil
}

func (x *engineExport) ReadAt(ctx context.Context, p []byte, off int64) error {
	if err := x.checkRange(off, int64(len(p))); err != nil {
		return err
	}
	n, err := x.e.Read(ctx, x.ino, p, off)
	if err != nil {
		return fmt.Errorf("nbd: export %q: read %d+%d: %w", x.name, off, len(p), engineErr(err))
	}
	// Past the end of the file (it shrank after the server checked the
	// range) reads as zeroes.
	clear(p[max(0, min(n, len(p))):])
	return nil
}

// WriteAt writes through Engine.WriteWithin, which never grows the file:
// if it shrank after the server checked the range, the part past the new
// end is not written and the request fails with ENOSPC (what the server
// answers for a write past the end).
func (x *engineExport) WriteAt(ctx context.Context, p []byte, off int64) error {
	if err := x.checkRange(off, int64(len(p))); err != nil {
		return err
	}
	for len(p) > 0 {
		n, err := x.e.WriteWithin(ctx, x.ino, p, off)
		if err != nil {
			return fmt.Errorf("nbd: export %q: write %d+%d: %w", x.name, off, len(p), engineErr(err))
		}
		if n <= 0 {
			return fmt.Errorf("nbd: export %q: write %d+%d past the end of the file: %w", x.name, off, len(p), syscall.ENOSPC)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func (x *engineExport) Trim(ctx context.Context, off, length int64) error {
	if err := x.checkRange(off, length); err != nil {
		return err
	}
	// Punch clamps the range to the file's size itself.
	if err := x.e.Punch(ctx, x.ino, off, length); err != nil {
		return fmt.Errorf("nbd: export %q: trim %d+%d: %w", x.name, off, length, engineErr(err))
	}
	return nil
}

func (x *engineExport) Zero(ctx context.Context, off, length int64, mayTrim bool) error {
	if mayTrim {
		if err := x.checkRange(off, length); err != nil {
			return err
		}
		if err := x.e.Punch(ctx, x.ino, off, length); err != nil {
			return fmt.Errorf("nbd: export %q: zero %d+%d: %w", x.name, off, length, engineErr(err))
		}
		return nil
	}
	if err := x.zeroNoHole(ctx, off, length); err != nil {
		return fmt.Errorf("nbd: export %q: zero (no hole) %d+%d: %w", x.name, off, length, err)
	}
	return nil
}

// zeroNoHole writes zeroes over the parts of [off, off+length) that hold
// data, at most zeroChunk bytes per write. The writes never extend the
// file (Engine.WriteWithin), so a concurrent shrink is not undone.
func (x *engineExport) zeroNoHole(ctx context.Context, off, length int64) error {
	if err := x.checkRange(off, length); err != nil {
		return err
	}
	end := off + length
	for pos := off; pos < end; {
		data, err := x.e.SeekData(ctx, x.ino, pos)
		if errors.Is(err, fs.ErrNoData) {
			return nil // only holes (or the end of the file) from pos on
		}
		if err != nil {
			return engineErr(err)
		}
		if data >= end {
			return nil
		}
		hole, err := x.e.SeekHole(ctx, x.ino, data)
		if errors.Is(err, fs.ErrNoData) {
			hole = end // the file shrank under us
		} else if err != nil {
			return engineErr(err)
		}
		if hole <= data {
			// The data went away between the two calls (a concurrent
			// trim): nothing to zero here, but always make progress.
			pos = data + 1
			continue
		}
		hole = min(hole, end)
		for p := data; p < hole; {
			n := min(hole-p, zeroChunk)
			w, err := x.e.WriteWithin(ctx, x.ino, zeroes[:n], p)
			if err != nil {
				return engineErr(err)
			}
			if int64(w) < n {
				return nil // the file ends here now
			}
			p += n
		}
		pos = hole
	}
	return nil
}

func (x *engineExport) Flush(ctx context.Context) error {
	if x.closed.Load() {
		return errExportClosed
	}
	if err := x.e.Barrier(ctx); err != nil {
		return fmt.Errorf("nbd: export %q: flush: %w", x.name, engineErr(err))
	}
	return nil
}

func (x *engineExport) BlockSize() int { return x.bs }

// Extents reports the holes of the export from the extent map
// (Engine.DataRanges), without reading a frame.
func (x *engineExport) Extents(ctx context.Context, off, length int64) ([]Extent, error) {
	if err := x.checkRange(off, length); err != nil {
		return nil, err
	}
	data, end, err := x.e.DataRanges(ctx, x.ino, off, length, maxStatusExtents/2)
	if errors.Is(err, fs.ErrNoData) {
		// The file shrank below off: what lies past its end reads as
		// zeroes.
		return []Extent{{Length: length, Hole: true}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nbd: export %q: extents %d+%d: %w", x.name, off, length, engineErr(err))
	}
	return extentsOf(off, end, data), nil
}

// extentsOf turns the data ranges of [off, end) into extents covering it.
func extentsOf(off, end int64, data []fs.DataRange) []Extent {
	out := make([]Extent, 0, 2*len(data)+1)
	pos := off
	for _, d := range data {
		if d.Off > pos {
			out = append(out, Extent{Length: d.Off - pos, Hole: true})
		}
		out = append(out, Extent{Length: d.Len})
		pos = d.Off + d.Len
	}
	if end > pos {
		out = append(out, Extent{Length: end - pos, Hole: true})
	}
	return out
}

func (x *engineExport) Close() error {
	if x.closed.Swap(true) {
		return nil
	}
	if err := x.e.Release(context.Background(), x.ino); err != nil {
		return fmt.Errorf("nbd: export %q: release: %w", x.name, engineErr(err))
	}
	return nil
}
