package segread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// piecedFixture returns a fixture of four frames and the index of a
// pieced one (odd frames are random, and so pieced).
func piecedFixture(t *testing.T) (*fixture, int) {
	t.Helper()
	f := newFixture(t, 4)
	if p := f.ps[1]; !p.IsPieced() {
		t.Fatalf("frame 1 is not pieced: %+v", p)
	}
	return f, 1
}

// ReadPartTo writes exactly [from, to) into its buffer on every path: the
// pieces opened straight into it, pieces opened elsewhere and copied (a
// range that does not start or end at a piece), a cached frame, a whole
// frame, and the disk cache's pieces; and it leaves the bytes around
// the buffer alone.
func TestReadPartTo(t *testing.T) {
	ctx := context.Background()
	f, i := piecedFixture(t)
	p, plain := f.ps[i], f.plains[i]
	n := int(p.PlainLen)
	ranges := [][2]int{{0, segment.PieceSize}, {segment.PieceSize, 3 * segment.PieceSize}, {5000, 9000}, {1, 2}, {(n - 1) / segment.PieceSize * segment.PieceSize, n}, {n - 3, n}}
	check := func(name string, r *Reader, id segment.FrameID, p segment.Pointer, plain []byte, rg [2]int) {
		t.Helper()
		buf := bytes.Repeat([]byte{0xa5}, rg[1]-rg[0]+2)
		dst := buf[1 : len(buf)-1]
		if err := partTo(r, ctx, id, p, rg[0], rg[1], dst); err != nil {
			t.Fatalf("%s: ReadPartTo [%d,%d): %v", name, rg[0], rg[1], err)
		}
		if !bytes.Equal(dst, plain[rg[0]:rg[1]]) || buf[0] != 0xa5 || buf[len(buf)-1] != 0xa5 {
			t.Fatalf("%s: ReadPartTo [%d,%d) wrote the wrong bytes", name, rg[0], rg[1])
		}
	}
	r := f.reader(t, ReaderOptions{})
	for _, rg := range ranges {
		check("store", r, f.ids[i], p, plain, rg)
	}
	if err := partTo(r, ctx, f.ids[i], p, 0, 10, make([]byte, 11)); err == nil {
		t.Fatal("ReadPartTo with a buffer of the wrong size succeeded")
	}
	check("whole frame", r, f.ids[0], f.ps[0], f.plains[0], [2]int{100, 200})
	f.readAll(t, r, i)
	f.cs.reset()
	for _, rg := range ranges {
		check("memory cache", r, f.ids[i], p, plain, rg)
	}
	if f.cs.total() != 0 {
		t.Fatalf("%d store requests for a cached frame", f.cs.total())
	}
	// A piece that fails authentication leaves an error, not bytes.
	bad := f.ids[i]
	bad.Gen++
	if err := partTo(f.reader(t, ReaderOptions{MemoryBytes: -1}), ctx, bad, p, 0, segment.PieceSize, make([]byte, segment.PieceSize)); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("ReadPartTo for another id: %v, want ErrCorrupt", err)
	}

	dir := t.TempDir()
	rd := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
	check("fetched whole", rd, f.ids[i], p, plain, ranges[1])
	rd.disk.sync()
	rd.Close()
	rd = f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
	f.cs.reset()
	for _, rg := range ranges {
		check("disk cache", rd, f.ids[i], p, plain, rg)
	}
	if f.cs.total() != 0 {
		t.Fatalf("%d store requests for pieces the disk cache holds", f.cs.total())
	}
}

// ReadPart reads only the pieces it needs: from the store when there is
// no disk cache, from the disk cache when it holds the frame (no store
// request), and a whole frame where that is the better read.
func TestReadPartReadsOnlyItsPieces(t *testing.T) {
	ctx := context.Background()
	f, i := piecedFixture(t)
	p, plain := f.ps[i], f.plains[i]
	from, to := 5000, 9000 // pieces 1 and 2
	r := f.reader(t, ReaderOptions{})
	got, err := partOf(r, ctx, f.ids[i], p, from, to)
	if err != nil || !bytes.Equal(got, plain[from:to]) {
		t.Fatalf("ReadPart: %v", err)
	}
	if g := f.cs.count("getrange"); g != 1 || f.ranges0() != [2]int64{int64(p.Offset) + segment.PieceSize + segment.PieceOverhead, 2 * (segment.PieceSize + segment.PieceOverhead)} {
		t.Fatalf("%d GETs, first %v: want one of pieces 1-2", g, f.ranges0())
	}
	// Not cached: the next part is read again; after a whole read, none.
	if _, err := partOf(r, ctx, f.ids[i], p, 0, 10); err != nil || f.cs.count("getrange") != 2 {
		t.Fatalf("second ReadPart: %v, %d GETs", err, f.cs.count("getrange"))
	}
	f.readAll(t, r, i)
	f.cs.reset()
	if got, err := partOf(r, ctx, f.ids[i], p, from, to); err != nil || !bytes.Equal(got, plain[from:to]) || f.cs.total() != 0 {
		t.Fatalf("ReadPart of a cached frame: %v, %d requests", err, f.cs.total())
	}
	// A whole frame (not pieced) is read whole.
	f.cs.reset()
	if got, err := partOf(r, ctx, f.ids[0], f.ps[0], 100, 200); err != nil || !bytes.Equal(got, f.plains[0][100:200]) {
		t.Fatalf("ReadPart of a whole frame: %v", err)
	}
	if f.ranges0()[1] != int64(f.ps[0].Length) {
		t.Fatalf("whole frame read as %v", f.ranges0())
	}
	// Wrong ranges are refused.
	for _, rg := range [][2]int{{-1, 5}, {5, 5}, {0, int(p.PlainLen) + 1}} {
		if _, err := partOf(r, ctx, f.ids[i], p, rg[0], rg[1]); err == nil {
			t.Fatalf("ReadPart [%d,%d) succeeded", rg[0], rg[1])
		}
	}

	// Behind a disk cache: a frame it lacks is fetched whole and cached.
	dir := t.TempDir()
	f.cs.reset()
	rd := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
	if got, err := partOf(rd, ctx, f.ids[i], p, from, to); err != nil || !bytes.Equal(got, plain[from:to]) {
		t.Fatalf("ReadPart behind a disk cache: %v", err)
	}
	if f.ranges0()[1] != int64(p.Length) {
		t.Fatalf("a frame missing from the disk cache read as %v, want whole", f.ranges0())
	}
	rd.disk.sync()
	rd.Close()
	// The next reader finds it there and reads its pieces from the disk.
	f.cs.reset()
	rd = f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
	for _, rg := range [][2]int{{from, to}, {0, 1}, {int(p.PlainLen) - 3, int(p.PlainLen)}} {
		if got, err := partOf(rd, ctx, f.ids[i], p, rg[0], rg[1]); err != nil || !bytes.Equal(got, plain[rg[0]:rg[1]]) {
			t.Fatalf("ReadPart [%d,%d) from the disk cache: %v", rg[0], rg[1], err)
		}
	}
	if st := rd.Stats(); f.cs.total() != 0 || st.DiskHits != 3 {
		t.Fatalf("disk-cached pieces: %d store requests, %+v", f.cs.total(), st)
	}
	// A damaged piece there is dropped and the frame fetched again.
	rd.Close()
	path := filepath.Join(dir, "17", fmt.Sprintf("%016x", f.segID))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[int(p.Offset)+segment.PieceSize+segment.PieceOverhead+100] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rd = f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
	if got, err := partOf(rd, ctx, f.ids[i], p, from, to); err != nil || !bytes.Equal(got, plain[from:to]) {
		t.Fatalf("ReadPart over a damaged disk-cache piece: %v", err)
	}
	if st := rd.Stats(); st.DiskCorrupt != 1 || f.cs.count("getrange") != 1 || st.Corrupt != 0 {
		t.Fatalf("damaged piece: %d GETs, %+v", f.cs.count("getrange"), st)
	}
}

// A damaged piece in the store is corruption, reported as such.
func TestReadPartStoreCorruption(t *testing.T) {
	f := newFixture(t, 2)
	p := f.ps[1]
	obj, err := f.cs.Store.Get(context.Background(), segment.Key(f.segID))
	if err != nil {
		t.Fatal(err)
	}
	obj[int(p.Offset)+10] ^= 1 // inside piece 0
	if _, err := f.cs.Store.Put(context.Background(), segment.Key(f.segID), obj, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r := f.reader(t, ReaderOptions{})
	if _, err := partOf(r, context.Background(), f.ids[1], p, 0, 100); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("damaged piece 0: %v, want ErrCorrupt", err)
	}
	if got, err := partOf(r, context.Background(), f.ids[1], p, segment.PieceSize, segment.PieceSize+100); err != nil || !bytes.Equal(got, f.plains[1][segment.PieceSize:segment.PieceSize+100]) {
		t.Fatalf("undamaged piece 1: %v", err)
	}
	if r.Stats().Corrupt != 1 {
		t.Fatalf("stats %+v", r.Stats())
	}
}

// A range of a pieced frame read into the request's buffer from the disk
// cache, the path of a cold random read behind it, costs no allocation
// for being a Request: the Request stays on the caller's stack and the
// pieces open straight into Buf, as a call of readPart does.
func TestRequestAddsNoAllocation(t *testing.T) {
	ctx := context.Background()
	f, i := piecedFixture(t)
	p := f.ps[i]
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: t.TempDir()})
	f.readAll(t, r, i) // into the disk cache
	buf := make([]byte, segment.PieceSize)
	read := func() {
		if _, err := r.Read(ctx, &Request{ID: f.ids[i], Ptr: p, From: segment.PieceSize, To: 2 * segment.PieceSize, Buf: buf}); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if !bytes.Equal(buf, f.plains[i][segment.PieceSize:2*segment.PieceSize]) {
		t.Fatal("wrong bytes")
	}
	direct := testing.AllocsPerRun(50, func() {
		if _, err := r.readPart(ctx, f.ids[i], p, segment.PieceSize, 2*segment.PieceSize, buf); err != nil {
			t.Fatal(err)
		}
	})
	if n := testing.AllocsPerRun(50, read); n > direct {
		t.Fatalf("%v allocations per Request, %v per readPart", n, direct)
	}
}
