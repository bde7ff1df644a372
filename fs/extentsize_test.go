package fs

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

func (f *testFS) extentSizeOf(ino uint64) string {
	f.t.Helper()
	v, err := f.e.GetXattr(context.Background(), ino, XattrExtentSize)
	if err != nil {
		f.t.Fatalf("get extent size of %d: %v", ino, err)
	}
	return string(v)
}

func (f *testFS) setExtentSize(ino uint64, v string) error {
	return f.e.SetXattr(context.Background(), ino, XattrExtentSize, []byte(v), 0)
}

// TestExtentSizeAttribute: the extent size is 32 KiB unless set; a
// directory's is inherited by what is created in it; a file's changes only
// while it holds no data; the size survives a restart from the store.
func TestExtentSizeAttribute(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	plain := f.create("plain")
	if got := f.extentSizeOf(plain); got != "32768" {
		t.Fatalf("default extent size %q, want 32768", got)
	}
	for _, bad := range []string{"", "abc", "5000", "2048", "65536", "0", "-4096"} {
		if err := f.setExtentSize(plain, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("extent size %q: %v, want ErrInvalid", bad, err)
		}
	}
	if err := f.e.SetXattr(ctx, plain, XattrExtentSize, []byte("4096"), XattrCreate); !errors.Is(err, ErrExist) {
		t.Fatalf("XATTR_CREATE of the extent size: %v, want ErrExist", err)
	}

	da, err := f.e.Mkdir(ctx, RootIno, "db", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.setExtentSize(da.Ino, "4096\n"); err != nil {
		t.Fatal(err)
	}
	sub, err := f.e.Mkdir(ctx, da.Ino, "sub", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fa, err := f.e.Create(ctx, sub.Ino, "table", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.extentSizeOf(fa.Ino); got != "4096" {
		t.Fatalf("a file two directories below a 4 KiB one has extent size %q", got)
	}
	if names, err := f.e.ListXattr(ctx, fa.Ino); err != nil || len(names) != 0 {
		t.Fatalf("the extent size is listed: %q, %v", names, err)
	}

	// 10 KiB of data is three 4 KiB extents, and then the size is fixed.
	data := testutil.RandBytes(1, 10<<10)
	f.write(fa.Ino, data, 0)
	if err := f.setExtentSize(fa.Ino, "8192"); !errors.Is(err, ErrBusy) {
		t.Fatalf("changing the extent size of a file with data: %v, want ErrBusy", err)
	}
	if err := f.setExtentSize(fa.Ino, "4096"); err != nil {
		t.Fatalf("setting the size it has: %v", err)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	ptrs, err := f.e.pointersIn(fa.Ino, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ptrs) != 3 || ptrs[0].p.PlainLen != 4096 || ptrs[2].p.PlainLen != 2048 {
		t.Fatalf("10 KiB in 4 KiB extents made %d pointers %+v", len(ptrs), ptrs)
	}
	if a, err := f.e.Lookup(ctx, sub.Ino, "table"); err != nil || a.Blocks != 20 {
		t.Fatalf("st_blocks %d (%v), want 20", a.Blocks, err)
	}

	// Emptied, it may change again.
	if _, err := f.e.SetAttr(ctx, fa.Ino, SetAttr{Valid: SetSize, Size: 0}); err != nil {
		t.Fatal(err)
	}
	if err := f.setExtentSize(fa.Ino, "16384"); err != nil {
		t.Fatalf("changing the extent size of an emptied file: %v", err)
	}
	f.write(fa.Ino, data, 0)
	if err := f.e.RemoveXattr(ctx, da.Ino, XattrExtentSize); err != nil {
		t.Fatal(err)
	}
	if got := f.extentSizeOf(da.Ino); got != "32768" {
		t.Fatalf("after removexattr the directory has %q", got)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}

	f.reopen()
	for ino, want := range map[uint64]string{da.Ino: "32768", sub.Ino: "4096", fa.Ino: "16384", plain: "32768"} {
		if got := f.extentSizeOf(ino); got != want {
			t.Errorf("after a restart inode %d has extent size %q, want %q", ino, got, want)
		}
	}
	if got := f.read(fa.Ino, len(data)+1, 0); !bytes.Equal(got, data) {
		t.Fatal("16 KiB extents read back wrong after a restart")
	}
	ptrs, err = f.e.pointersIn(fa.Ino, 0, 100)
	if err != nil || len(ptrs) != 1 || ptrs[0].p.PlainLen != 10<<10 {
		t.Fatalf("10 KiB in a 16 KiB extent: %+v, %v", ptrs, err)
	}
	f.fsck()
}

// TestSmallExtentsRewriteOnlyWhatIsWritten: 4 KiB writes into a file of
// 4 KiB extents read nothing back (no read-modify-write) and upload about
// what they write.
func TestSmallExtentsRewriteOnlyWhatIsWritten(t *testing.T) {
	ctx := context.Background()
	store := objstore.NewCounting(objstore.NewMem())
	f := newTestFSOn(t, store)
	ino := f.create("vm.img")
	if err := f.setExtentSize(ino, "4096"); err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	want := testutil.RandBytes(2, size)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen() // empty caches: a read-modify-write would have to fetch
	before, reqs := f.e.rd.Stats(), store.CountsFor("segments/")
	for i := 0; i < 256; i++ {
		off := (i * 97 % (size / 4096)) * 4096
		p := testutil.RandBytes(int64(100+i), 4096)
		f.write(ino, p, int64(off))
		copy(want[off:], p)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	after := f.e.rd.Stats()
	if fetched := after.Misses - before.Misses + after.DiskHits - before.DiskHits + after.MemHits - before.MemHits; fetched != 0 {
		t.Fatalf("256 aligned 4 KiB writes read %d frames", fetched)
	}
	// The frames and the segment's directory and footer.
	if c := store.CountsFor("segments/").Sub(reqs); c.BytesUp > 256*(4096+100) || c.BytesDown != 0 {
		t.Fatalf("256 4 KiB writes uploaded %d bytes of segments and downloaded %d", c.BytesUp, c.BytesDown)
	}
	if got := f.read(ino, size, 0); !bytes.Equal(got, want) {
		t.Fatal("read back differs")
	}
	f.fsck()
}

// TestReplicaFollowsExtentSizeChange: a replica that holds an empty file
// open sees the writer give it another extent size and then data, and
// reads the data by the new size.
func TestReplicaFollowsExtentSizeChange(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.durableFile(nil)
	r := f.replica(nil)
	if err := r.Open(ctx, ino); err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx, ino)
	if err := f.setExtentSize(ino, "4096"); err != nil {
		t.Fatal(err)
	}
	data := testutil.RandBytes(4, 10<<10)
	f.write(ino, data, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data)+1)
	if n, err := r.Read(ctx, ino, buf, 0); err != nil || !bytes.Equal(buf[:n], data) {
		t.Fatalf("replica read %d bytes (%v), equal %v", n, err, bytes.Equal(buf[:n], data))
	}
	if v, err := r.GetXattr(ctx, ino, XattrExtentSize); err != nil || string(v) != "4096" {
		t.Fatalf("replica extent size %q, %v", v, err)
	}
}

// TestSegmentsCommitInOrder: a flush uploads two segments at once, but the
// second one's pointers wait for the first one's commit: while the first
// upload hangs, nothing of the file is committed, although the second
// segment is in the store.
func TestSegmentsCommitInOrder(t *testing.T) {
	ctx := context.Background()
	counting := objstore.NewCounting(objstore.NewMem())
	gate := &putGate{Store: counting}
	f := newTestFSOn(t, gate)
	ino := f.create("f")
	data := testutil.RandBytes(5, 3<<20) // three segments of 1 MiB (SegmentTarget)
	f.write(ino, data, 0)
	before := counting.CountsFor("segments/").Put
	entered, release := gate.arm()
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open() // a failed check must not leave the flush hanging
	barrier := make(chan error, 1)
	go func() { barrier <- f.e.Barrier(ctx) }()
	<-entered
	deadline := time.Now().Add(time.Minute) // generous: a busy machine is slow, not wrong
	for counting.CountsFor("segments/").Put == before {
		if time.Now().After(deadline) {
			t.Fatal("the second segment was not uploaded within a minute while the first one's upload hung")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for a wrong commit to land
	if ptrs, err := f.e.pointersIn(ino, 0, 1<<20); err != nil || len(ptrs) != 0 {
		t.Fatalf("%d pointers committed (%v) while the first segment's upload hangs", len(ptrs), err)
	}
	open()
	if err := <-barrier; err != nil {
		t.Fatal(err)
	}
	if got := f.read(ino, len(data), 0); !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
	f.fsck()
}

// TestRandomReadsReadOnlyTheirPieces: on a local store, small random
// reads of a file of 32 KiB extents of incompressible data read the 4 KiB
// pieces they need from the segments, not whole frames; a sequential read
// still reads whole frames (and gets every byte right).
func TestRandomReadsReadOnlyTheirPieces(t *testing.T) {
	ctx := context.Background()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := objstore.NewCounting(local)
	f := newTestFSOn(t, store)
	ino := f.create("db")
	const size = 1 << 20
	want := testutil.RandBytes(3, size)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	reqs := store.CountsFor("segments/")
	const reads = 64
	for i := 0; i < reads; i++ {
		off := int64(1+i*37%250)*4096 + int64(i%3)*1000 // some cross a piece
		if got := f.read(ino, 4096, off); !bytes.Equal(got, want[off:off+4096]) {
			t.Fatalf("random read at %d differs", off)
		}
	}
	c := store.CountsFor("segments/").Sub(reqs)
	if limit := int64(reads * 2 * (4096 + 40)); c.BytesDown > limit {
		t.Fatalf("%d random 4 KiB reads fetched %d bytes of segments, more than two pieces each (%d)", reads, c.BytesDown, limit)
	}
	if got := f.read(ino, size, 0); !bytes.Equal(got, want) {
		t.Fatal("sequential read differs")
	}
	f.fsck()
}

// TestColdReadAcrossExtentsOneGet: behind a remote store, a random read of
// several extents that no cache holds is fetched with one GET of their
// run, not one GET per extent for the pieces of the partly covered ones.
func TestColdReadAcrossExtentsOneGet(t *testing.T) {
	ctx := context.Background()
	store := objstore.NewCounting(objstore.NewMem())
	f := newTestFSOn(t, store)
	ino := f.create("img")
	const es = 32 << 10
	want := testutil.RandBytes(9, 8*es)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	before := store.CountsFor("segments/")
	off, n := int64(2*es+1000), 2*es+500 // three extents, the outer two in part
	if got := f.read(ino, n, off); !bytes.Equal(got, want[off:off+int64(n)]) {
		t.Fatal("read differs")
	}
	if c := store.CountsFor("segments/").Sub(before); c.GetRange != 1 {
		t.Fatalf("a cold read of three adjacent extents made %d GETs (%d bytes), want 1", c.GetRange, c.BytesDown)
	}
}

// TestQuotaCountsADeleteAtOnce: under a quota, a write right after the
// delete of a large file (whose pointers reclaim's tombstone cleaner
// removes in the background; none runs here) fits in the space the delete
// gave back, rather than failing with ENOSPC until the cleaner comes
// round.
func TestQuotaCountsADeleteAtOnce(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	if err := f.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20,
		MaxSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	ino := f.create("fill")
	f.write(ino, testutil.RandBytes(4, 1900<<10), 0) // 60 extents: deleted by the cleaner
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Write(ctx, f.create("more"), testutil.RandBytes(5, 1<<20), 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a write past the quota: %v, want ErrNoSpace", err)
	}
	if err := f.e.Unlink(ctx, RootIno, "fill"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Write(ctx, f.create("after"), testutil.RandBytes(6, 1<<20), 0); err != nil {
		t.Fatalf("a write after deleting the file that filled the quota: %v", err)
	}
}
