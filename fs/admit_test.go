package fs

import (
	"bytes"
	"context"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// TestUploadedFramesReadFromDiskCache: on an object store (not a local
// directory) the frames a writer uploads go into its disk cache, which
// survives a restart on the same cache directory: reading the file back
// after the restart needs no segment request at all (every one fails
// here), however many frames the segment holds.
func TestUploadedFramesReadFromDiskCache(t *testing.T) {
	ctx := context.Background()
	fst, open := remoteFS(t, 64<<20)
	e := open()
	ino, err := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// One segment of 400 frames: more than the cache's queue once took
	// one at a time.
	data := testutil.RandBytes(9, 400*extentSize)
	if n, err := e.Write(ctx, ino.Ino, data, 0); err != nil || n != len(data) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if err := e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil { // drains the disk cache's queue
		t.Fatal(err)
	}
	e = open()
	defer e.Close(ctx)
	id := fst.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet, objstore.OpGetRange}, Prefix: "segments/", Err: objstore.ErrNotFound})
	buf := make([]byte, len(data))
	n, err := e.Read(ctx, ino.Ino, buf, 0)
	if err != nil || n != len(data) || !bytes.Equal(buf, data) {
		t.Fatalf("read after restart: %d bytes, %v, equal %v (segment requests: %d)", n, err, bytes.Equal(buf[:n], data[:n]), fst.Fired(id))
	}
	if fst.Fired(id) != 0 {
		t.Fatalf("%d segment requests; want every frame from the disk cache", fst.Fired(id))
	}
}

// TestPartialOverwriteFindsItsExtentInMemory: an extent that a partial
// write filled from committed data goes to the memory cache when its new
// frame is committed, so the next partial write of it (random 4 KiB
// overwrites) reads nothing from the disk cache or the store. With
// patches off: a patch reads nothing at all.
func TestPartialOverwriteFindsItsExtentInMemory(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	f.openWhole()
	e := f.e
	a, err := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	const extents = 8
	want := testutil.RandBytes(3, extents*extentSize)
	write := func(off int, p []byte) {
		t.Helper()
		if n, err := e.Write(ctx, a.Ino, p, int64(off)); err != nil || n != len(p) {
			t.Fatalf("write at %d: %d, %v", off, n, err)
		}
		copy(want[off:], p)
	}
	write(0, append([]byte(nil), want...))
	if err := e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 3; round++ {
		before := e.rd.Stats()
		for i := 0; i < extents; i++ {
			write(i*extentSize+round*4096, testutil.RandBytes(int64(10*round+i), 4096))
		}
		if err := e.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		after := e.rd.Stats()
		// Each extent is cached once, in its newest version: the one a
		// write superseded was dropped, not left to take room.
		if after.MemEntries != extents {
			t.Fatalf("round %d: %d frames in the memory cache, want %d (one per extent)", round, after.MemEntries, extents)
		}
		if round > 1 {
			if after.MemHits-before.MemHits < extents || after.DiskHits != before.DiskHits || after.Misses != before.Misses {
				t.Fatalf("round %d: %d memory hits, %d disk hits, %d misses; want every extent from memory",
					round, after.MemHits-before.MemHits, after.DiskHits-before.DiskHits, after.Misses-before.Misses)
			}
		}
	}
	got := make([]byte, len(want))
	if n, err := e.Read(ctx, a.Ino, got, 0); err != nil || n != len(got) || !bytes.Equal(got, want) {
		t.Fatalf("read back: %d, %v, equal %v", n, err, bytes.Equal(got[:n], want[:n]))
	}
}

// remoteFS makes a filesystem on a memory store (not a local directory, so
// the disk cache is on) behind fault injection, and returns the store and
// a function that opens it, on the same cache directory each time, with
// segments of segmentTarget bytes.
func remoteFS(t *testing.T, segmentTarget int64) (*objstore.Faulty, func() *Engine) {
	t.Helper()
	ctx := context.Background()
	fst := objstore.NewFaulty(objstore.NewMem())
	k, err := Init(ctx, fst, "password123")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	return fst, func() *Engine {
		t.Helper()
		e, err := Open(ctx, Options{Store: fst, Keys: k, CacheDir: cache, SegmentTarget: segmentTarget})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}
