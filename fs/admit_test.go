package fs

import (
	"bytes"
	"context"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
)

// TestUploadedFramesReadFromDiskCache: on an object store (not a local
// directory) the frames a writer uploads go into its disk cache, which
// survives a restart on the same cache directory: reading the file back
// after the restart needs no segment request at all (every one fails
// here).
func TestUploadedFramesReadFromDiskCache(t *testing.T) {
	ctx := context.Background()
	fst := objstore.NewFaulty(objstore.NewMem())
	k, err := Init(ctx, fst, "password123")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	open := func() *Engine {
		e, err := Open(ctx, Options{Store: fst, Keys: k, CacheDir: cache, SegmentTarget: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	ino, err := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(9, 8*extentSize)
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
