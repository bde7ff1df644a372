package fs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// randomReadFS writes a file of size bytes behind a counting in-memory
// store and reopens the engine on a new cache directory with a disk cache
// of diskBytes, holding the file's inode as an open file does. It returns
// the file's bytes, the sealed bytes of its frames, and read, a 4 KiB
// read at an offset that checks what it reads.
func randomReadFS(t *testing.T, size int, diskBytes int64) (f *testFS, c *objstore.Counting, want []byte, sealed int64, read func(off int64) error) {
	t.Helper()
	c = objstore.NewCounting(objstore.NewMem())
	f = newTestFSOn(t, c)
	ino := f.create("r")
	want = testutil.RandBytes(7, size)
	f.write(ino, want, 0)
	ctx := context.Background()
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := Open(ctx, Options{Store: c, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20, DiskCacheBytes: diskBytes})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	sealed = f.sealedBytes(ino, size)
	n, err := e.acquire(ino)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.release(n) })
	c.Reset()
	read = func(off int64) error {
		p := make([]byte, 4096)
		k, err := e.Read(ctx, ino, p, off)
		if err == nil && (k != len(p) || !bytes.Equal(p, want[off:off+4096])) {
			err = fmt.Errorf("%d bytes, differing from the file", k)
		}
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		return nil
	}
	return f, c, want, sealed, read
}

// TestRandomReadsOfASmallFileFetchItOnce: random 4 KiB reads of a file
// that fits the disk cache, 16 at a time, fetch each miss's whole
// neighbourhood, each byte once, so that the file is local after one
// pass: no more than its frames are fetched, in at most one GET per
// neighbourhood, and every later read is a hit.
func TestRandomReadsOfASmallFileFetchItOnce(t *testing.T) {
	const size = 8 << 20
	f, c, _, sealed, read := randomReadFS(t, size, 1<<30)
	rng := rand.New(rand.NewPCG(1, 2))
	offs := make([]int64, 2000)
	for i := range offs {
		offs[i] = rng.Int64N(size/4096) * 4096
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(offs); i += 16 {
				if err := read(offs[i]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := c.CountsFor("segments/")
	t.Logf("%d reads: %d bytes in %d GETs for %d bytes of frames; %d frames waited for", len(offs), got.BytesDown, got.GetRange+got.Get, sealed, f.e.rd.Stats().Waits)
	if got.BytesDown > sealed {
		t.Fatalf("%d bytes fetched for a file of %d bytes of frames (%.3fx)", got.BytesDown, sealed, float64(got.BytesDown)/float64(sealed))
	}
	if hoods := int64(size / neighbourhoodBytes); got.GetRange+got.Get > 2*hoods {
		t.Fatalf("%d GETs for %d neighbourhoods", got.GetRange+got.Get, hoods)
	}
	c.Reset()
	for off := int64(0); off < size; off += 64 << 10 {
		if err := read(off); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.CountsFor("segments/"); got.Requests() != 0 {
		t.Fatalf("a second pass over the file made %d requests", got.Requests())
	}
}

// TestRandomReadsOfALargeFileFetchLittle: behind a disk cache far smaller
// than the file, random reads with no locality fetch the pieces they read
// (one, or two where a read straddles pieces), not their frame nor its
// neighbourhood, and a read of the same bytes again is served from those
// pieces; a read near the previous one fetches the neighbourhood (nearby
// reads follow).
func TestRandomReadsOfALargeFileFetchLittle(t *testing.T) {
	const size = 16 << 20
	f, c, _, _, read := randomReadFS(t, size, 1<<20)
	// Far apart: every other neighbourhood, alternating halves of the
	// file; the third straddles two pieces.
	offs := []int64{0 + 100<<10, 8<<20 + 300<<10, 4<<20 + 5000<<2, 12<<20 + 4096, 2<<20 + 12<<10}
	const piece = segment.PieceSize + 40 // a sealed piece: nonce and tag
	for _, off := range offs {
		before := c.CountsFor("segments/")
		if err := read(off); err != nil {
			t.Fatal(err)
		}
		d := c.CountsFor("segments/").Sub(before)
		pieces := int64(1)
		if off%segment.PieceSize != 0 {
			pieces = 2
		}
		if d.BytesDown != pieces*piece || d.GetRange+d.Get != 1 {
			t.Fatalf("a random read at %d with no locality fetched %d bytes in %d GETs, want its %d piece(s), %d bytes", off, d.BytesDown, d.GetRange+d.Get, pieces, pieces*piece)
		}
		before = c.CountsFor("segments/")
		if err := read(off); err != nil {
			t.Fatal(err)
		}
		if d := c.CountsFor("segments/").Sub(before); d.Requests() != 0 {
			t.Fatalf("reading the bytes at %d again made %d requests", off, d.Requests())
		}
	}
	if hits := f.e.rd.Stats().PieceHits; hits < uint64(2*len(offs)) {
		t.Fatalf("%d reads served from fetched pieces, want at least %d", hits, 2*len(offs))
	}
	// Near the last one: one near miss may be chance, and fetches its
	// pieces; a second in a row fetches the neighbourhood.
	before := c.CountsFor("segments/")
	if err := read(2<<20 + 900<<10); err != nil {
		t.Fatal(err)
	}
	if d := c.CountsFor("segments/").Sub(before); d.BytesDown != piece {
		t.Fatalf("a first read next to the last fetched %d bytes, want its piece (%d)", d.BytesDown, piece)
	}
	before = c.CountsFor("segments/")
	if err := read(4<<20 + 100<<10); err != nil {
		t.Fatal(err)
	}
	if d := c.CountsFor("segments/").Sub(before); d.BytesDown < neighbourhoodBytes/2 {
		t.Fatalf("a second read in a row next to the one before fetched %d bytes, want its neighbourhood", d.BytesDown)
	}
}

// TestRandomReadsOfAFileNearTheCacheSizeFetchFrames: a file larger than
// half the disk cache but not larger than all of it, read at random with
// no locality, costs one frame per read: the frame's other pieces may
// well be read while the cache still holds them.
func TestRandomReadsOfAFileNearTheCacheSizeFetchFrames(t *testing.T) {
	const size = 16 << 20
	_, c, _, _, read := randomReadFS(t, size, 24<<20)
	for _, off := range []int64{100 << 10, 8<<20 + 300<<10, 4<<20 + 4096} {
		before := c.CountsFor("segments/")
		if err := read(off); err != nil {
			t.Fatal(err)
		}
		d := c.CountsFor("segments/").Sub(before)
		if d.BytesDown < extentSize || d.BytesDown > extentSize+extentSize/8 || d.GetRange+d.Get != 1 {
			t.Fatalf("a random read at %d fetched %d bytes in %d GETs, want one frame", off, d.BytesDown, d.GetRange+d.Get)
		}
	}
}
