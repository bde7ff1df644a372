package fs_test

import (
	"bytes"
	"context"
	"math/rand"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// No goroutine outlives Engine.Close: the flusher, the cleaner, a
// flush's uploads and read-aheads all stop with it, on the in-memory
// store and on a local directory (whose idle-file sweeper stops with the
// store's Close). An external test package, so that internal/testutil may
// import fs.
func TestNoGoroutineOutlivesClose(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) objstore.Store
	}{
		{"mem", func(*testing.T) objstore.Store { return objstore.NewMem() }},
		{"local", func(t *testing.T) objstore.Store {
			l, err := objstore.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaks := testutil.SnapshotGoroutines()
			st := tc.store(t)
			useAndClose(t, st)
			if err := objstore.Close(st); err != nil {
				t.Fatal(err)
			}
			leaks.Check(t, 10*time.Second)
		})
	}
}

// useAndClose opens an engine on st, writes five segments, reads them
// back cold (small and large reads) and closes it with data dirty.
func useAndClose(t *testing.T, st objstore.Store) {
	t.Helper()
	ctx := context.Background()
	k, err := fs.Init(ctx, st, "password123")
	if err != nil {
		t.Fatal(err)
	}
	open := func() *fs.Engine {
		e, err := fs.Open(ctx, fs.Options{Store: st, Keys: k, CacheDir: t.TempDir(), SegmentTarget: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	a, err := e.Create(ctx, fs.RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 5<<20)
	rand.New(rand.NewSource(7)).Read(data)
	if _, err := e.Write(ctx, a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e = open() // an empty cache: the reads come from the store
	defer e.Close(ctx)
	for _, r := range []struct{ off, n int }{{3 << 20, 4096}, {0, len(data)}} {
		buf := make([]byte, r.n)
		if n, err := e.Read(ctx, a.Ino, buf, int64(r.off)); err != nil || !bytes.Equal(buf[:n], data[r.off:r.off+r.n]) {
			t.Fatalf("read of %d bytes at %d: %d bytes, %v, not what was written", r.n, r.off, n, err)
		}
	}
	if _, err := e.Write(ctx, a.Ino, data[:1<<20], 1<<20); err != nil { // dirty for the final barrier
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
