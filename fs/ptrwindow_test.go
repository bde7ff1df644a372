package fs

import (
	"bytes"
	"context"
	"testing"
)

// TestStreamPointerWindow: a sequential read looks up the pointers of the
// next streamWindow bytes once, and the requests after it find theirs in
// that window; a commit (here an overwrite, flushed) makes the next
// request look them up again, so that it reads what the file now holds,
// not a frame the metadata no longer points to.
func TestStreamPointerWindow(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.create("w")
	const size, chunk = 12 << 20, 1 << 20
	want := randBytes(7, size)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := f.e.acquire(ino) // held, as an open file holds it
	if err != nil {
		t.Fatal(err)
	}
	defer f.e.release(n)
	read := func(off int) {
		t.Helper()
		if got := f.read(ino, chunk, int64(off)); !bytes.Equal(got, want[off:off+chunk]) {
			t.Fatalf("read [%d,+%d) differs from the file", off, chunk)
		}
	}
	before := committedScans.Load()
	for off := 0; off < streamWindow; off += chunk {
		read(off)
	}
	// One lookup for the window; a second if a background commit (an
	// attribute flush) came in between.
	if got := committedScans.Load() - before; got > 2 {
		t.Fatalf("%d pointer lookups for %d sequential reads of one window, want 1", got, streamWindow/chunk)
	}
	if w := n.ptrWin.Load(); w == nil || w.from != 0 || w.to != streamWindow/extentSize {
		t.Fatalf("window %+v, want extents [0, %d)", w, streamWindow/extentSize)
	}

	// A window over [8 MiB, 12 MiB); then extents inside it are
	// overwritten and committed: the reads after must see the new bytes.
	read(streamWindow)
	at := streamWindow + chunk + 4096
	fresh := randBytes(8, 3*extentSize)
	f.write(ino, fresh, int64(at))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	copy(want[at:], fresh)
	for off := streamWindow + chunk; off < size; off += chunk {
		read(off)
	}
}
