package segread

import (
	"bytes"
	"context"
	"testing"

	"ebbfs.dev/ebbfs/segment"
)

// TestFillPiecesThenRead: FillPieces fetches just the pieces of a range
// (one ranged GET of their sealed bytes), and a read of that range is
// then served from them without a request, even a cache-only one, into a
// buffer or not; a range the pieces do not cover is not. With a disk
// cache (behind which a frame is otherwise fetched whole), the same.
func TestFillPiecesThenRead(t *testing.T) {
	for _, disk := range []bool{false, true} {
		f, i := piecedFixture(t)
		o := ReaderOptions{MemoryBytes: 1 << 20}
		if disk {
			o.DiskDir, o.DiskBytes = t.TempDir(), 1<<30
		}
		r := f.reader(t, o)
		id, p, plain := f.ids[i], f.ps[i], f.plains[i]
		ctx := context.Background()
		from, to := 5000, 9000 // two pieces
		if _, err := r.Read(ctx, &Request{ID: id, Ptr: p, From: from, To: to, Want: FillPieces}); err != nil {
			t.Fatal(err)
		}
		_, a, b := segment.PieceSpan(int(p.PlainLen), from, to)
		if got := f.cs.count("getrange"); got != 1 || r.Stats().BytesFetched != uint64(b-a) {
			t.Fatalf("disk %v: FillPieces made %d GETs of %d bytes, want 1 of %d", disk, got, r.Stats().BytesFetched, b-a)
		}
		f.cs.reset()
		cacheOnly, cancel := context.WithCancel(ctx)
		cancel()
		got, err := partOf(r, cacheOnly, id, p, from, to)
		if err != nil || !bytes.Equal(got, plain[from:to]) {
			t.Fatalf("disk %v: cache-only read of the filled range: %v (equal %v)", disk, err, bytes.Equal(got, plain[from:to]))
		}
		buf := make([]byte, to-from)
		if err := partTo(r, ctx, id, p, from, to, buf); err != nil || !bytes.Equal(buf, plain[from:to]) {
			t.Fatalf("disk %v: read of the filled range into a buffer: %v", disk, err)
		}
		if n := f.cs.total(); n != 0 {
			t.Fatalf("disk %v: reads of the filled range made %d requests", disk, n)
		}
		if _, err := partOf(r, cacheOnly, id, p, 0, 100); err == nil {
			t.Fatalf("disk %v: a cache-only read of a range no piece was fetched for succeeded", disk)
		}
		if h := r.Stats().PieceHits; h != 2 {
			t.Fatalf("disk %v: PieceHits = %d, want 2", disk, h)
		}
	}
}

// TestFilledPiecesThatDoNotOpen: pieces in the piece cache that do not
// authenticate (here: damaged in memory) are dropped and the read goes to
// the store, which returns the right bytes; nothing is reported corrupt.
func TestFilledPiecesThatDoNotOpen(t *testing.T) {
	f, i := piecedFixture(t)
	r := f.reader(t, ReaderOptions{MemoryBytes: -1})
	id, p, plain := f.ids[i], f.ps[i], f.plains[i]
	ctx := context.Background()
	if _, err := r.Read(ctx, &Request{ID: id, Ptr: p, From: 0, To: 4096, Want: FillPieces}); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	for _, el := range r.mu.pieces.m {
		el.Value.(*pieceEntry).sealed[30] ^= 1
	}
	r.mu.Unlock()
	got, err := partOf(r, ctx, id, p, 0, 4096)
	if err != nil || !bytes.Equal(got, plain[:4096]) {
		t.Fatalf("read after damaged pieces: %v (equal %v)", err, bytes.Equal(got, plain[:4096]))
	}
	if s := r.Stats(); s.Corrupt != 0 || s.PieceHits != 0 {
		t.Fatalf("Corrupt = %d, PieceHits = %d, want 0 and 0", s.Corrupt, s.PieceHits)
	}
	r.mu.Lock()
	n := len(r.mu.pieces.m)
	r.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d damaged piece entries kept", n)
	}
}

// TestPieceCacheBound: the piece cache holds at most pieceCacheBytes,
// dropping the least recently used first.
func TestPieceCacheBound(t *testing.T) {
	var c pieceCache
	const each = 4136
	n := pieceCacheBytes/each + 10
	for k := range n {
		c.put(pieceKey{seg: 1, off: uint32(k)}, make([]byte, each))
		if k == n-20 { // before the first eviction
			c.copyTo(pieceKey{seg: 1, off: 0}, nil) // used again: kept
		}
	}
	if c.bytes > pieceCacheBytes || c.bytes != len(c.m)*each {
		t.Fatalf("%d bytes in %d entries, bound %d", c.bytes, len(c.m), pieceCacheBytes)
	}
	if !c.has(pieceKey{seg: 1, off: 0}) || c.has(pieceKey{seg: 1, off: 1}) || !c.has(pieceKey{seg: 1, off: uint32(n - 1)}) {
		t.Fatal("the least recently used entries were not the ones dropped")
	}
}
