package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

func init() { KDFForTests = testutil.FastKDF }

type testFS struct {
	t     *testing.T
	store objstore.Store
	keys  *keys.Keys
	e     *Engine
}

func newTestFS(t *testing.T) *testFS {
	t.Helper()
	return newTestFSOn(t, objstore.NewMem())
}

// newTestFSOn is newTestFS on a given store.
func newTestFSOn(t *testing.T, s objstore.Store) *testFS {
	t.Helper()
	ctx := context.Background()
	k, err := Init(ctx, s, "password123")
	if err != nil {
		t.Fatal(err)
	}
	f := &testFS{t: t, store: s, keys: k}
	f.open()
	t.Cleanup(func() {
		if f.e != nil {
			f.e.Close(context.Background())
		}
	})
	return f
}

func (f *testFS) open() {
	f.t.Helper()
	f.openIn(f.t.TempDir())
}

// openIn opens the engine with the cache directory dir.
func (f *testFS) openIn(dir string) {
	f.t.Helper()
	e, err := Open(context.Background(), Options{Store: f.store, Keys: f.keys, CacheDir: dir, SegmentTarget: 1 << 20})
	if err != nil {
		f.t.Fatal(err)
	}
	f.e = e
}

// openWhole reopens the engine with patches off (wholeWrites), for tests
// of the whole-extent write path (a partial write reads the extent).
func (f *testFS) openWhole() { f.openOpts(true) }

// openOpts reopens the engine on a fresh cache directory (everything
// then comes from the store), with patches off if whole.
func (f *testFS) openOpts(whole bool) {
	f.t.Helper()
	if f.e != nil {
		if err := f.e.Close(context.Background()); err != nil {
			f.t.Fatal(err)
		}
	}
	e, err := Open(context.Background(), Options{Store: f.store, Keys: f.keys, CacheDir: f.t.TempDir(), SegmentTarget: 1 << 20, wholeWrites: whole})
	if err != nil {
		f.t.Fatal(err)
	}
	f.e = e
}

// sameFromStore checks that ino reads as model, and again from the store
// alone (reopened on an empty cache).
func (f *testFS) sameFromStore(ino uint64, model []byte, what string) {
	f.t.Helper()
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		f.t.Fatalf("%s: the file differs", what)
	}
	f.openPatches()
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		f.t.Fatalf("%s: the file differs from the store", what)
	}
}

// foldAll does what the idle fold does once writes pause: every extent
// that took a patch becomes one whole frame; then a barrier.
func (f *testFS) foldAll() {
	f.t.Helper()
	ctx := context.Background()
	if err := f.e.Barrier(ctx); err != nil {
		f.t.Fatal(err)
	}
	for _, x := range f.e.idle.take() {
		if err := f.e.mergeExtent(ctx, x.ino, x.idx, true); err != nil && !errors.Is(err, ErrNotExist) {
			f.t.Fatal(err)
		}
	}
	if err := f.e.Barrier(ctx); err != nil {
		f.t.Fatal(err)
	}
}

// joined returns a ReadVec's slices joined, and ends its loan.
func joined(vecs [][]byte, release func()) []byte {
	var b []byte
	for _, v := range vecs {
		b = append(b, v...)
	}
	if release != nil {
		release()
	}
	return b
}

// reopen closes the engine and opens it again on an empty cache directory,
// so everything comes from the store.
func (f *testFS) reopen() {
	f.t.Helper()
	if err := f.e.Close(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.open()
}

func (f *testFS) fsck() {
	f.t.Helper()
	r, err := Fsck(context.Background(), f.store, f.keys, FsckOptions{VerifyData: true})
	if err != nil {
		f.t.Fatal(err)
	}
	if !r.OK() {
		f.t.Fatalf("fsck:\n%s", r)
	}
}

func (f *testFS) create(name string) uint64 {
	f.t.Helper()
	a, err := f.e.Create(context.Background(), RootIno, name, 0o644, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return a.Ino
}

func (f *testFS) write(ino uint64, data []byte, off int64) {
	f.t.Helper()
	if _, err := f.e.Write(context.Background(), ino, data, off); err != nil {
		f.t.Fatal(err)
	}
}

func (f *testFS) read(ino uint64, n int, off int64) []byte {
	f.t.Helper()
	buf := make([]byte, n)
	k, err := f.e.Read(context.Background(), ino, buf, off)
	if err != nil {
		f.t.Fatal(err)
	}
	return buf[:k]
}

func (f *testFS) lookup(name string) Attr {
	f.t.Helper()
	a, err := f.e.Lookup(context.Background(), RootIno, name)
	if err != nil {
		f.t.Fatalf("lookup %s: %v", name, err)
	}
	return a
}

func TestWriteBarrierRecover(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("a")
	data := testutil.RandBytes(1, 3*extentSize+1234)
	f.write(ino, data, 0)
	if got := f.read(ino, len(data)+10, 0); !bytes.Equal(got, data) {
		t.Fatal("read before barrier differs")
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.read(ino, len(data), 0); !bytes.Equal(got, data) {
		t.Fatal("read after barrier differs")
	}
	f.reopen()
	a := f.lookup("a")
	if a.Size != uint64(len(data)) {
		t.Fatalf("size %d, want %d", a.Size, len(data))
	}
	if got := f.read(a.Ino, len(data), 0); !bytes.Equal(got, data) {
		t.Fatal("read after recovery differs")
	}
	f.fsck()
}

func TestOverwriteDebitsCounter(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("a")
	f.write(ino, testutil.RandBytes(2, 4*extentSize), 0)
	f.e.Barrier(ctx)
	f.write(ino, testutil.RandBytes(3, 100), 5)
	f.write(ino, testutil.RandBytes(4, extentSize), extentSize)
	f.e.Barrier(ctx)
	f.fsck()
	want := testutil.RandBytes(2, 4*extentSize)
	copy(want[5:], testutil.RandBytes(3, 100))
	copy(want[extentSize:], testutil.RandBytes(4, extentSize))
	if got := f.read(ino, len(want), 0); !bytes.Equal(got, want) {
		t.Fatal("overwritten content differs")
	}
}

func TestTruncateAndPunch(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("a")
	data := testutil.RandBytes(5, 8*extentSize)
	f.write(ino, data, 0)
	f.e.Barrier(ctx)
	if err := f.e.Punch(ctx, ino, extentSize+100, 3*extentSize); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), data...)
	clear(want[extentSize+100 : 4*extentSize+100])
	if got := f.read(ino, len(want), 0); !bytes.Equal(got, want) {
		t.Fatal("punched content differs")
	}
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: 5*extentSize + 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: 8 * extentSize}); err != nil {
		t.Fatal(err)
	}
	clear(want[5*extentSize+7:])
	f.e.Barrier(ctx)
	f.reopen()
	if got := f.read(ino, len(want), 0); !bytes.Equal(got, want) {
		t.Fatal("content after truncate and recovery differs")
	}
	off, err := f.e.SeekHole(ctx, ino, 0)
	if err != nil || off != 2*extentSize {
		t.Fatalf("SeekHole = %d, %v; want %d", off, err, 2*extentSize)
	}
	off, err = f.e.SeekData(ctx, ino, 2*extentSize)
	if err != nil || off != 4*extentSize {
		t.Fatalf("SeekData = %d, %v; want %d", off, err, 4*extentSize)
	}
	f.fsck()
}

func TestUnlinkPaths(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	small := f.create("small")
	f.write(small, testutil.RandBytes(6, 3*extentSize), 0)
	big := f.create("big")
	f.write(big, testutil.RandBytes(7, 20*extentSize), 0)
	open := f.create("open")
	f.write(open, testutil.RandBytes(8, 2*extentSize), 0)
	f.e.Barrier(ctx)
	if err := f.e.Open(ctx, open); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"small", "big", "open"} {
		if err := f.e.Unlink(ctx, RootIno, n); err != nil {
			t.Fatal(err)
		}
	}
	// The open file stays readable until its last close.
	if got := f.read(open, 2*extentSize, 0); !bytes.Equal(got, testutil.RandBytes(8, 2*extentSize)) {
		t.Fatal("unlinked open file unreadable")
	}
	if err := f.e.Release(ctx, open); err != nil {
		t.Fatal(err)
	}
	for {
		_, n, _, err := f.e.CleanTombstones(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	f.e.Barrier(ctx)
	live, err := f.e.LiveBytes()
	if err != nil || live != 0 {
		t.Fatalf("live bytes after deleting everything: %d, %v", live, err)
	}
	f.fsck()
}

func TestNamespace(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	d, err := f.e.Mkdir(ctx, RootIno, "d", 0o755, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := f.e.Mkdir(ctx, d.Ino, "sub", 0o755, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Mkdir(ctx, RootIno, "d", 0o755, 0, 0); !errors.Is(err, ErrExist) {
		t.Fatalf("mkdir existing: %v", err)
	}
	file, _ := f.e.Create(ctx, d.Ino, "f", 0o600, 0, 0)
	if _, err := f.e.Link(ctx, file.Ino, RootIno, "hard"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Symlink(ctx, RootIno, "sym", "d/f", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Rename(ctx, d.Ino, "sub", sub.Ino, "x", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("rename into itself: %v", err)
	}
	if err := f.e.Rmdir(ctx, RootIno, "d"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("rmdir non-empty: %v", err)
	}
	if err := f.e.Rename(ctx, d.Ino, "sub", RootIno, "sub2", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Rename(ctx, RootIno, "hard", RootIno, "sub2", RenameExchange); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Rename(ctx, RootIno, "sym", RootIno, "hard", RenameNoReplace); !errors.Is(err, ErrExist) {
		t.Fatalf("noreplace: %v", err)
	}
	if err := f.e.SetXattr(ctx, file.Ino, "user.k", []byte("v"), XattrCreate); err != nil {
		t.Fatal(err)
	}
	f.e.Barrier(ctx)
	f.reopen()
	if a := f.lookup("sub2"); a.Ino != file.Ino || a.Nlink != 2 {
		t.Fatalf("sub2 = %+v, want the file with 2 links", a)
	}
	if a := f.lookup("hard"); a.Ino != sub.Ino || !a.IsDir() {
		t.Fatalf("hard = %+v, want the directory", a)
	}
	if a := f.lookup("d"); a.Nlink != 2 {
		t.Fatalf("d nlink %d, want 2", a.Nlink)
	}
	root, _ := f.e.GetAttr(ctx, RootIno)
	if root.Nlink != 4 {
		t.Fatalf("root nlink %d, want 4", root.Nlink)
	}
	target, err := f.e.Readlink(ctx, f.lookup("sym").Ino)
	if err != nil || target != "d/f" {
		t.Fatalf("readlink = %q, %v", target, err)
	}
	v, err := f.e.GetXattr(ctx, file.Ino, "user.k")
	if err != nil || string(v) != "v" {
		t.Fatalf("xattr = %q, %v", v, err)
	}
	f.fsck()
}

func TestWrongPasswordWritesNothing(t *testing.T) {
	s := objstore.NewMem()
	if _, err := Init(context.Background(), s, "password123"); err != nil {
		t.Fatal(err)
	}
	before, _ := objstore.ListAll(context.Background(), s, "")
	if _, err := Unlock(context.Background(), s, "wrong-password"); !errors.Is(err, keys.ErrWrongPassword) {
		t.Fatalf("unlock with a wrong password: %v", err)
	}
	after, _ := objstore.ListAll(context.Background(), s, "")
	if len(before) != len(after) {
		t.Fatal("a failed unlock wrote to the store")
	}
	if _, err := Init(context.Background(), objstore.NewMem(), "short"); !errors.Is(err, keys.ErrShortPassword) {
		t.Fatalf("short password: %v", err)
	}
}

// TestSizeSurvivesEvictionAfterRacingFlush: a flush whose snapshot predates
// an extending write commits, a truncate then drops the write's data, and
// the inode (no handles) is evicted. Its size must come back from the
// record unchanged.
func TestSizeSurvivesEvictionAfterRacingFlush(t *testing.T) {
	ctx := context.Background()
	base := objstore.NewMem()
	k, err := Init(ctx, base, "password123")
	if err != nil {
		t.Fatal(err)
	}
	slow := objstore.NewFaulty(base)
	e, err := Open(ctx, Options{Store: slow, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	a, _ := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	e.Write(ctx, a.Ino, testutil.RandBytes(1, 100<<10), 0)
	e.Barrier(ctx)
	e.Write(ctx, a.Ino, []byte("x"), 50<<10)
	slow.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: "segments/", Latency: 300 * time.Millisecond, Count: 1})
	done := make(chan error, 1)
	go func() { done <- e.Seal(ctx) }()
	time.Sleep(100 * time.Millisecond) // the seal's snapshot is taken; its upload is slow
	e.Write(ctx, a.Ino, testutil.RandBytes(2, 50<<10), 250<<10)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetAttr(ctx, a.Ino, SetAttr{Valid: SetSize, Size: 200 << 10}); err != nil {
		t.Fatal(err)
	}
	got, err := e.GetAttr(ctx, a.Ino)
	if err != nil || got.Size != 200<<10 {
		t.Fatalf("size %d (%v), want %d", got.Size, err, 200<<10)
	}
	e.ns.Lock()
	_, loaded := e.ns.inodes[a.Ino]
	e.ns.Unlock()
	e.Barrier(ctx)
	got, _ = e.GetAttr(ctx, a.Ino)
	if got.Size != 200<<10 {
		t.Fatalf("after eviction (loaded before: %v) size %d, want %d", loaded, got.Size, 200<<10)
	}
}

// A barrier whose metadata commit fails keeps every extent it had not
// committed in memory: the next barrier makes all of it durable. Buffers of
// the extents that did commit are recycled for later writes without
// touching what was written.
func TestFailedCommitKeepsDirtyData(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	var inos []uint64
	var datas [][]byte
	for i := range 3 {
		inos = append(inos, f.create(fmt.Sprint("f", i)))
		datas = append(datas, testutil.RandBytes(int64(10+i), 5*extentSize+777))
		f.write(inos[i], datas[i], 0)
	}
	var commits atomic.Int64
	f.e.commitFault = func() error {
		if commits.Add(1) == 2 { // the second file's commit fails; the first went through
			return errors.New("injected commit failure")
		}
		return nil
	}
	if err := f.e.Barrier(ctx); err == nil {
		t.Fatal("barrier succeeded over a failed commit")
	}
	f.e.commitFault = nil
	for i, ino := range inos {
		if got := f.read(ino, len(datas[i]), 0); !bytes.Equal(got, datas[i]) {
			t.Fatalf("file %d differs after the failed barrier", i)
		}
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	// New writes reuse recycled buffers; the committed files are unchanged.
	extra := f.create("extra")
	more := testutil.RandBytes(99, 8*extentSize)
	f.write(extra, more, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	for i := range inos {
		a := f.lookup(fmt.Sprint("f", i))
		if got := f.read(a.Ino, len(datas[i])+1, 0); !bytes.Equal(got, datas[i]) {
			t.Fatalf("file %d differs after recovery", i)
		}
	}
	if got := f.read(f.lookup("extra").Ino, len(more), 0); !bytes.Equal(got, more) {
		t.Fatal("extra file differs after recovery")
	}
	f.fsck()
}
