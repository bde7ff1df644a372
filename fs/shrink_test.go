package fs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// durableFile creates "f" holding data and makes it durable.
func (f *testFS) durableFile(data []byte) uint64 {
	f.t.Helper()
	ino := f.create("f")
	f.write(ino, data, 0)
	if err := f.e.Barrier(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	return ino
}

// replica opens a read-only engine following f's store, with a cache
// directory of its own (clk nil: the real clock); the test's end closes it.
func (f *testFS) replica(clk clock.Clock) *Engine {
	f.t.Helper()
	r, err := Open(context.Background(), Options{Store: f.store, Keys: f.keys, CacheDir: f.t.TempDir(), ReadOnly: true, Clock: clk})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestReadPastShrink: a replica follows a truncation. A read past the new
// end (one the kernel issued under the size it still believed) gets the
// bytes from before the truncation, also after a later journal rewrites
// the extent the truncation cut into, until shrinkLife has passed; then
// the read ends at the end of the file again.
func TestReadPastShrink(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	orig := testutil.RandBytes(7, 10*extentSize)
	ino := f.durableFile(orig)
	clk := clock.NewFake(time.Now())
	r := f.replica(clk)
	buf := make([]byte, 10*extentSize)
	if n, err := r.Read(ctx, ino, buf, 0); err != nil || n != len(orig) || !bytes.Equal(buf, orig) {
		t.Fatalf("replica read %d, %v", n, err)
	}

	// Truncate into extent 3; the writer's zeroed tail of extent 3 lands
	// in a later journal.
	cut := int64(3*extentSize + 100)
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(cut)}); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	off := int64(2 * extentSize)
	n, err := r.Read(ctx, ino, buf, off)
	if err != nil || int64(n) != cut-off {
		t.Fatalf("read at %d: %d bytes, %v; want %d", off, n, err, cut-off)
	}
	extra := r.ReadPastShrink(ctx, ino, buf[n:], off+int64(n))
	if got := int64(n + extra); got != int64(len(orig))-off || !bytes.Equal(buf[:got], orig[off:]) {
		t.Fatalf("past the shrink: %d more bytes (equal: %v), want the %d bytes from before it",
			extra, bytes.Equal(buf[:n+extra], orig[off:off+int64(n+extra)]), int64(len(orig))-off-int64(n))
	}
	if r.follow.pastShrink.Load() != 1 {
		t.Fatalf("pastShrink = %d", r.follow.pastShrink.Load())
	}

	// A later journal rewrites extent 3 (the zeroed tail) and appends a
	// little: the bytes past the new end are still the old ones.
	f.write(ino, []byte("appended"), cut)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	newEnd := cut + int64(len("appended"))
	n, err = r.Read(ctx, ino, buf, 0)
	if err != nil || int64(n) != newEnd {
		t.Fatalf("read: %d, %v; want %d", n, err, newEnd)
	}
	extra = r.ReadPastShrink(ctx, ino, buf[n:], int64(n))
	if int64(n+extra) != int64(len(orig)) || !bytes.Equal(buf[newEnd:n+extra], orig[newEnd:]) {
		t.Fatalf("past the shrink after a rewrite: %d more bytes", extra)
	}

	clk.Advance(shrinkLife + time.Second)
	if extra := r.ReadPastShrink(ctx, ino, buf[n:], int64(n)); extra != 0 {
		t.Fatalf("%d bytes past a shrink older than shrinkLife", extra)
	}
}

// TestReadPastShrinksGivesOneState: a file shrinks, grows again into
// extents that were holes a moment before, and shrinks once more. A read
// the kernel issues under the size between the two shrinks gets the file
// as it was then, not the extents of one moment under the size of
// another (which read the grown extents as the holes they had been, and
// gave zeroes the file never held).
func TestReadPastShrinksGivesOneState(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.durableFile(testutil.RandBytes(1, extentSize+extentSize/2))
	r := f.replica(nil)
	step := func(size int64, data []byte) {
		t.Helper()
		if data != nil {
			f.write(ino, data, size)
		} else if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(size)}); err != nil {
			t.Fatal(err)
		}
		if err := f.e.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Follow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step(extentSize, nil) // shrink to one extent
	grown := testutil.RandBytes(2, 5*extentSize)
	step(extentSize, grown) // grow to six extents
	step(2*extentSize, nil) // and shrink to two
	buf := make([]byte, 4*extentSize)
	n, err := r.Read(ctx, ino, buf, 2*extentSize)
	if err != nil || n != 0 {
		t.Fatalf("read past the end: %d, %v", n, err)
	}
	extra := r.ReadPastShrink(ctx, ino, buf, 2*extentSize)
	if extra != len(buf) || !bytes.Equal(buf, grown[extentSize:]) {
		t.Fatalf("past the second shrink: %d bytes (want %d), equal to the six-extent file: %v, zero extents: %v",
			extra, len(buf), bytes.Equal(buf[:extra], grown[extentSize:extentSize+extra]), zeroExtents(buf[:extra]))
	}
}

func zeroExtents(b []byte) []int {
	var out []int
	for i := 0; i*extentSize < len(b); i++ {
		if bytes.Count(b[i*extentSize:min(len(b), (i+1)*extentSize)], []byte{0}) == min(len(b), (i+1)*extentSize)-i*extentSize {
			out = append(out, i)
		}
	}
	return out
}

// TestReplicaReadReResolvesGoneSegment: a replica that has not yet
// followed the writer's overwrite reads a pointer into a segment the
// writer has since reclaimed (deleted here directly, as after a repack
// and the grace). The read must not fail: it follows the newer state and
// reads the file's new bytes from their new place.
func TestReplicaReadReResolvesGoneSegment(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.durableFile(testutil.RandBytes(3, 3*extentSize))
	before, err := objstore.ListAll(ctx, f.store, "segments/")
	if err != nil || len(before) == 0 {
		t.Fatalf("segments before the overwrite: %v, %v", before, err)
	}
	r := f.replica(nil)

	now := testutil.RandBytes(4, 3*extentSize)
	f.write(ino, now, 0)
	if err := f.e.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range before {
		if err := f.store.Delete(ctx, o.Key); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, len(now))
	n, err := r.Read(ctx, ino, buf, 0)
	if err != nil || n != len(now) || !bytes.Equal(buf, now) {
		t.Fatalf("replica read over a gone segment: %d bytes, %v, new bytes: %v", n, err, bytes.Equal(buf[:n], now[:n]))
	}
}

// TestReadPastTwoShrinksUsesTheStateThatCoversIt: a file shrinks twice in
// a row (ten extents, then four, then one) before the kernel learns of
// either. A read under the first size must get all of it from the state
// that had that size, not the four extents of the newer one and then a
// short answer the kernel zero-fills.
func TestReadPastTwoShrinksUsesTheStateThatCoversIt(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	orig := testutil.RandBytes(11, 10*extentSize)
	ino := f.durableFile(orig)
	r := f.replica(nil)
	for _, size := range []uint64{4 * extentSize, extentSize} {
		if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: size}); err != nil {
			t.Fatal(err)
		}
		if err := f.e.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Follow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 9*extentSize)
	got := r.ReadPastShrink(ctx, ino, buf, extentSize)
	if got != len(buf) || !bytes.Equal(buf, orig[extentSize:]) {
		t.Fatalf("read under the first size: %d of %d bytes, equal to the file then: %v", got, len(buf), bytes.Equal(buf[:got], orig[extentSize:extentSize+got]))
	}
}
