package fs

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// TestCacheDiskFullRefusesNewWrites: with the cache directory's filesystem
// below its floor, a write, a mkdir and a setxattr fail with ErrNoSpace and change
// nothing, while data accepted before is still made durable, reads and
// deletes go on; once there is room, writes work again on the same engine.
func TestCacheDiskFullRefusesNewWrites(t *testing.T) {
	const total = 1 << 30
	floor := cacheDiskFloor(total)
	if floor != total/50 || cacheDiskFloor(100<<20) != 8<<20 || cacheDiskFloor(1<<40) != 256<<20 {
		t.Fatalf("floors: %d %d %d", floor, cacheDiskFloor(100<<20), cacheDiskFloor(1<<40))
	}
	var avail atomic.Int64
	avail.Store(total / 2)
	prev := statfsCacheDir
	statfsCacheDir = func(string) (int64, int64, error) { return total, avail.Load(), nil }
	t.Cleanup(func() { statfsCacheDir = prev })

	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("a")
	before := testutil.RandBytes(1, 3*extentSize)
	f.write(ino, before, 0)
	gone := f.create("gone")
	f.write(gone, testutil.RandBytes(2, extentSize), 0)

	avail.Store(floor - 1)
	if _, err := f.e.Write(ctx, ino, []byte("more"), int64(len(before))); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("write with the cache disk full: %v, want ErrNoSpace", err)
	}
	if _, err := f.e.Mkdir(ctx, RootIno, "d", 0o755, 0, 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("mkdir with the cache disk full: %v, want ErrNoSpace", err)
	}
	if err := f.e.SetXattr(ctx, ino, "user.x", []byte("v"), 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("setxattr with the cache disk full: %v, want ErrNoSpace", err)
	}
	if a := f.lookup("a"); a.Size != uint64(len(before)) {
		t.Fatalf("size %d after the refused write, want %d", a.Size, len(before))
	}
	// What was accepted is made durable; reads and deletes go on.
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatalf("barrier with the cache disk full: %v", err)
	}
	if got := f.read(ino, len(before)+10, 0); !bytes.Equal(got, before) {
		t.Fatal("read with the cache disk full: wrong data")
	}
	if err := f.e.Unlink(ctx, RootIno, "gone"); err != nil {
		t.Fatalf("unlink with the cache disk full: %v", err)
	}
	if !f.e.space.cacheLow.Load() {
		t.Fatal("the full cache disk is not recorded")
	}

	// Room again: writes work on the same engine.
	avail.Store(floor)
	f.write(ino, []byte("more"), int64(len(before)))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if f.e.space.cacheLow.Load() {
		t.Fatal("still recorded as full")
	}
	f.reopen()
	ino = f.lookup("a").Ino
	if got := f.read(ino, len(before)+10, 0); !bytes.Equal(got, append(before, "more"...)) {
		t.Fatalf("after a reopen from the store: %d bytes, wrong data", len(got))
	}
	f.fsck()
}
