package fs

import (
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// TestBlocksSteadyWhileInFlight: st_blocks of a file written into its
// fallocate reservation stays the same while a flush uploads the written
// extents (they are then neither dirty nor committed) and after the
// commit.
func TestBlocksSteadyWhileInFlight(t *testing.T) {
	ctx := context.Background()
	base := objstore.NewMem()
	k, err := Init(ctx, base, "password123")
	if err != nil {
		t.Fatal(err)
	}
	gate := &putGate{Store: base}
	e, err := Open(ctx, Options{Store: gate, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour, SegmentTarget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close(ctx) }()
	a, err := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Allocate(ctx, a.Ino, 0, 1<<20, false); err != nil {
		t.Fatal(err)
	}
	blocks := func() uint64 {
		t.Helper()
		at, err := e.GetAttr(ctx, a.Ino)
		if err != nil {
			t.Fatal(err)
		}
		return at.Blocks
	}
	want := uint64(1<<20) / 512
	if b := blocks(); b != want {
		t.Fatalf("after fallocate of 1 MiB: %d blocks, want %d", b, want)
	}
	if _, err := e.Write(ctx, a.Ino, testutil.RandBytes(1, 2*extentSize), 0); err != nil {
		t.Fatal(err)
	}
	if b := blocks(); b != want {
		t.Fatalf("after writing into the reservation: %d blocks, want %d", b, want)
	}
	entered, release := gate.arm()
	done := make(chan error, 1)
	go func() { done <- e.Seal(ctx) }()
	<-entered // the written extents are in flight; their upload waits
	during := blocks()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if during != want {
		t.Fatalf("while the written extents upload: %d blocks, want %d", during, want)
	}
	if b := blocks(); b != want {
		t.Fatalf("after the commit: %d blocks, want %d", b, want)
	}
}
