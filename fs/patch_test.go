package fs

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// patchFS is a testFS whose engine stores partial writes as patches, on
// a store that counts what is sent (a memory store: not a local
// directory, so reads go through the cache-only attempt and the disk
// cache).
func patchFS(t *testing.T) (*testFS, *objstore.Counting) {
	t.Helper()
	cs := objstore.NewCounting(objstore.NewMem())
	return patchFSOn(t, cs), cs
}

// patchFSOn is patchFS on the store s.
func patchFSOn(t *testing.T, s objstore.Store) *testFS {
	t.Helper()
	f := newTestFSOn(t, s)
	f.e.Close(context.Background())
	f.e = nil
	f.openPatches()
	return f
}

// openPatches opens the engine with patches on, on a fresh cache
// directory (everything then comes from the store).
func (f *testFS) openPatches() { f.openOpts(false) }

// baseFile creates name holding data, durable.
func (f *testFS) baseFile(name string, data []byte) uint64 {
	f.t.Helper()
	ino := f.create(name)
	f.write(ino, data, 0)
	f.barrier()
	return ino
}

func (f *testFS) barrier() {
	f.t.Helper()
	if err := f.e.Barrier(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// A 4 KiB write into a 32 KiB extent of a file stores and uploads about
// 4 KiB: a patch, not the extent again. The file reads back the same from
// memory, and from the store alone; fsck finds every patch's frame
// listed, authenticated and counted.
func TestPatchWriteUploadsOnlyItsBytes(t *testing.T) {
	f, cs := patchFS(t)
	ino := f.create("db")
	rng := rand.New(rand.NewPCG(34, 1))
	model := make([]byte, 16*extentSize)
	for i := range model {
		model[i] = byte(rng.Uint32())
	}
	f.write(ino, model, 0)
	f.barrier()

	before := cs.CountsFor(segment.KeyPrefix)
	const writes = 16
	for i := 0; i < writes; i++ {
		off := int64(i)*extentSize + 8192
		p := make([]byte, 4096)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		copy(model[off:], p)
		f.write(ino, p, off)
	}
	f.barrier()
	up := cs.CountsFor(segment.KeyPrefix).Sub(before).BytesUp
	// 16 patches of 4 KiB (4,137 bytes sealed each), a directory and a
	// footer; the whole extents would be 16 × 32 KiB.
	if limit := int64(writes) * 4800; up > limit {
		t.Fatalf("uploaded %d bytes of segments for %d 4 KiB writes, more than %d", up, writes, limit)
	}
	for i := uint64(0); i < writes; i++ {
		x, ok, err := f.e.extentValue(ino, i)
		if err != nil || !ok || len(x.Patches) != 1 || x.Patches[0].At != 8192 || x.Patches[0].End != 12288 {
			t.Fatalf("extent %d: %+v %v %v", i, x, ok, err)
		}
	}
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("the patched file reads back different")
	}
	f.openPatches()
	cold := cs.Snapshot()
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("the patched file reads back different from the store")
	}
	// The pieces missed are fetched a segment at a time: one GET for the
	// bases, one for the patches (coalescePieces).
	if d := cs.Snapshot().Sub(cold); d.Get+d.GetRange > 2 {
		t.Fatalf("a cold read of 16 patched extents took %d GETs and %d ranged GETs", d.Get, d.GetRange)
	}
	for _, off := range []int64{8192 - 100, 8192, 12288 - 1, 3*extentSize + 8000} {
		if got := f.read(ino, 300, off); !bytes.Equal(got, model[off:off+300]) {
			t.Fatalf("read of 300 bytes at %d differs", off)
		}
	}
	f.fsck()
}

// The writer keeps a value at patchLimit patches: the next partial write
// rewrites the extent whole (one frame, every patch debited).
func TestPatchLimitRewritesWhole(t *testing.T) {
	f, _ := patchFS(t)
	model := bytes.Repeat([]byte{7}, 2*extentSize)
	ino := f.baseFile("f", model)
	for i := 0; i <= patchLimit; i++ {
		off := int64(i) * 2048
		p := bytes.Repeat([]byte{byte(i + 10)}, 1000)
		copy(model[off:], p)
		f.write(ino, p, off)
		f.barrier()
		x, _, err := f.e.extentValue(ino, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i < patchLimit && len(x.Patches) != i+1:
			t.Fatalf("after %d writes: %d patches", i+1, len(x.Patches))
		case i == patchLimit && x.Patched():
			t.Fatalf("after %d writes: still %d patches", i+1, len(x.Patches))
		}
	}
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("file differs")
	}
	f.fsck()
}

// Writes that touch a patch in memory widen it; a write apart from it
// fills the rest of the extent in (one whole frame); a patch in flight is
// taken into the next write's buffer. Random partial writes, overwrites,
// truncates, punches and barriers on a few files, read back against a
// model in memory, after reopening from the store, and checked by fsck.
func TestPatchModel(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		// Odd seeds on a local directory: reads of whole frames are
		// decrypted into the reply there, and nothing is cache-only.
		var st objstore.Store = objstore.NewMem()
		if seed%2 == 1 {
			var err error
			if st, err = objstore.NewLocal(t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}
		f := patchFSOn(t, st)
		rng := rand.New(rand.NewPCG(seed, 34))
		inos := []uint64{f.create("a"), f.create("b"), f.create("small")}
		if err := f.setExtentSize(inos[2], "8192"); err != nil {
			t.Fatal(err)
		}
		models := make([][]byte, len(inos))
		ctx := context.Background()
		check := func(when string) {
			for i, ino := range inos {
				if got := f.read(ino, len(models[i])+100, 0); !bytes.Equal(got, models[i]) {
					t.Fatalf("seed %d, %s: file %d differs (%d bytes, want %d)", seed, when, i, len(got), len(models[i]))
				}
				if len(models[i]) == 0 {
					continue
				}
				off := rng.IntN(len(models[i]))
				n := 1 + rng.IntN(3*extentSize)
				vecs, release, k, err := f.e.ReadVec(ctx, ino, make([]byte, n), int64(off))
				if err != nil {
					t.Fatal(err)
				}
				if got := joined(vecs, release); k != len(got) || !bytes.Equal(got, models[i][off:min(off+n, len(models[i]))]) {
					t.Fatalf("seed %d, %s: ReadVec of file %d at %d differs", seed, when, i, off)
				}
			}
		}
		for step := 0; step < 300; step++ {
			i := rng.IntN(len(inos))
			ino, m := inos[i], models[i]
			switch op := rng.IntN(20); {
			case op < 12 || len(m) == 0: // a write, mostly small and inside the file
				n := 1 + rng.IntN(6000)
				if rng.IntN(8) == 0 {
					n = 1 + rng.IntN(3*extentSize)
				}
				off := int64(rng.IntN(len(m) + 1))
				if len(m) < 8*extentSize && rng.IntN(4) == 0 {
					off = int64(len(m)) // grow
				}
				p := make([]byte, n)
				for j := range p {
					p[j] = byte(rng.Uint32()) | 1
				}
				if end := off + int64(n); end > int64(len(m)) {
					m = append(m, make([]byte, end-int64(len(m)))...)
				}
				copy(m[off:], p)
				f.write(ino, p, off)
			case op < 15:
				f.barrier()
			case op < 17: // punch
				off := int64(rng.IntN(len(m)))
				n := int64(1 + rng.IntN(2*extentSize))
				if err := f.e.Punch(ctx, ino, off, n); err != nil {
					t.Fatal(err)
				}
				clear(m[off:min(off+n, int64(len(m)))])
			case op < 18: // truncate
				size := rng.IntN(len(m) + extentSize)
				if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(size)}); err != nil {
					t.Fatal(err)
				}
				if size < len(m) {
					m = m[:size]
				} else {
					m = append(m, make([]byte, size-len(m))...)
				}
			default:
				models[i] = m
				check("mid-run")
			}
			models[i] = m
		}
		check("in memory")
		f.barrier()
		patched := 0
		for _, ino := range inos {
			for idx := uint64(0); idx < 12; idx++ {
				if x, ok, _ := f.e.extentValue(ino, idx); ok && x.Patched() {
					patched++
				}
			}
		}
		if patched == 0 {
			t.Fatalf("seed %d: no extent holds a patch", seed)
		}
		f.openPatches()
		check("from the store")
		f.fsck()
	}
}

// A read of a patched extent that the caches do not hold fetches its
// pieces without the inode lock and reads again; a ReadVec gets the same
// bytes.
func TestPatchedReadVecFromStore(t *testing.T) {
	f, cs := patchFS(t)
	model := bytes.Repeat([]byte("0123456789abcdef"), 4*extentSize/16)
	ino := f.baseFile("v", model)
	p := bytes.Repeat([]byte{0xAB}, 100)
	copy(model[extentSize+50:], p)
	f.write(ino, p, extentSize+50)
	f.barrier()
	f.openPatches()
	before := cs.Snapshot()
	vecs, release, n, err := f.e.ReadVec(context.Background(), ino, make([]byte, len(model)), 0)
	if err != nil || n != len(model) {
		t.Fatal(n, err)
	}
	if got := joined(vecs, release); !bytes.Equal(got, model) {
		t.Fatal("ReadVec of a patched file differs")
	}
	if d := cs.Snapshot().Sub(before); d.Get+d.GetRange == 0 {
		t.Fatal("nothing was read from the store: the test reads nothing cold")
	}
}

// Writes while a flush uploads patches of the same extents: a write that
// touches a patch in flight takes it into its own buffer, one apart from
// it rewrites the extent whole over it, and reads see every write
// meanwhile; a failed commit requeues a patch without losing the write
// made after it.
func TestPatchWhileInFlight(t *testing.T) {
	ctx := context.Background()
	gate := &putGate{Store: objstore.NewMem()}
	k, err := Init(ctx, gate, "password123")
	if err != nil {
		t.Fatal(err)
	}
	f := &testFS{t: t, store: gate, keys: k}
	f.openPatches()
	t.Cleanup(func() { f.e.Close(ctx) })
	model := bytes.Repeat([]byte("abcdefgh"), 4*extentSize/8)
	ino := f.baseFile("f", model)
	put := func(b byte, off, n int64) {
		p := bytes.Repeat([]byte{b}, int(n))
		copy(model[off:], p)
		f.write(ino, p, off)
	}
	check := func(when string) {
		t.Helper()
		if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
			t.Fatalf("%s: file differs", when)
		}
	}
	put(1, 8192, 4096)              // extent 0: [8192, 12288)
	put(2, 2*extentSize+100, 200)   // extent 2: [100, 300)
	put(3, 3*extentSize+1000, 1000) // extent 3
	entered, release := gate.arm()
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open() // a failure below must not leave the upload held
	done := make(chan error, 1)
	go func() { done <- f.e.Seal(ctx) }()
	<-entered // the patches are in flight
	check("patches in flight")
	put(4, 12000, 1000)             // touches extent 0's patch: taken in
	put(5, 2*extentSize+20000, 100) // apart from extent 2's: rewritten whole
	put(6, extentSize+5, 10)        // extent 1: a patch of its own
	check("writes over patches in flight")
	open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check("after the first flush")
	if x, _, _ := f.e.extentValue(ino, 2); !x.Patched() {
		t.Fatalf("extent 2: %+v, want its first patch committed", x)
	}
	failed := false
	f.e.commitFault = func() error {
		if !failed {
			failed = true
			return errFault
		}
		return nil
	}
	if err := f.e.Barrier(ctx); err == nil {
		t.Fatal("barrier succeeded over a failed commit")
	}
	f.e.commitFault = nil
	put(7, extentSize+15, 20) // extent 1's patch was requeued; this one joins it
	check("after a failed commit")
	f.barrier()
	check("after the barrier")
	for idx, want := range map[uint64]bool{0: true, 1: true, 2: false, 3: true} {
		if x, _, _ := f.e.extentValue(ino, idx); x.Patched() != want {
			t.Fatalf("extent %d: %+v, patched %v", idx, x, want)
		}
	}
	f.openPatches()
	check("from the store")
	f.fsck()
}

var errFault = errors.New("injected commit failure")

// A replica reads a file the writer patched, and, past a truncation of
// it, the patched bytes from before it (its shrink snapshot).
func TestReplicaReadsPatches(t *testing.T) {
	ctx := context.Background()
	f, _ := patchFS(t)
	orig := bytes.Repeat([]byte("replica!"), 8*extentSize/8)
	ino := f.durableFile(orig)
	r := f.replica(nil)
	for i := int64(0); i < 8; i++ {
		p := bytes.Repeat([]byte{byte(0xC0 + i)}, 3000)
		copy(orig[i*extentSize+5000:], p)
		f.write(ino, p, i*extentSize+5000)
	}
	f.barrier()
	if x, _, _ := f.e.extentValue(ino, 7); !x.Patched() {
		t.Fatalf("extent 7: %+v, want a patch", x)
	}
	if _, err := r.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(orig))
	if n, err := r.Read(ctx, ino, buf, 0); err != nil || n != len(orig) || !bytes.Equal(buf, orig) {
		t.Fatalf("replica read %d bytes, %v (equal: %v)", n, err, bytes.Equal(buf, orig))
	}
	cut := int64(2*extentSize + 6000) // inside extent 2's patch
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(cut)}); err != nil {
		t.Fatal(err)
	}
	f.barrier()
	if _, err := r.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := r.Read(ctx, ino, buf, 0)
	if err != nil || int64(n) != cut || !bytes.Equal(buf[:n], orig[:cut]) {
		t.Fatalf("after the truncation: %d bytes, %v", n, err)
	}
	extra := r.ReadPastShrink(ctx, ino, buf[n:], int64(n))
	if got := n + extra; got != len(orig) || !bytes.Equal(buf[:got], orig) {
		t.Fatalf("past the shrink: %d more bytes, want the %d patched bytes from before it", extra, len(orig)-n)
	}
}

// An extent that gathers mergePatches patches is merged in the
// background: one whole frame at the next barrier, every patch debited,
// the bytes and the file's times unchanged. A write that comes before the
// merge's buffer wins over it.
func TestPatchMerge(t *testing.T) {
	f, _ := patchFS(t)
	model := bytes.Repeat([]byte("merge me"), 3*extentSize/8)
	ino := f.baseFile("m", model)
	for i := 0; i < mergePatches; i++ {
		off := int64(1000 + 3500*i)
		p := bytes.Repeat([]byte{byte(0x30 + i)}, 2000)
		copy(model[off:], p)
		f.write(ino, p, off)
		f.barrier()
	}
	before, err := f.e.GetAttr(context.Background(), ino)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the merge of extent 0", func() bool {
		f.barrier()
		x, _, _ := f.e.extentValue(ino, 0)
		return !x.Patched()
	})
	after, err := f.e.GetAttr(context.Background(), ino)
	if err != nil {
		t.Fatal(err)
	}
	if after.Mtime != before.Mtime || after.Size != before.Size {
		t.Fatalf("the merge changed the file: %+v, was %+v", after, before)
	}
	f.sameFromStore(ino, model, "merged")
	f.fsck()

	// A merge that finds the extent written since it was queued leaves
	// it to the write.
	for i := 0; i < mergePatches-1; i++ {
		f.write(ino, []byte{1, 2, 3}, extentSize+int64(100*i))
		f.barrier()
	}
	f.write(ino, []byte{9}, extentSize+5000)
	copy(model[extentSize+5000:], []byte{9})
	for i := 0; i < mergePatches-1; i++ {
		copy(model[extentSize+int64(100*i):], []byte{1, 2, 3})
	}
	if err := f.e.mergeExtent(context.Background(), ino, 1, false); err != nil {
		t.Fatal(err)
	}
	f.e.ns.Lock()
	n := f.e.ns.inodes[ino]
	f.e.ns.Unlock()
	n.mu.RLock()
	s := n.spans[1]
	n.mu.RUnlock()
	if !s.patch() {
		t.Fatal("the merge replaced a dirty patch")
	}
	f.barrier()
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("file differs after a merge met a write")
	}
	f.fsck()
}

// A patch of an extent whose value a range tombstone made dead starts a
// value of its own (zeroes around it) and debits the dead pieces; the
// cleaner then keeps it.
func TestPatchOverRangeTombstone(t *testing.T) {
	ctx := context.Background()
	f, _ := patchFS(t)
	ino := f.create("big")
	const extents = InlineDropExtents + 50
	for i := int64(0); i < extents; i++ {
		f.write(ino, []byte{0xEE}, i*extentSize)
	}
	f.write(ino, []byte{0xEE}, extents*extentSize-1)
	f.barrier()
	f.write(ino, bytes.Repeat([]byte{0xDD}, 100), 5*extentSize+1000)
	f.barrier()
	if x, _, _ := f.e.extentValue(ino, 5); !x.Patched() {
		t.Fatalf("extent 5: %+v, want a patch", x)
	}
	for _, size := range []uint64{0, extents * extentSize} {
		if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: size}); err != nil {
			t.Fatal(err)
		}
	}
	if !f.e.ranges.has(ino) {
		t.Fatal("no range tombstone")
	}
	p := bytes.Repeat([]byte{0xAA}, 50)
	f.write(ino, p, 5*extentSize+2000)
	f.barrier()
	want := make([]byte, extentSize)
	copy(want[2000:], p)
	check := func(when string) {
		t.Helper()
		if got := f.read(ino, extentSize, 5*extentSize); !bytes.Equal(got, want) {
			t.Fatalf("%s: extent 5 differs", when)
		}
		if got := f.read(ino, 1, 6*extentSize); got[0] != 0 {
			t.Fatalf("%s: truncated bytes show", when)
		}
	}
	check("before the cleaner")
	x, _, _ := f.e.extentValue(ino, 5)
	if x.HasBase() || len(x.Patches) != 1 || x.Patches[0].At != 2000 {
		t.Fatalf("extent 5: %+v, want the new patch alone", x)
	}
	f.fsck()
	for f.e.ranges.has(ino) {
		if _, _, _, err := f.e.CleanTombstones(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("after the cleaner")
	f.barrier()
	f.openPatches()
	check("from the store")
	f.fsck()
}
