package fs

import (
	"bytes"
	"context"
	"testing"
	"unsafe"

	"ebbfs.dev/ebbfs/objstore"
)

// TestReadVecMatchesRead: a read collected as slices (committed extents on
// loan from the segment reader, the rest in the caller's buffer) holds the
// same bytes as Read, across holes, dirty extents, a short last extent and
// reads that start and end inside extents, with a cold cache (the first
// attempt misses and is dropped) and a warm one.
func TestReadVecMatchesRead(t *testing.T) {
	t.Run("mem", func(t *testing.T) { testReadVec(t, newTestFS(t)) })
	t.Run("local", func(t *testing.T) {
		// Sequential reads of a local store are decrypted straight into
		// the buffer (segment.ReadRunTo).
		local, err := objstore.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		testReadVec(t, newTestFSOn(t, local))
	})
}

func testReadVec(t *testing.T, f *testFS) {
	ctx := context.Background()
	ino := f.create("v")
	size := 12*extentSize - 100
	want := randBytes(9, size)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Punch(ctx, ino, 3*extentSize, 2*extentSize); err != nil {
		t.Fatal(err)
	}
	clear(want[3*extentSize : 5*extentSize])
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	dirty := randBytes(10, 500)
	f.write(ino, dirty, 7*extentSize+300) // stays dirty: no barrier
	copy(want[7*extentSize+300:], dirty)

	inside := func(b, p []byte) bool {
		a, s := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(p)))
		return a >= s && a < s+uintptr(len(p))
	}
	lentSeen := false
	ranges := [][2]int{{0, size}, {100, 3 * extentSize}, {2*extentSize + 5, 4 * extentSize}, {6 * extentSize, 3*extentSize + 17}, {11 * extentSize, extentSize}, {size - 10, 100}, {size, 10}}
	// A sequential pass, each read starting where the last one ended,
	// some inside extents.
	for at, k := 0, 0; at < size; k++ {
		n := []int{2 * extentSize, 3*extentSize + 100, 5000, 4 * extentSize}[k%4]
		ranges = append(ranges, [2]int{at, n})
		at += n
	}
	for round := range 2 { // cold, then warm
		for _, r := range ranges {
			off, n := r[0], r[1]
			p := make([]byte, n)
			vecs, release, got, err := f.e.ReadVec(ctx, ino, p, int64(off))
			if err != nil {
				t.Fatalf("round %d, read [%d,+%d): %v", round, off, n, err)
			}
			exp := want[min(off, size):min(off+n, size)]
			if got != len(exp) {
				t.Fatalf("round %d, read [%d,+%d): %d bytes, want %d", round, off, n, got, len(exp))
			}
			var joined []byte
			for _, v := range vecs {
				joined = append(joined, v...)
				if len(v) > 0 && !inside(v, p) {
					lentSeen = true
					if release == nil {
						t.Fatalf("round %d, read [%d,+%d): bytes outside the buffer with nothing to release", round, off, n)
					}
				}
			}
			if !bytes.Equal(joined, exp) {
				first := 0
				for first < min(len(joined), len(exp)) && joined[first] == exp[first] {
					first++
				}
				t.Fatalf("round %d, read [%d,+%d): slices (%d bytes in %d) differ from the file at %d", round, off, n, len(joined), len(vecs), first)
			}
			if release != nil {
				release()
			}
			if plain := f.read(ino, n, int64(off)); !bytes.Equal(plain, exp) {
				t.Fatalf("round %d, Read [%d,+%d) differs from the file", round, off, n)
			}
		}
	}
	if _, isMem := f.store.(*objstore.Mem); isMem && !lentSeen {
		t.Fatal("no committed bytes were lent: every read was copied")
	}
	if !objstore.IsLocal(f.store) {
		return
	}
	// A sequential read of a local store from a cold start decrypts into
	// the buffer and leaves the memory cache as it was: empty.
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	p := make([]byte, size)
	vecs, release, got, err := f.e.ReadVec(ctx, ino, p, 0)
	if err != nil || got != size {
		t.Fatalf("cold sequential read: %d bytes, %v", got, err)
	}
	var joined []byte
	for _, v := range vecs {
		joined = append(joined, v...)
	}
	if release != nil {
		release()
	}
	st := f.e.rd.Stats()
	if !bytes.Equal(joined, want) || !bytes.Equal(p, want) {
		t.Fatal("cold sequential read differs from the file")
	}
	if st.MemEntries != 0 || st.Misses == 0 {
		t.Fatalf("cold sequential read of a local store: %d frames cached, %d read (want none cached)", st.MemEntries, st.Misses)
	}
}

// TestLocalReadAheadServesStream: in a cold sequential read of a local
// store, the read-ahead after the first read reads the sealed bytes that
// the reads past readAheadSkip decrypt, whether or not they start and end
// on extents: those reads send the store nothing, and no byte is read
// twice.
func TestLocalReadAheadServesStream(t *testing.T) {
	ctx := context.Background()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := objstore.NewCounting(local)
	f := newTestFSOn(t, c)
	ino := f.create("s")
	const size, chunk = 8 << 20, 1 << 20
	want := randBytes(3, size)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	c.Reset()
	n, err := f.e.acquire(ino) // held, as an open file holds it
	if err != nil {
		t.Fatal(err)
	}
	defer f.e.release(n)
	if got := f.read(ino, chunk, 0); !bytes.Equal(got, want[:chunk]) {
		t.Fatal("first read differs")
	}
	ra := n.ra.Load()
	if ra == nil {
		t.Fatal("a sequential read from the start read nothing ahead")
	}
	<-ra.done
	// The kernel has the next request under way when the read-ahead
	// starts: that one reads for itself.
	if got := f.read(ino, readAheadSkip, chunk); !bytes.Equal(got, want[chunk:chunk+readAheadSkip]) {
		t.Fatal("second read differs")
	}
	before := c.CountsFor("segments/")
	for off, k := chunk+readAheadSkip, 0; off < size; k++ {
		m := []int{chunk + 4097, chunk - 3000, 5000, 2 * extentSize}[k%4]
		got := f.read(ino, m, int64(off))
		if !bytes.Equal(got, want[off:min(off+m, size)]) {
			t.Fatalf("read [%d,+%d) differs", off, m)
		}
		off += len(got)
	}
	after := c.CountsFor("segments/")
	if after.GetRange != before.GetRange || after.Get != before.Get {
		t.Fatalf("reads of what was read ahead sent %d requests to the store, want none", after.GetRange-before.GetRange+after.Get-before.Get)
	}
	if after.BytesDown > size*21/20 {
		t.Fatalf("%d bytes read from the store for a file of %d: some were read twice", after.BytesDown, size)
	}
}
