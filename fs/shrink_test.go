package fs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

// TestReadPastShrink: a replica follows a truncation. A read past the new
// end (one the kernel issued under the size it still believed) gets the
// bytes from before the truncation, also after a later journal rewrites
// the extent the truncation cut into, until shrinkLife has passed; then
// the read ends at the end of the file again.
func TestReadPastShrink(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.create("f")
	orig := randBytes(7, 10*extentSize)
	f.write(ino, orig, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	r, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), ReadOnly: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
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
