package fuse

import (
	"bytes"
	"context"
	"os"
	"testing"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/objstore"
)

// TestFsyncReachesTheStore checks that fsync on the mount runs the barrier:
// a reader attached to the same store afterwards, with its own empty cache,
// sees the data.
func TestFsyncReachesTheStore(t *testing.T) {
	requireFUSE(t)
	ctx := context.Background()
	st := objstore.NewMem()
	k, err := ebbfs.Init(ctx, st, "password123")
	skipIfStub(t, err)
	w, err := ebbfs.Open(ctx, ebbfs.Options{Store: st, Keys: k, CacheDir: t.TempDir(), FlushInterval: 1 << 40})
	skipIfStub(t, err)
	dir := t.TempDir()
	srv, err := Mount(w, dir, DefaultMountOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Unmount()
		srv.Wait()
		_ = w.Close(ctx)
	})
	data := bytes.Repeat([]byte("durable "), 100000)
	f, err := os.Create(dir + "/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r, err := ebbfs.Open(ctx, ebbfs.Options{Store: st, Keys: k, CacheDir: t.TempDir(), ReadOnly: true})
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	defer r.Close(ctx)
	a, err := r.Lookup(ctx, ebbfs.RootIno, "f")
	if err != nil {
		t.Fatalf("reader lookup: %v", err)
	}
	got := make([]byte, len(data)+1)
	n, err := r.Read(ctx, a.Ino, got, 0)
	if err != nil || !bytes.Equal(got[:n], data) {
		t.Fatalf("reader read: %d bytes, %v", n, err)
	}
}
