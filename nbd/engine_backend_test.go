package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// ext is the extent size of the exports these tests make: the largest, so
// that the extent arithmetic of TRIM and WRITE_ZEROES has the most room
// (the fs package tests every size; tests/ runs exports of the default).
const ext = segment.ExtentSize

func init() {
	if fs.KDFForTests == nil {
		fs.KDFForTests = testutil.FastKDF
	}
}

// engFS is an engine on an in-memory store with the NBD backend over it.
type engFS struct {
	t     testing.TB
	store objstore.Store
	keys  *keys.Keys
	opts  fs.Options
	e     *fs.Engine
	b     Backend
}

// newEngFS makes a filesystem. Unset options default to a 1 MiB segment
// target and no periodic barrier, so only the test's barriers (and NBD
// FLUSH) make data durable.
func newEngFS(t testing.TB, o fs.Options) *engFS {
	t.Helper()
	s := objstore.NewMem()
	k, err := fs.Init(context.Background(), s, "password123")
	if err != nil {
		t.Fatal(err)
	}
	if o.SegmentTarget == 0 {
		o.SegmentTarget = 1 << 20
	}
	if o.FlushInterval == 0 {
		o.FlushInterval = time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	o.Store, o.Keys = s, k
	f := &engFS{t: t, store: s, keys: k, opts: o}
	f.open()
	t.Cleanup(func() {
		if f.e != nil {
			f.e.Close(context.Background())
		}
	})
	return f
}

func (f *engFS) open() {
	f.t.Helper()
	o := f.opts
	o.CacheDir = f.t.TempDir()
	e, err := fs.Open(context.Background(), o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.e, f.b = e, NewEngineBackend(e)
}

// reopen closes the engine and opens it again on an empty cache directory:
// everything comes from the store.
func (f *engFS) reopen() {
	f.t.Helper()
	if err := f.e.Close(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.e = nil
	f.open()
}

// replica opens a read-only engine on a fresh cache directory: it sees
// exactly what the writer made durable.
func (f *engFS) replica() *fs.Engine {
	f.t.Helper()
	o := f.opts
	o.CacheDir, o.ReadOnly = f.t.TempDir(), true
	e, err := fs.Open(context.Background(), o)
	if err != nil {
		f.t.Fatalf("opening a read-only replica: %v", err)
	}
	f.t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func (f *engFS) barrier() {
	f.t.Helper()
	if err := f.e.Barrier(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *engFS) fsck() {
	f.t.Helper()
	r, err := fs.Fsck(context.Background(), f.store, f.keys, fs.FsckOptions{VerifyData: true, TempDir: f.t.TempDir()})
	if err != nil {
		f.t.Fatal(err)
	}
	if !r.OK() {
		f.t.Fatalf("fsck:\n%s", r)
	}
}

func (f *engFS) live() int64 {
	f.t.Helper()
	n, err := f.e.LiveBytes()
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// mkExport creates /.nbd/name with the given size and returns its inode.
func (f *engFS) mkExport(name string, size int64) uint64 {
	f.t.Helper()
	ctx := context.Background()
	if err := EnsureExportDir(ctx, f.e); err != nil {
		f.t.Fatal(err)
	}
	dir, err := f.e.Lookup(ctx, fs.RootIno, ExportDir)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.e.SetXattr(ctx, dir.Ino, fs.XattrExtentSize, []byte(strconv.Itoa(ext)), 0); err != nil {
		f.t.Fatal(err)
	}
	a, err := f.e.Create(ctx, dir.Ino, name, 0o600, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	f.resize(a.Ino, size)
	return a.Ino
}

func (f *engFS) resize(ino uint64, size int64) {
	f.t.Helper()
	if _, err := f.e.SetAttr(context.Background(), ino, fs.SetAttr{Valid: fs.SetSize, Size: uint64(size)}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *engFS) export(name string) Export {
	f.t.Helper()
	x, err := f.b.Open(context.Background(), name)
	if err != nil {
		f.t.Fatalf("Open(%q): %v", name, err)
	}
	f.t.Cleanup(func() { x.Close() })
	return x
}

// readEngine reads [off, off+n) of ino through the engine API; short reads
// past the end are returned short.
func readEngine(t testing.TB, e *fs.Engine, ino uint64, off, n int64) []byte {
	t.Helper()
	buf := make([]byte, n)
	k, err := e.Read(context.Background(), ino, buf, off)
	if err != nil {
		t.Fatalf("engine read %d+%d: %v", off, n, err)
	}
	return buf[:k]
}

func (f *engFS) size(ino uint64) int64 {
	f.t.Helper()
	a, err := f.e.GetAttr(context.Background(), ino)
	if err != nil {
		f.t.Fatal(err)
	}
	return int64(a.Size)
}

// hasData reports whether extent idx of ino holds data (dirty or a pointer).
func (f *engFS) hasData(ino uint64, idx int64) bool {
	f.t.Helper()
	off, err := f.e.SeekData(context.Background(), ino, idx*ext)
	if errors.Is(err, fs.ErrNoData) {
		return false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return off == idx*ext
}

func isZero(b []byte) bool { return len(bytes.TrimRight(b, "\x00")) == 0 }

func diffAt(a, b []byte) string {
	if len(a) != len(b) {
		return fmt.Sprintf("length %d, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at %d: %#x, want %#x", i, a[i], b[i])
		}
	}
	return "equal"
}

func TestEngineBackendExports(t *testing.T) {
	ctx := context.Background()
	f := newEngFS(t, fs.Options{})

	// No /.nbd: no exports, nothing opens.
	if l, err := f.b.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List without /.nbd = %v, %v", l, err)
	}
	if _, err := f.b.Open(ctx, "disk0"); !errors.Is(err, ErrNoSuchExport) {
		t.Fatalf("Open without /.nbd: %v", err)
	}

	// EnsureExportDir creates it 0700 and is idempotent.
	for range 2 {
		if err := EnsureExportDir(ctx, f.e); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := f.e.Lookup(ctx, fs.RootIno, ExportDir)
	if err != nil || !dir.IsDir() || dir.Mode&0o7777 != 0o700 {
		t.Fatalf("/.nbd = %+v, %v; want a 0700 directory", dir, err)
	}
	if v, err := f.e.GetXattr(ctx, dir.Ino, fs.XattrExtentSize); err != nil || string(v) != ExportExtentSize {
		t.Fatalf("/.nbd has extent size %q (%v), want %s", v, err, ExportExtentSize)
	}
	if l, err := f.b.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List of an empty /.nbd = %v, %v", l, err)
	}

	f.mkExport("disk1", 3*ext+5)
	f.mkExport("disk0", 1<<20)
	f.mkExport("empty", 0)
	if _, err := f.e.Mkdir(ctx, dir.Ino, "subdir", 0o700, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Symlink(ctx, dir.Ino, "link", "disk0", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Mknod(ctx, dir.Ino, "fifo", fs.ModeFIFO|0o600, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	// A regular file outside /.nbd is not an export.
	if _, err := f.e.Create(ctx, fs.RootIno, "outside", 0o600, 0, 0); err != nil {
		t.Fatal(err)
	}
	l, err := f.b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(l), fmt.Sprint([]ExportInfo{{"disk0", 1 << 20}, {"disk1", 3*ext + 5}, {"empty", 0}}); got != want {
		t.Fatalf("List = %s, want %s", got, want)
	}

	for _, name := range []string{"", ".", "..", "subdir", "link", "fifo", "missing", "outside",
		"../outside", "/disk0", "disk0/", "./disk0", "sub/../disk0", "disk0\x00", string(bytes.Repeat([]byte("a"), 300))} {
		if x, err := f.b.Open(ctx, name); !errors.Is(err, ErrNoSuchExport) {
			if x != nil {
				x.Close()
			}
			t.Errorf("Open(%q) = %v, want ErrNoSuchExport", name, err)
		}
	}

	// Size follows truncate through the filesystem.
	x := f.export("disk1")
	if n, err := x.Size(); err != nil || n != 3*ext+5 {
		t.Fatalf("Size = %d, %v", n, err)
	}
	a, _ := f.e.Lookup(ctx, dir.Ino, "disk1")
	f.resize(a.Ino, 10<<20)
	if n, err := x.Size(); err != nil || n != 10<<20 {
		t.Fatalf("Size after growing = %d, %v", n, err)
	}
	f.resize(a.Ino, 4096)
	if n, err := x.Size(); err != nil || n != 4096 {
		t.Fatalf("Size after shrinking = %d, %v", n, err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := x.Size(); err == nil {
		t.Fatal("Size after Close succeeded")
	}

	// An unlinked export stays usable while open and is deleted at Close.
	x = f.export("disk0")
	d0, _ := f.e.Lookup(ctx, dir.Ino, "disk0")
	data := testutil.RandBytes(1, 3*ext)
	if err := x.WriteAt(ctx, data, 1000); err != nil {
		t.Fatal(err)
	}
	f.barrier()
	if err := f.e.Unlink(ctx, dir.Ino, "disk0"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.Open(ctx, "disk0"); !errors.Is(err, ErrNoSuchExport) {
		t.Fatalf("Open of an unlinked export: %v", err)
	}
	if l, _ := f.b.List(ctx); len(l) != 2 {
		t.Fatalf("List after unlink = %v", l)
	}
	got := make([]byte, len(data))
	if err := x.ReadAt(ctx, got, 1000); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading the unlinked export: %v, %s", err, diffAt(got, data))
	}
	if err := x.WriteAt(ctx, []byte("still here"), 0); err != nil {
		t.Fatalf("writing the unlinked export: %v", err)
	}
	if n, err := x.Size(); err != nil || n != 1<<20 {
		t.Fatalf("Size of the unlinked export = %d, %v", n, err)
	}
	if live := f.live(); live == 0 {
		t.Fatal("no live bytes while the unlinked export is open")
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.GetAttr(ctx, d0.Ino); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("unlinked export after Close: %v", err)
	}
	f.barrier()
	// More than 10 extents: the cleaner removes its pointers.
	if _, _, _, err := f.e.CleanTombstones(ctx); err != nil {
		t.Fatal(err)
	}
	f.barrier()
	if live := f.live(); live != 0 {
		t.Fatalf("live bytes after the last close of the unlinked export: %d", live)
	}
	f.fsck()
}

func TestEnsureExportDirNotADirectory(t *testing.T) {
	ctx := context.Background()
	f := newEngFS(t, fs.Options{})
	if _, err := f.e.Create(ctx, fs.RootIno, ExportDir, 0o600, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := EnsureExportDir(ctx, f.e); err == nil {
		t.Fatal("EnsureExportDir accepted a regular file at /.nbd")
	}
	if l, err := f.b.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List with a file at /.nbd = %v, %v", l, err)
	}
	if _, err := f.b.Open(ctx, ExportDir); !errors.Is(err, ErrNoSuchExport) {
		t.Fatalf("Open with a file at /.nbd: %v", err)
	}
}

func TestEngineBackendReadWrite(t *testing.T) {
	ctx := context.Background()
	f := newEngFS(t, fs.Options{})
	const size = 5*ext + 1000
	ino := f.mkExport("disk", size)
	x := f.export("disk")

	// Backend writes, engine reads, before and after a barrier.
	want := make([]byte, size)
	for i, w := range []struct{ off, n int64 }{{0, 100}, {ext - 10, 20}, {2*ext + 7, 2*ext + 3}, {size - 500, 500}} {
		d := testutil.RandBytes(int64(10+i), int(w.n))
		if err := x.WriteAt(ctx, d, w.off); err != nil {
			t.Fatal(err)
		}
		copy(want[w.off:], d)
	}
	if got := readEngine(t, f.e, ino, 0, size); !bytes.Equal(got, want) {
		t.Fatalf("engine read of backend writes: %s", diffAt(got, want))
	}
	if err := x.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Engine writes, backend reads.
	d := testutil.RandBytes(20, 3*ext)
	if _, err := f.e.Write(ctx, ino, d, ext/2); err != nil {
		t.Fatal(err)
	}
	copy(want[ext/2:], d)
	got := make([]byte, size)
	if err := x.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("backend read of engine writes: %v, %s", err, diffAt(got, want))
	}

	// Writes past the end fail with ENOSPC and do not grow the file.
	for _, w := range []struct{ off, n int64 }{{size - 1, 2}, {size, 1}, {size + ext, 10}} {
		if err := x.WriteAt(ctx, make([]byte, w.n), w.off); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("write %d+%d past the end: %v", w.off, w.n, err)
		}
	}
	if err := x.WriteAt(ctx, []byte{1}, -1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("write at -1: %v", err)
	}
	if n := f.size(ino); n != size {
		t.Fatalf("size %d after rejected writes, want %d", n, size)
	}

	// A read past the end (the file shrank under a connection) is
	// zero-filled, not short and not stale.
	f.resize(ino, size-2000)
	buf := bytes.Repeat([]byte{0xee}, 3000)
	if err := x.ReadAt(ctx, buf, size-4000); err != nil {
		t.Fatal(err)
	}
	wantBuf := append(append([]byte(nil), want[size-4000:size-2000]...), make([]byte, 1000)...)
	if !bytes.Equal(buf, wantBuf) {
		t.Fatalf("read across the end: %s", diffAt(buf, wantBuf))
	}
	if err := x.ReadAt(ctx, buf, size+ext); err != nil || !bytes.Equal(buf, make([]byte, len(buf))) {
		t.Fatalf("read past the end: %v", err)
	}

	f.barrier()
	f.reopen()
	want = want[:size-2000]
	if got := readEngine(t, f.e, ino, 0, size); !bytes.Equal(got, want) {
		t.Fatalf("after recovery: %s", diffAt(got, want))
	}
	f.fsck()
}

// zeroOp is one way of zeroing a range through the backend.
type zeroOp struct {
	name  string
	punch bool // frees fully covered extents at once (else at the next flush)
	do    func(x Export, off, n int64) error
}

var zeroOps = []zeroOp{
	{"trim", true, func(x Export, off, n int64) error { return x.Trim(context.Background(), off, n) }},
	{"zero", true, func(x Export, off, n int64) error { return x.Zero(context.Background(), off, n, true) }},
	{"zero-nohole", false, func(x Export, off, n int64) error { return x.Zero(context.Background(), off, n, false) }},
}

// tailBytes is the length of the last, partial extent of the unaligned
// exports of TestEngineBackendTrimZero.
const tailBytes = 1000

// TestEngineBackendTrimZero zeroes ranges of files written through the
// backend, checking the content, which extents lose their pointers, the
// live-byte counters before and after the next barrier, recovery from the
// store, and fsck.
func TestEngineBackendTrimZero(t *testing.T) {
	ctx := context.Background()
	f := newEngFS(t, fs.Options{})
	const size8 = 8 * ext
	cases := []struct {
		name   string
		size   int64
		holes  [][2]int64 // punched (and made durable) before the operation
		off, n int64
		full   int // extents with data the range covers entirely
		// tail: the range covers every byte of the file's last, partial
		// extent (tailBytes long), so a punch's zero patch leaves that
		// extent no frame and it is a hole at once.
		tail bool
	}{
		{name: "partial-both-edges", size: size8, off: 1000, n: 40000},
		{name: "inside-one-extent", size: size8, off: 3*ext + 10, n: 1000},
		{name: "exact-extents", size: size8, off: ext, n: 2 * ext, full: 2},
		{name: "one-exact-extent", size: size8, off: 7 * ext, n: ext, full: 1},
		{name: "spanning", size: size8, off: ext + 100, n: 3 * ext, full: 2},
		{name: "over-holes", size: size8, holes: [][2]int64{{2 * ext, 2 * ext}, {5 * ext, ext}}, off: ext + 5, n: 5*ext - 10, full: 1},
		{name: "all-holes", size: size8, holes: [][2]int64{{ext, 3 * ext}}, off: ext, n: 3 * ext},
		{name: "past-the-end", size: size8, off: 6*ext + 10, n: 10 * ext, full: 1},
		{name: "at-the-end", size: size8, off: size8, n: 100},
		{name: "beyond-the-end", size: size8, off: size8 + ext, n: ext},
		{name: "whole-file", size: size8, off: 0, n: size8, full: 8},
		{name: "unaligned-size-tail", size: 7*ext + tailBytes, off: 7 * ext, n: 5000, tail: true},
		{name: "unaligned-size-last-two", size: 7*ext + tailBytes, off: 6 * ext, n: 2 * ext, full: 1, tail: true},
		{name: "zero-length", size: size8, off: ext, n: 0},
	}
	// Frame bytes of one incompressible extent.
	probe := f.mkExport("probe", 8*ext)
	before := f.live()
	if _, err := f.e.Write(ctx, probe, testutil.RandBytes(99, 8*ext), 0); err != nil {
		t.Fatal(err)
	}
	f.barrier()
	frame := (f.live() - before) / 8
	if frame < ext || (f.live()-before)%8 != 0 {
		t.Fatalf("8 random extents hold %d live bytes: not 8 equal frames", f.live()-before)
	}
	// Frame bytes of tailBytes incompressible bytes (a last, partial
	// extent of an unaligned export).
	probeTail := f.mkExport("probe-tail", tailBytes)
	before = f.live()
	if _, err := f.e.Write(ctx, probeTail, testutil.RandBytes(98, tailBytes), 0); err != nil {
		t.Fatal(err)
	}
	f.barrier()
	tailFrame := f.live() - before
	if tailFrame < tailBytes {
		t.Fatalf("%d random bytes hold %d live bytes", tailBytes, tailFrame)
	}

	type result struct {
		ino  uint64
		want []byte
	}
	var results []result
	for ci, c := range cases {
		finalDelta := map[string]int64{}
		for _, op := range zeroOps {
			t.Run(c.name+"/"+op.name, func(t *testing.T) {
				f.t = t
				defer func() { f.t = nil }()
				name := fmt.Sprintf("%s-%s", c.name, op.name)
				ino := f.mkExport(name, c.size)
				x := f.export(name)
				want := testutil.RandBytes(int64(ci), int(c.size))
				if err := x.WriteAt(ctx, want, 0); err != nil {
					t.Fatal(err)
				}
				for _, h := range c.holes {
					if err := x.Trim(ctx, h[0], h[1]); err != nil {
						t.Fatal(err)
					}
					clear(want[h[0] : h[0]+h[1]])
				}
				f.barrier()
				before := f.live()

				if err := op.do(x, c.off, c.n); err != nil {
					t.Fatalf("%s %d+%d: %v", op.name, c.off, c.n, err)
				}
				if c.off < c.size {
					clear(want[c.off:min(c.size, c.off+c.n)])
				}
				if n := f.size(ino); n != c.size {
					t.Fatalf("size %d after %s, want %d", n, op.name, c.size)
				}
				check := func(when string) {
					t.Helper()
					if got := readEngine(t, f.e, ino, 0, c.size); !bytes.Equal(got, want) {
						t.Fatalf("engine read %s: %s", when, diffAt(got, want))
					}
					got := make([]byte, c.size)
					if err := x.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
						t.Fatalf("backend read %s: %v %s", when, err, diffAt(got, want))
					}
				}
				check("right after")
				// A punch debits the fully covered extents in its own
				// transaction, and the last, partial extent when it
				// covers all its bytes (a zero patch that leaves no
				// frame); zeroes written with NO_HOLE replace their
				// pointers at the next flush.
				wantDelta := -int64(c.full) * frame
				if c.tail {
					wantDelta -= tailFrame
				}
				if !op.punch {
					wantDelta = 0
				}
				if d := f.live() - before; d != wantDelta {
					t.Fatalf("live bytes changed by %d right after %s, want %d (%d full extents of %d)", d, op.name, wantDelta, c.full, frame)
				}

				f.barrier()
				check("after a barrier")
				// Every extent that reads as zeroes is a hole now,
				// whatever the operation; the rest hold data.
				for idx := int64(0); idx*ext < c.size; idx++ {
					zero := isZero(want[idx*ext : min(c.size, (idx+1)*ext)])
					if has := f.hasData(ino, idx); has == zero {
						t.Errorf("extent %d: has data %v, reads as zeroes %v", idx, has, zero)
					}
				}
				// Rewriting a partly zeroed extent never makes its
				// frame larger, so at least the fully covered
				// extents' bytes are gone, whatever the operation.
				d := f.live() - before
				if limit := -int64(c.full) * frame; d > limit {
					t.Errorf("live bytes changed by %d over the operation and a barrier, want at most %d", d, limit)
				}
				finalDelta[op.name] = d
				if c.name == "whole-file" && f.size(ino) == c.size {
					a, _ := f.e.GetAttr(ctx, ino)
					if a.Blocks != 0 {
						t.Errorf("whole file zeroed but %d blocks held", a.Blocks)
					}
					if d != -8*frame {
						t.Errorf("whole file zeroed: live bytes changed by %d, want %d", d, -8*frame)
					}
				}
				results = append(results, result{ino, want})
			})
		}
		// Every way of zeroing ends in the same stored state.
		if len(finalDelta) == len(zeroOps) {
			for _, op := range zeroOps[1:] {
				if finalDelta[op.name] != finalDelta[zeroOps[0].name] {
					t.Errorf("%s: live bytes after the barrier changed by %v: the operations disagree", c.name, finalDelta)
					break
				}
			}
		}
	}
	f.t = t
	f.fsck()
	f.reopen()
	for _, r := range results {
		if got := readEngine(t, f.e, r.ino, 0, int64(len(r.want))); !bytes.Equal(got, r.want) {
			t.Fatalf("inode %d after recovery: %s", r.ino, diffAt(got, r.want))
		}
	}
	f.fsck()
}

// TestEngineBackendZeroDirty zeroes data that was never flushed, and a
// large sparse range with NO_HOLE (which must skip the holes, not write
// megabytes of zeroes).
func TestEngineBackendZeroDirty(t *testing.T) {
	ctx := context.Background()
	f := newEngFS(t, fs.Options{})
	for _, op := range zeroOps {
		name := "dirty-" + op.name
		ino := f.mkExport(name, 4*ext)
		x := f.export(name)
		want := testutil.RandBytes(7, 4*ext)
		if err := x.WriteAt(ctx, want, 0); err != nil {
			t.Fatal(err)
		}
		if err := op.do(x, ext/2, 3*ext); err != nil {
			t.Fatal(err)
		}
		clear(want[ext/2 : ext/2+3*ext])
		if got := readEngine(t, f.e, ino, 0, 4*ext); !bytes.Equal(got, want) {
			t.Fatalf("%s of dirty data: %s", op.name, diffAt(got, want))
		}
		f.barrier()
		for idx, has := range []bool{true, false, false, true} {
			if f.hasData(ino, int64(idx)) != has {
				t.Errorf("%s: extent %d has data %v, want %v", op.name, idx, !has, has)
			}
		}
	}

	// 1 GiB export, data in three places; NO_HOLE over all of it.
	const big = 1 << 30
	ino := f.mkExport("sparse", big)
	x := f.export("sparse")
	for _, off := range []int64{0, 300<<20 + 5, big - 100} {
		if err := x.WriteAt(ctx, testutil.RandBytes(off, 100), off); err != nil {
			t.Fatal(err)
		}
	}
	f.barrier()
	if f.live() == 0 {
		t.Fatal("no live bytes")
	}
	start := time.Now()
	if err := x.Zero(ctx, 0, big, false); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("NO_HOLE over a 1 GiB sparse export took %v", el)
	}
	for _, off := range []int64{0, 300<<20 + 5, big - 100} {
		if got := readEngine(t, f.e, ino, off, 100); !bytes.Equal(got, make([]byte, 100)) {
			t.Fatalf("data left at %d", off)
		}
	}
	f.barrier()
	if _, err := f.e.SeekData(ctx, ino, 0); !errors.Is(err, fs.ErrNoData) {
		t.Fatalf("data left after NO_HOLE zeroing and a barrier: %v", err)
	}
	f.fsck()
}

// TestEngineBackendErrors checks the errno the server would report.
func TestEngineBackendErrors(t *testing.T) {
	ctx := context.Background()
	f := newEngFS(t, fs.Options{})
	f.mkExport("disk", 4*ext)
	if _, err := f.e.Write(ctx, f.mustLookupExport("disk"), []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	f.barrier()
	x := f.export("disk")
	for _, c := range []struct {
		name string
		err  error
	}{
		{"trim negative", x.Trim(ctx, -1, 10)},
		{"zero negative", x.Zero(ctx, 0, -10, true)},
		{"read negative", x.ReadAt(ctx, make([]byte, 1), -5)},
	} {
		if errnoOf(c.err) != errnoInval {
			t.Errorf("%s: %v -> %s, want EINVAL", c.name, c.err, errnoName(errnoOf(c.err)))
		}
	}

	// A read-only engine: reads work, writes report EPERM (EROFS).
	ro := f.replica()
	rb := NewEngineBackend(ro)
	rx, err := rb.Open(ctx, "disk")
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	buf := make([]byte, 4)
	if err := rx.ReadAt(ctx, buf, 0); err != nil || string(buf) != "data" {
		t.Fatalf("read-only read = %q, %v", buf, err)
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"write", rx.WriteAt(ctx, []byte("x"), 0)},
		{"trim", rx.Trim(ctx, 0, ext)},
		{"zero", rx.Zero(ctx, 0, ext, true)},
		{"zero no hole", rx.Zero(ctx, 0, ext, false)},
	} {
		if !errors.Is(c.err, syscall.EROFS) || errnoOf(c.err) != errnoPerm {
			t.Errorf("read-only %s: %v -> %s, want EROFS/EPERM", c.name, c.err, errnoName(errnoOf(c.err)))
		}
	}
	if err := rx.Flush(ctx); err != nil {
		t.Errorf("read-only flush: %v", err)
	}

	// A closed engine: ESHUTDOWN.
	if err := f.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.WriteAt(ctx, []byte("x"), 0); errnoOf(err) != errnoShutdown {
		t.Errorf("write on a closed engine: %v -> %s", err, errnoName(errnoOf(err)))
	}
	f.e = nil
}

func (f *engFS) mustLookupExport(name string) uint64 {
	f.t.Helper()
	ctx := context.Background()
	dir, err := f.e.Lookup(ctx, fs.RootIno, ExportDir)
	if err != nil {
		f.t.Fatal(err)
	}
	a, err := f.e.Lookup(ctx, dir.Ino, name)
	if err != nil {
		f.t.Fatal(err)
	}
	return a.Ino
}
