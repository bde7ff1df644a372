package objstore

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/fileutil"
	"golang.org/x/sys/unix"
)

// Local is the embedded default Store: each key is a file under a root
// directory ("segments/3f/0001" -> root/segments/3f/0001).
//
// Writes are crash-safe: the bytes go to a temp file in root/.tmp/, which is
// fsynced and then renamed (plain Put) or hard-linked (IfAbsent; link(2)
// fails with EEXIST if the key exists) into place, and the parent directory
// is fsynced. A crash leaves either the old object or the new one, never a
// partial one; leftover temp files are removed by a later NewLocal once they
// are an hour old.
//
// Every mutation of a key (Put, Delete) holds the key's lock: an open file
// description lock (fcntl F_OFD_SETLK) on one byte of root/.locks/keys, at
// an offset given by the key's 62-bit hash, so IfMatch is atomic across
// processes sharing the directory (and goroutines of one process, which
// lock through descriptors of their own). Keys do not share locks: a
// process stopped (SIGSTOP) or hung while it holds one key's lock, say a
// replica renewing its checkpoint record, delays only that key's
// mutations, never a writer's segments or journals. A wait for a lock
// ends with the request's context.
//
// The ETag names one version of an object. Put mints a random 128-bit token
// for every write and keeps it in the "user.ebbfs.etag" extended attribute
// of the file, so a Put never reads its data twice (hashing a 32 MiB segment
// would cost more CPU than encrypting it). A file without that attribute (a
// file system without user xattrs, or a file placed or copied by hand) has
// the hex MD5 of its content as its ETag, recomputed when asked. Either way
// Head, List and IfMatch agree on the ETag of the bytes actually stored, and
// replacing an object changes its ETag even when the content is the same.
//
// Keys are slash-separated relative names without empty, "." or ".."
// components; a key cannot be both an object and a directory of other
// objects ("a" and "a/b"), which S3 would allow but ebbfs never needs.
type Local struct {
	root    string
	tmpDir  string
	lockDir string
	// noXattr is set once the file system refuses user xattrs.
	noXattr atomic.Bool
	files   openFiles
}

var _ Store = (*Local)(nil)

const (
	localTmpDir      = ".tmp"
	localLockDir     = ".locks"
	localKeyLocks    = "keys" // the file in localLockDir whose bytes are the keys' locks
	localETagXattr   = "user.ebbfs.etag"
	localStaleTemp   = time.Hour
	localListDefault = 1000
)

// NewLocal opens (creating if needed) a local-directory store rooted at root
// and removes temp files older than an hour left by crashed writers.
func NewLocal(root string) (*Local, error) {
	if root == "" {
		return nil, errors.New("objstore: local store needs a root directory")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("objstore: local root %q: %w", root, err)
	}
	l := &Local{
		root:    abs,
		tmpDir:  filepath.Join(abs, localTmpDir),
		lockDir: filepath.Join(abs, localLockDir),
	}
	for _, d := range []string{abs, l.tmpDir, l.lockDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("objstore: local root: %w", err)
		}
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("objstore: local root %q is not a directory", abs)
	}
	if err := l.removeStaleTemps(time.Now().Add(-localStaleTemp)); err != nil {
		return nil, err
	}
	return l, nil
}

// Root returns the absolute root directory.
func (l *Local) Root() string { return l.root }

// Close stops the worker that closes idle kept files and closes them. The
// store stays usable (each read then opens its own file); Close only
// leaves nothing running.
func (l *Local) Close() error {
	l.files.close()
	return nil
}

func (l *Local) removeStaleTemps(before time.Time) error {
	ents, err := os.ReadDir(l.tmpDir)
	if err != nil {
		return fmt.Errorf("objstore: local temp dir: %w", err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue // vanished meanwhile
		}
		if fi.ModTime().Before(before) {
			if err := os.Remove(filepath.Join(l.tmpDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("objstore: remove stale temp file: %w", err)
			}
		}
	}
	return nil
}

// validKey reports why key cannot name a local object, or nil.
func validLocalKey(key string) error {
	if key == "" {
		return errors.New("empty key")
	}
	if strings.ContainsRune(key, 0) {
		return errors.New("key contains NUL")
	}
	parts := strings.Split(key, "/")
	for _, p := range parts {
		switch p {
		case "", ".", "..":
			return fmt.Errorf("key %q has an empty, \".\" or \"..\" component", key)
		}
	}
	if parts[0] == localTmpDir || parts[0] == localLockDir {
		return fmt.Errorf("key %q is in a reserved directory", key)
	}
	return nil
}

func (l *Local) path(key string) string {
	return filepath.Join(l.root, filepath.FromSlash(key))
}

// lock takes the key's lock, in this process and across processes,
// waiting until ctx ends.
func (l *Local) lock(ctx context.Context, key string) (unlock func(), err error) {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	f, err := os.OpenFile(filepath.Join(l.lockDir, localKeyLocks), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("objstore: open lock file: %w", err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(h.Sum64() >> 2), Len: 1}
	wait := time.Millisecond
	for {
		err = unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		if err == unix.EINTR {
			continue
		}
		if err != unix.EAGAIN && err != unix.EACCES {
			_ = f.Close()
			return nil, fmt.Errorf("objstore: lock %s: %w", key, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, fmt.Errorf("objstore: waiting for the lock of %s, held by another process or request: %w", key, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	if err := validLocalKey(key); err != nil {
		return "", fmt.Errorf("put %s: %w", key, err)
	}
	if opts.IfAbsent && opts.IfMatch != "" {
		return "", fmt.Errorf("put %s: IfAbsent and IfMatch are exclusive", key)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("put %s: %w", key, err)
	}
	tmp, etag, err := l.writeTemp(data)
	if err != nil {
		return "", fmt.Errorf("put %s: %w", key, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = os.Remove(tmp)
		}
	}()

	unlock, err := l.lock(ctx, key)
	if err != nil {
		return "", fmt.Errorf("put %s: %w", key, err)
	}
	defer unlock()

	final := l.path(key)
	dir := filepath.Dir(final)
	if err := l.mkdirAll(dir); err != nil {
		return "", fmt.Errorf("put %s: %w", key, err)
	}
	switch {
	case opts.IfAbsent:
		if err := unix.Link(tmp, final); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return "", fmt.Errorf("put %s: %w", key, ErrPreconditionFailed)
			}
			return "", fmt.Errorf("put %s: link: %w", key, err)
		}
	case opts.IfMatch != "":
		cur, err := l.etagOfPath(final)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return "", fmt.Errorf("put %s: %w (object missing)", key, ErrPreconditionFailed)
			}
			return "", fmt.Errorf("put %s: %w", key, err)
		}
		if cur != opts.IfMatch {
			return "", fmt.Errorf("put %s: %w", key, ErrPreconditionFailed)
		}
		if err := os.Rename(tmp, final); err != nil {
			return "", fmt.Errorf("put %s: %w", key, err)
		}
		renamed = true
	default:
		if err := os.Rename(tmp, final); err != nil {
			return "", fmt.Errorf("put %s: %w", key, err)
		}
		renamed = true
	}
	l.files.forget(key)
	if err := fileutil.SyncDir(dir); err != nil {
		return "", fmt.Errorf("put %s: %w", key, err)
	}
	return etag, nil
}

// writeTemp writes data to a new fsynced temp file and returns its path
// and the ETag the file will have: a fresh token in the ETag xattr, or the
// content's MD5 where the file system takes no user xattrs.
func (l *Local) writeTemp(data []byte) (name, etag string, err error) {
	f, err := os.CreateTemp(l.tmpDir, "put-*")
	if err != nil {
		return "", "", err
	}
	name = f.Name()
	fail := func(err error) (string, string, error) {
		_ = f.Close()
		_ = os.Remove(name)
		return "", "", err
	}
	if err := directio.WriteNew(f, data); err != nil {
		return fail(err)
	}
	if !l.noXattr.Load() {
		etag = newETagToken()
		if err := unix.Fsetxattr(int(f.Fd()), localETagXattr, []byte(etag), 0); err != nil {
			if !xattrUnsupported(err) {
				return fail(fmt.Errorf("set etag xattr: %w", err))
			}
			l.noXattr.Store(true)
			etag = ""
		}
	}
	if etag == "" {
		etag = etagOf(data)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(name)
		return "", "", err
	}
	return name, etag, nil
}

// newETagToken returns a random version token, spelled like an MD5 (32 hex
// digits) so that every ETag of the local store has one shape.
func newETagToken() string {
	var b [md5.Size]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

func xattrUnsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM)
}

// mkdirAll creates dir and its missing parents, fsyncing each new directory
// and the directory that received it.
func (l *Local) mkdirAll(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is an object, not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir && len(parent) >= len(l.root) {
		if err := l.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
				return nil // created concurrently
			}
		}
		if errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("a parent of %s is an object, not a directory", dir)
		}
		return err
	}
	if err := fileutil.SyncDir(dir); err != nil {
		return err
	}
	return fileutil.SyncDir(parent)
}

// notFound reports whether err from opening a key's path means there is no
// such object (missing file, a directory in its place, or a file where a
// parent directory should be).
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EISDIR)
}

// openObject opens the regular file holding key.
func (l *Local) openObject(op, key string) (*os.File, os.FileInfo, error) {
	if err := validLocalKey(key); err != nil {
		if key == "" {
			return nil, nil, fmt.Errorf("%s %s: %w", op, key, err)
		}
		// A reserved or malformed name cannot hold an object.
		return nil, nil, fmt.Errorf("%s %s: %w (%v)", op, key, ErrNotFound, err)
	}
	f, err := os.Open(l.path(key))
	if err != nil {
		if notFound(err) {
			return nil, nil, fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
		}
		return nil, nil, fmt.Errorf("%s %s: %w", op, key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%s %s: %w", op, key, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, nil, fmt.Errorf("%s %s: %w", op, key, ErrNotFound)
	}
	return f, fi, nil
}

// Get implements Store.
func (l *Local) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, fi, err := l.openObject("get", key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return buf, nil
}

// GetRange implements Store.
func (l *Local) GetRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if cachedRead(key, length) {
		return l.getSmall(ctx, key, off, int(length), nil)
	}
	f, err := l.openRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, length)
	if err := readAt(f, key, buf, off); err != nil {
		return nil, err
	}
	return buf, nil
}

var _ RangeReader = (*Local)(nil)

// ReadRange implements RangeReader.
func (l *Local) ReadRange(ctx context.Context, key string, off int64, dst []byte) error {
	if cachedRead(key, int64(len(dst))) {
		return l.readSmall(ctx, key, off, dst)
	}
	f, err := l.openRange(ctx, key, off, int64(len(dst)))
	if err != nil {
		return err
	}
	defer f.Close()
	if len(dst) <= localRandomRead {
		// A small read is a random one (sequential readers ask for runs
		// of frames): no kernel read-ahead of bytes nobody asked for.
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	}
	return readAt(f, key, dst, off)
}

// willNeed starts the kernel reading [off, off+n) of key's file into the
// page cache (WillNeed).
func (l *Local) willNeed(key string, off, n int64) {
	f, _, err := l.openObject("get", key)
	if err != nil {
		return
	}
	_ = unix.Fadvise(int(f.Fd()), off, n, unix.FADV_WILLNEED)
	_ = f.Close()
}

// localRandomRead is the largest ReadRange the local store reads without
// kernel read-ahead: a frame or two.
const localRandomRead = 64 << 10

// cachedRead reports whether a read of n bytes of key goes through the
// open-files cache (openFiles).
func cachedRead(key string, n int64) bool {
	return n >= 0 && n <= localRandomRead && strings.HasPrefix(key, openFilesPrefix)
}

// readSmall reads dst at off of key through a file the open-files cache
// keeps.
func (l *Local) readSmall(ctx context.Context, key string, off int64, dst []byte) error {
	e, err := l.acquireSmall(ctx, key, off, int64(len(dst)))
	if err != nil {
		return err
	}
	defer l.files.release(e)
	return readAt(e.f, key, dst, off)
}

// getSmall reads n bytes at off of key, a range readSmall may read, past
// the page cache where it can (directio.File), into buf (at least
// n+SpanSlack bytes, for ReadSpan; nil: a buffer of its own, for
// GetRange), and returns the slice holding them.
func (l *Local) getSmall(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error) {
	e, err := l.acquireSmall(ctx, key, off, int64(n))
	if err != nil {
		return nil, err
	}
	defer l.files.release(e)
	if b, ok := e.direct.Read(e.f, off, n, buf); ok {
		return b, nil
	}
	if buf == nil {
		buf = make([]byte, n)
	}
	if err := readAt(e.f, key, buf[:n], off); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// acquireSmall returns key's file from the open-files cache with a
// reference taken, after checking that [off, off+n) lies inside it.
func (l *Local) acquireSmall(ctx context.Context, key string, off, n int64) (*openFile, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	e, err := l.files.acquire(key, func() (*os.File, int64, error) {
		f, fi, err := l.openObject("get", key)
		if err != nil {
			return nil, 0, err
		}
		return f, fi.Size(), nil
	})
	if err != nil {
		return nil, err
	}
	if off < 0 || n < 0 || off > e.size || n > e.size-off {
		l.files.release(e)
		return nil, fmt.Errorf("get %s: range [%d,+%d) outside object of %d bytes", key, off, n, e.size)
	}
	return e, nil
}

// openRange opens key's file after checking that [off, off+length) lies
// inside the object.
func (l *Local) openRange(ctx context.Context, key string, off, length int64) (*os.File, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, fi, err := l.openObject("get", key)
	if err != nil {
		return nil, err
	}
	if off < 0 || length < 0 || off > fi.Size() || length > fi.Size()-off {
		f.Close()
		return nil, fmt.Errorf("get %s: range [%d,+%d) outside object of %d bytes", key, off, length, fi.Size())
	}
	return f, nil
}

func readAt(f *os.File, key string, dst []byte, off int64) error {
	if _, err := f.ReadAt(dst, off); err != nil && !(errors.Is(err, io.EOF) && len(dst) == 0) {
		return fmt.Errorf("get %s: %w", key, err)
	}
	return nil
}

// Head implements Store.
func (l *Local) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, fmt.Errorf("head %s: %w", key, err)
	}
	f, fi, err := l.openObject("head", key)
	if err != nil {
		return ObjectInfo{}, err
	}
	defer f.Close()
	etag, err := l.etagOfFile(f)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("head %s: %w", key, err)
	}
	return ObjectInfo{Key: key, Size: fi.Size(), ETag: etag, ModTime: fi.ModTime()}, nil
}

// etagOfPath returns the ETag of the object file at p (ErrNotFound if none).
func (l *Local) etagOfPath(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		if notFound(err) {
			return "", ErrNotFound
		}
		return "", err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return "", err
	} else if !fi.Mode().IsRegular() {
		return "", ErrNotFound
	}
	return l.etagOfFile(f)
}

// etagOfFile reads the version token from the xattr, or hashes the content.
func (l *Local) etagOfFile(f *os.File) (string, error) {
	if !l.noXattr.Load() {
		buf := make([]byte, 64)
		n, err := unix.Fgetxattr(int(f.Fd()), localETagXattr, buf)
		if err == nil && n == 2*md5.Size {
			s := string(buf[:n])
			if _, herr := hex.DecodeString(s); herr == nil {
				return s, nil
			}
		}
	}
	h := md5.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	dir, err := l.remove(ctx, key)
	if err != nil {
		return err
	}
	if dir != "" {
		if err := fileutil.SyncDir(dir); err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
	}
	return nil
}

// remove unlinks key's file under its lock and returns the directory to
// fsync ("" when nothing was removed).
func (l *Local) remove(ctx context.Context, key string) (string, error) {
	if err := validLocalKey(key); err != nil {
		if key == "" {
			return "", fmt.Errorf("delete %s: %w", key, err)
		}
		return "", nil // cannot exist
	}
	unlock, err := l.lock(ctx, key)
	if err != nil {
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
	defer unlock()
	// Whether this removes the file or finds it gone, a file kept open
	// for reads must not keep its space.
	defer l.files.forget(key)
	p := l.path(key)
	fi, err := os.Lstat(p)
	if err != nil {
		if notFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
	if fi.IsDir() {
		return "", nil // a directory of other objects, not an object
	}
	if err := os.Remove(p); err != nil {
		if notFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("delete %s: %w", key, err)
	}
	return filepath.Dir(p), nil
}

// DeleteMany implements Store. Each directory touched is fsynced once.
func (l *Local) DeleteMany(ctx context.Context, keys []string) error {
	dirs := map[string]bool{}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("delete many: %w", err)
		}
		dir, err := l.remove(ctx, k)
		if err != nil {
			return err
		}
		if dir != "" {
			dirs[dir] = true
		}
	}
	for d := range dirs {
		if err := fileutil.SyncDir(d); err != nil {
			return fmt.Errorf("delete many: %w", err)
		}
	}
	return nil
}

// List implements Store. It walks the directory tree in key order, pruning
// subtrees that cannot hold keys after startAfter or under prefix, and
// never shows .tmp or .locks.
func (l *Local) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if limit <= 0 {
		limit = localListDefault
	}
	w := listWalk{l: l, ctx: ctx, prefix: prefix, after: startAfter, want: limit + 1}
	// Start at the deepest directory the prefix names completely.
	startDir := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		startDir = prefix[:i+1]
		if validLocalKey(strings.TrimSuffix(startDir, "/")) != nil {
			return ListPage{}, nil // no object can live there
		}
	}
	if err := w.walk(startDir); err != nil {
		return ListPage{}, fmt.Errorf("list %s: %w", prefix, err)
	}
	var p ListPage
	if len(w.out) > limit {
		w.out, p.More = w.out[:limit], true
	}
	p.Objects = w.out
	return p, nil
}

type listWalk struct {
	l      *Local
	ctx    context.Context
	prefix string
	after  string
	want   int
	out    []ObjectInfo
}

type listEnt struct {
	name string // key-relative sort name; directories end in "/"
	key  string
	dir  bool
}

// walk lists dirKey ("" or ending in "/") in key order.
func (w *listWalk) walk(dirKey string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	osDir := filepath.Join(w.l.root, filepath.FromSlash(dirKey))
	ents, err := os.ReadDir(osDir)
	if err != nil {
		if notFound(err) {
			return nil
		}
		return err
	}
	list := make([]listEnt, 0, len(ents))
	for _, e := range ents {
		name := e.Name()
		if dirKey == "" && (name == localTmpDir || name == localLockDir) {
			continue
		}
		le := listEnt{name: name, key: dirKey + name, dir: e.IsDir()}
		if le.dir {
			le.name += "/"
			le.key += "/"
		} else if !e.Type().IsRegular() {
			continue
		}
		list = append(list, le)
	}
	// Sorting directories as "name/" makes the walk yield keys in plain
	// byte order: "a-c" < "a/b" because '-' < '/'.
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	for _, e := range list {
		if len(w.out) >= w.want {
			return nil
		}
		if e.dir {
			// Skip subtrees outside the prefix or wholly at/before startAfter.
			if !strings.HasPrefix(e.key, w.prefix) && !strings.HasPrefix(w.prefix, e.key) {
				continue
			}
			if e.key <= w.after && !strings.HasPrefix(w.after, e.key) {
				continue
			}
			if err := w.walk(e.key); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(e.key, w.prefix) || e.key <= w.after {
			continue
		}
		p := filepath.Join(osDir, e.name)
		fi, err := os.Lstat(p)
		if err != nil {
			if notFound(err) {
				continue // deleted meanwhile
			}
			return err
		}
		etag, err := w.l.etagOfPath(p)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return err
		}
		w.out = append(w.out, ObjectInfo{Key: e.key, Size: fi.Size(), ETag: etag, ModTime: fi.ModTime()})
	}
	return nil
}
