package fuse

import (
	"context"
	"errors"
	"io"
	"math"
	"syscall"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is one open file description. go-fuse maps the kernel's file
// handle numbers to these, so concurrent opens of one inode each get their
// own; the engine only counts them (Open/Release), which lets it keep an
// unlinked file's data until the last close.
type handle struct {
	flags uint32 // open(2) flags as the kernel sent them
	// mark is the engine's restore count at open: a restore since that
	// changed the file makes the handle's reads and writes fail
	// (fs/restore_marks.go).
	mark uint64
}

// open registers a new open of ino with the engine.
func (n *Node) open(ctx context.Context, flags uint32) (*handle, syscall.Errno) {
	mark := n.fsys.e.RestoreMark()
	if err := n.fsys.e.Open(ctx, n.ino()); err != nil {
		return nil, n.fsys.toErrno(err, "open", n.ino())
	}
	return &handle{flags: flags, mark: mark}, 0
}

// stale reports whether f was opened before a checkpoint restore changed
// n: it is a file of the replaced state, and its reads, writes and
// everything else that goes through it fail with ESTALE. A file the
// restore left as it was (same inode, same record, same bytes in both
// states) is not stale: its handles go on. The kernel serves reads from
// its page cache without asking, and that cache is the inode's, not the
// handle's: the restore drops the file's pages, but pages a newer open
// reads in (or an mmap of the old handle maps) are served to the old
// handle too.
func (n *Node) stale(f fs.FileHandle) bool {
	h, ok := f.(*handle)
	return ok && n.fsys.e.StaleSince(n.ino(), h.mark)
}

func (n *Node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, errno := n.open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	// Without atomic_o_trunc the kernel truncates with a separate SETATTR
	// and strips O_TRUNC; honour it anyway should it arrive.
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if _, err := n.fsys.e.SetAttr(keep(ctx), n.ino(), ebbfs.SetAttr{Valid: ebbfs.SetSize}); err != nil {
			n.release()
			return nil, 0, n.fsys.toErrno(err, "open", n.ino())
		}
	}
	return h, openFlags, 0
}

// openFlags keeps the kernel's page cache across opens, so warm reads never
// reach the engine. Changes that bypass the mount (NBD writes and TRIMs to
// the same file) change mtime; with AUTO_INVAL_DATA (go-fuse's default) the
// kernel drops stale pages once the attribute timeout has passed.
const openFlags = fuse.FOPEN_KEEP_CACHE

func (n *Node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = keep(ctx) // the file exists from the engine's Create on
	mode = ebbfs.ModeRegular | mode&0o7777
	uid, gid, mode, errno := n.owner(ctx, mode)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	a, err := n.fsys.e.Create(ctx, n.ino(), name, mode, uid, gid)
	if errors.Is(err, ebbfs.ErrExist) && flags&syscall.O_EXCL == 0 {
		// The kernel looked the name up and found nothing, but it was
		// created since: open(2) without O_EXCL opens what is there.
		return n.openExisting(ctx, name, flags, out)
	}
	if err != nil {
		return nil, nil, 0, n.fsys.toErrno(err, "create", n.ino())
	}
	ch := n.newNode(ctx, a, out)
	child, ok := ch.Operations().(*Node)
	if !ok {
		return nil, nil, 0, syscall.EIO
	}
	h, errno := child.open(ctx, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, h, openFlags, 0
}

// openExisting finishes an O_CREAT open that lost a race with another
// create of the same name.
func (n *Node) openExisting(ctx context.Context, name string, flags uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	a, err := n.fsys.e.Lookup(ctx, n.ino(), name)
	if err != nil {
		return nil, nil, 0, n.fsys.toErrno(err, "create", n.ino())
	}
	switch {
	case a.IsDir():
		return nil, nil, 0, syscall.EISDIR
	case !a.IsRegular():
		// Opening a special file needs the kernel's own open path.
		return nil, nil, 0, syscall.EEXIST
	}
	ch := n.newNode(ctx, a, out)
	child, ok := ch.Operations().(*Node)
	if !ok {
		return nil, nil, 0, syscall.EIO
	}
	fh, _, errno := child.Open(ctx, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 {
		if a, err = n.fsys.e.GetAttr(ctx, child.ino()); err == nil {
			fillAttr(&out.Attr, a)
		}
	}
	return ch, fh, 0, 0
}

// release ends one open of n. It runs even when the request was
// interrupted: a lost release would keep an unlinked file alive forever.
func (n *Node) release() syscall.Errno {
	err := n.fsys.e.Release(context.Background(), n.ino())
	return n.fsys.toErrno(err, "release", n.ino())
}

func (n *Node) Release(ctx context.Context, f fs.FileHandle) syscall.Errno {
	if _, ok := f.(*handle); !ok {
		return 0
	}
	return n.release()
}

func (n *Node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if n.stale(f) {
		return nil, syscall.ESTALE
	}
	if !n.fsys.e.ReadOnly() {
		vecs, release, nr, err := n.fsys.e.ReadVec(ctx, n.ino(), dest, off)
		if err != nil && !errors.Is(err, io.EOF) && nr == 0 {
			return nil, n.fsys.toErrno(err, "read", n.ino())
		}
		if release == nil {
			return fuse.ReadResultData(dest[:nr]), 0
		}
		return &lentRead{vecs: vecs, size: nr, release: release}, 0
	}
	nr, err := n.fsys.e.Read(ctx, n.ino(), dest, off)
	if nr < 0 || nr > len(dest) {
		return nil, n.fsys.toErrno(errors.New("engine read returned a bad count"), "read", n.ino())
	}
	if err != nil && !errors.Is(err, io.EOF) && nr == 0 {
		// Bytes already read are returned, like read(2) cut short.
		return nil, n.fsys.toErrno(err, "read", n.ino())
	}
	if err == nil && nr < len(dest) {
		// A replica's file that a followed journal just made shorter:
		// the kernel may not know yet, and would zero-fill a short
		// answer under the size it still has (fs/shrink.go).
		nr += n.fsys.e.ReadPastShrink(ctx, n.ino(), dest[nr:], off+int64(nr))
	}
	return fuse.ReadResultData(dest[:nr]), 0
}

// lentRead is a read reply sent from several slices with one writev
// (go-fuse's vectored replies, for a result with a Slices method), some of
// them plaintexts the segment reader lent: go-fuse calls Done once the
// reply is written, which ends the loan. The copy into the kernel's
// buffer is then the only one the bytes see after decryption.
type lentRead struct {
	vecs    [][]byte
	size    int
	release func()
}

func (r *lentRead) Size() int { return r.size }

func (r *lentRead) Slices() ([][]byte, fuse.Status) { return r.vecs, fuse.OK }

// Bytes joins the slices, for a reply that is not sent vectored.
func (r *lentRead) Bytes(buf []byte) ([]byte, fuse.Status) {
	buf = buf[:0]
	for _, v := range r.vecs {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

func (r *lentRead) Done() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// Write writes at the offset the kernel chose. For O_APPEND handles that is
// the kernel's file size, taken under its inode lock, which our replies keep
// current. Recomputing it here would be wrong: the kernel also writes back
// shared mmap pages through any writable handle, possibly an O_APPEND one,
// and go-fuse's node API does not say which writes those are.
func (n *Node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	if uint64(off)+uint64(len(data)) > ebbfs.MaxFileSize {
		return 0, syscall.EFBIG
	}
	if n.stale(f) {
		return 0, syscall.ESTALE
	}
	if n.mayHaveSetID() {
		if errno := n.dropPrivs(keep(ctx), "write"); errno != 0 {
			return 0, errno
		}
		// The mode changed: the write may no longer end in EINTR.
		ctx = keep(ctx)
	}
	// A patient request context: an interrupt counts only once the write
	// has waited WriteInterruptAfter (or is a fatal signal), and the
	// engine then honours it only before it copies anything, reporting
	// the bytes copied otherwise.
	ctx, end := n.fsys.patient(ctx)
	defer end()
	nw, err := n.fsys.e.Write(ctx, n.ino(), data, off)
	if nw < 0 || nw > len(data) {
		return 0, n.fsys.toErrno(errors.New("engine write returned a bad count"), "write", n.ino())
	}
	if err != nil && nw == 0 {
		return 0, n.fsys.toErrno(err, "write", n.ino())
	}
	return uint32(nw), 0
}

// Flush (close(2)) has nothing to do: writes are already in the engine,
// and durability is fsync's job.
func (n *Node) Flush(ctx context.Context, f fs.FileHandle) syscall.Errno { return 0 }

// Fsync (and fsyncdir) makes the inode durable (Engine.Sync): nothing to
// do when it has nothing dirty, otherwise the engine's durability barrier,
// shared with the fsyncs that overlap it, which makes everything written
// so far durable, this file included.
// It is never abandoned on an interrupt (see interrupt.go): the call
// returns the barrier's real result.
func (n *Node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	return n.fsys.toErrno(n.fsys.e.Sync(keep(ctx), n.ino()), "fsync", n.ino())
}

func (n *Node) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	if off > math.MaxInt64 || size > math.MaxInt64 || size == 0 {
		return syscall.EINVAL
	}
	if off+size > ebbfs.MaxFileSize {
		return syscall.EFBIG
	}
	if n.stale(f) {
		return syscall.ESTALE
	}
	ctx = keep(ctx)
	switch mode {
	case 0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
	default:
		return syscall.EOPNOTSUPP
	}
	// Allocating and punching modify the file like a write: a caller
	// without CAP_FSETID loses set-user-ID (and set-group-ID with
	// group-execute) first (xfstests generic/683, 684). Recent kernels
	// send their own SETATTR for this; older ones do not.
	if n.mayHaveSetID() {
		if errno := n.dropPrivs(ctx, "fallocate"); errno != 0 {
			return errno
		}
	}
	var err error
	switch mode {
	case 0:
		err = n.fsys.e.Allocate(ctx, n.ino(), int64(off), int64(size), false)
	case unix.FALLOC_FL_KEEP_SIZE:
		err = n.fsys.e.Allocate(ctx, n.ino(), int64(off), int64(size), true)
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
		err = n.fsys.e.Punch(ctx, n.ino(), int64(off), int64(size))
	default:
		return syscall.EOPNOTSUPP
	}
	return n.fsys.toErrno(err, "fallocate", n.ino())
}

// Lseek only sees SEEK_DATA and SEEK_HOLE; the kernel handles the rest.
func (n *Node) Lseek(ctx context.Context, f fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	if off > math.MaxInt64 {
		return 0, syscall.ENXIO
	}
	if n.stale(f) {
		return 0, syscall.ESTALE
	}
	var pos int64
	var err error
	switch whence {
	case unix.SEEK_DATA:
		pos, err = n.fsys.e.SeekData(ctx, n.ino(), int64(off))
	case unix.SEEK_HOLE:
		pos, err = n.fsys.e.SeekHole(ctx, n.ino(), int64(off))
	default:
		return 0, syscall.EINVAL
	}
	if err != nil {
		return 0, n.fsys.toErrno(err, "lseek", n.ino())
	}
	if pos < 0 {
		return 0, syscall.ENXIO
	}
	return uint64(pos), 0
}

// copyChunk is how much CopyFileRange moves per engine call.
const copyChunk = 1 << 20

// CopyFileRange copies within the engine, saving two trips through the
// kernel per chunk. It stops early at end of file, like read(2).
func (n *Node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	dst, ok := out.Operations().(*Node)
	if !ok {
		return 0, syscall.EXDEV
	}
	if flags != 0 {
		return 0, syscall.EINVAL
	}
	if n.stale(fhIn) || dst.stale(fhOut) {
		return 0, syscall.ESTALE
	}
	if offIn > math.MaxInt64 || offOut > math.MaxInt64 {
		return 0, syscall.EINVAL
	}
	// The reply carries a 32-bit count.
	if length > math.MaxUint32&^(copyChunk-1) {
		length = math.MaxUint32 &^ (copyChunk - 1)
	}
	if offOut+length > ebbfs.MaxFileSize {
		return 0, syscall.EFBIG
	}
	if dst.mayHaveSetID() {
		if errno := dst.dropPrivs(keep(ctx), "copy_file_range"); errno != 0 {
			return 0, errno
		}
		ctx = keep(ctx) // the mode changed: no EINTR from here on
	}
	ctx, end := n.fsys.patient(ctx) // a write: as in Write
	defer end()
	buf := make([]byte, min(length, copyChunk))
	var done uint64
	for done < length {
		want := min(length-done, uint64(len(buf)))
		nr, err := n.fsys.e.Read(ctx, n.ino(), buf[:want], int64(offIn+done))
		if err != nil && !errors.Is(err, io.EOF) {
			if done > 0 {
				break
			}
			return 0, n.fsys.toErrno(err, "copy_file_range", n.ino())
		}
		if nr <= 0 || nr > int(want) {
			break
		}
		nw, err := n.fsys.e.Write(ctx, dst.ino(), buf[:nr], int64(offOut+done))
		if nw > 0 && nw <= nr {
			done += uint64(nw)
		}
		if err != nil {
			if done > 0 {
				break
			}
			return 0, n.fsys.toErrno(err, "copy_file_range", dst.ino())
		}
		if nw != nr || nr < int(want) {
			break
		}
	}
	return uint32(done), 0
}
