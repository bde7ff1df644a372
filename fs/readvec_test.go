package fs

import (
	"bytes"
	"context"
	"testing"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/testutil"
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
	want := testutil.RandBytes(9, size)
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
	dirty := testutil.RandBytes(10, 500)
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
	if _, isMem := f.store.(*objstore.Mem); isMem {
		if !lentSeen {
			t.Fatal("no committed bytes were lent: every read was copied")
		}
		// Behind a remote store, a stream of whole extents that the disk
		// cache does not hold (a new cache) is fetched into the memory
		// cache and lent from there, not copied into the buffer.
		f.reopen()
		p := make([]byte, 3*extentSize)
		vecs, release, got, err := f.e.ReadVec(ctx, ino, p, 0)
		if err != nil || got != len(p) {
			t.Fatalf("stream of a new cache: %d bytes, %v", got, err)
		}
		var joined []byte
		lent := 0
		for _, v := range vecs {
			joined = append(joined, v...)
			if len(v) > 0 && !inside(v, p) {
				lent += len(v)
			}
		}
		if release != nil {
			release()
		}
		if !bytes.Equal(joined, want[:len(p)]) || lent != len(p) {
			t.Fatalf("stream of a new cache: right bytes %v, %d of %d lent", bytes.Equal(joined, want[:len(p)]), lent, len(p))
		}
	}
	if !objstore.IsLocal(f.store) {
		return
	}
	// A sequential read of a local store from a cold start decrypts into
	// the buffer and leaves the memory cache as it was: empty. (Patched
	// extents are read piece by piece through the cache: fold them
	// first, as the idle fold does once writes pause.)
	f.foldAll()
	f.reopen()
	p := make([]byte, size)
	vecs, release, got, err := f.e.ReadVec(ctx, ino, p, 0)
	if err != nil || got != size {
		t.Fatalf("cold sequential read: %d bytes, %v", got, err)
	}
	all := joined(vecs, release)
	st := f.e.rd.Stats()
	if !bytes.Equal(all, want) || !bytes.Equal(p, want) {
		t.Fatal("cold sequential read differs from the file")
	}
	if st.MemEntries != 0 || st.Misses == 0 {
		t.Fatalf("cold sequential read of a local store: %d frames cached, %d read (want none cached)", st.MemEntries, st.Misses)
	}
}

// TestLocalReadAheadServesStream: in a cold sequential read of a local
// store, read-ahead reads the sealed bytes that the reads past the first
// readAheadSkip decrypt, whether or not they start and end on extents (so
// that successive read-aheads share an extent at their edge): every frame
// is read from the store once, and no span is left waiting at the end.
func TestLocalReadAheadServesStream(t *testing.T) {
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := objstore.NewCounting(local)
	f := newTestFSOn(t, c)
	ino := f.create("s")
	const size, chunk = 24 << 20, 1 << 20
	want := testutil.RandBytes(3, size)
	n := f.coldFile(ino, want, c)
	// Each read waits for the read-ahead it started, so that the reads
	// never overtake it (the kernel's reads do, at times: they then
	// read for themselves).
	read := func(off, m int) int {
		t.Helper()
		got := f.read(ino, m, int64(off))
		if !bytes.Equal(got, want[off:min(off+m, size)]) {
			t.Fatalf("read [%d,+%d) differs", off, m)
		}
		if ra := n.ra.Load(); ra != nil {
			<-ra.done
		}
		return len(got)
	}
	read(0, chunk)
	if n.ra.Load() == nil {
		t.Fatal("a sequential read from the start read nothing ahead")
	}
	// The kernel has the next request under way when the read-ahead
	// starts: that one reads for itself.
	read(chunk, readAheadSkip)
	for off, k := chunk+readAheadSkip, 0; off < size; k++ {
		off += read(off, []int{chunk + 4097, chunk - 3000, 5000, 2 * extentSize}[k%4])
	}
	if got, sealed := c.CountsFor("segments/").BytesDown, f.sealedBytes(ino, size); got != sealed {
		t.Fatalf("%d bytes read from the store for %d bytes of frames: some were read twice, or not at all", got, sealed)
	}
	st := f.e.rd.Stats()
	if st.AheadSpans != 0 {
		t.Fatalf("%d spans (%d bytes) left waiting after the whole file was read", st.AheadSpans, st.AheadBytes)
	}
	if ahead := (size - chunk - readAheadSkip) / extentSize; st.AheadHits < uint64(ahead) {
		t.Fatalf("%d frames read from spans read ahead, want the %d past the first reads", st.AheadHits, ahead)
	}
}
