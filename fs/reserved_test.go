package fs

import (
	"context"
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// usedBytes is statfs's used space.
func usedBytes(t *testing.T, e *Engine) int64 {
	t.Helper()
	st, err := e.StatFS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.BlocksFree) * int64(st.BlockSize)
}

// TestReservationsCountAsUsed: fallocate's reservations show in statfs's
// used space and count against the quota; writes into them need no more
// room, writes elsewhere find it taken; the total survives a restart and
// goes with the file.
func TestReservationsCountAsUsed(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	const quota = 8 << 20
	reopen := func() {
		t.Helper()
		if err := f.e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		e, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20, MaxSize: quota})
		if err != nil {
			t.Fatal(err)
		}
		f.e = e
	}
	reopen()
	res := f.create("reserved")
	if err := f.e.Allocate(ctx, res, 0, 6<<20, false); err != nil {
		t.Fatal(err)
	}
	if used := usedBytes(t, f.e); used < 6<<20 || used > 6<<20+extentSize {
		t.Fatalf("used after a 6 MiB fallocate: %d", used)
	}
	other := f.create("other")
	if _, err := f.e.Write(ctx, other, testutil.RandBytes(1, 3<<20), 0); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("3 MiB into another file with 6 of 8 MiB reserved: %v, want ErrNoSpace", err)
	}
	// Filling the reservation needs no more room.
	for off := 0; off < 6<<20; off += 1 << 20 {
		if _, err := f.e.Write(ctx, res, testutil.RandBytes(int64(off), 1<<20), int64(off)); err != nil {
			t.Fatalf("write at %d into the reservation: %v", off, err)
		}
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.e.resTotal.Load(); got != 0 {
		t.Fatalf("reserved total after filling the reservation: %d", got)
	}
	if err := f.e.Allocate(ctx, other, 0, 1<<20, true); err != nil {
		t.Fatal(err)
	}
	reopen()
	if got := f.e.resTotal.Load(); got != 1<<20 {
		t.Fatalf("reserved total after a restart: %d, want 1 MiB", got)
	}
	if err := f.e.Unlink(ctx, RootIno, "other"); err != nil {
		t.Fatal(err)
	}
	if got := f.e.resTotal.Load(); got != 0 {
		t.Fatalf("reserved total after deleting the file: %d", got)
	}
}

// TestAllocateWithoutQuotaStopsAtCapacity: without a quota, statfs
// reports the nominal capacity and a reservation past it fails.
func TestAllocateWithoutQuotaStopsAtCapacity(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("big")
	if err := f.e.Allocate(ctx, ino, 0, 2<<50, false); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("2 PiB fallocate: %v, want ErrNoSpace", err)
	}
	if a, _ := f.e.GetAttr(ctx, ino); a.Size != 0 || a.Blocks != 0 {
		t.Fatalf("a refused fallocate changed the file: %+v", a)
	}
	if err := f.e.Allocate(ctx, ino, 0, 1<<40, true); err != nil {
		t.Fatalf("1 TiB fallocate: %v", err)
	}
	if used := usedBytes(t, f.e); used != 1<<40 {
		t.Fatalf("used after a 1 TiB reservation: %d", used)
	}
	if err := f.e.Allocate(ctx, ino, 1<<40, nominalCapacity, true); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a reservation past the nominal capacity: %v, want ErrNoSpace", err)
	}
}
