package fs

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// A filesystem whose descriptor format predates patches (format 3: keys
// without Patches) never gets a patched value, even with the switch on:
// a partial write rewrites its extent whole, as before patches, and no
// merger runs. The same write on the current format is a patch.
func TestPatchesOnlyOnFormat4(t *testing.T) {
	f, _ := patchFS(t)
	model := bytes.Repeat([]byte{3}, 2*extentSize)
	ino := f.baseFile("f", model)
	f.write(ino, []byte("patched"), 100)
	f.barrier()
	if x, _, err := f.e.extentValue(ino, 0); err != nil || len(x.Patches) != 1 {
		t.Fatalf("format 4: extent 0 is %+v, %v; want one patch", x, err)
	}

	if err := f.e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	old := *f.keys
	old.Patches = false
	e, err := Open(context.Background(), Options{Store: f.store, Keys: &old, CacheDir: t.TempDir(), SegmentTarget: 1 << 20, patchWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	if e.opts.patchWrites || e.mergeW.Load() != nil {
		t.Fatal("patches on, or a merger started, on a filesystem of format 3")
	}
	copy(model[100:], "patched")
	copy(model[extentSize+500:], "whole again")
	f.write(ino, []byte("whole again"), extentSize+500)
	f.barrier()
	x, _, err := f.e.extentValue(ino, 1)
	if err != nil || x.Patched() || x.Base.PlainLen != extentSize {
		t.Fatalf("format 3: extent 1 is %+v, %v; want one whole frame", x, err)
	}
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("file differs")
	}
}

// fsck reports a patched value in a filesystem whose format predates
// patches (no build of that format wrote it), and accepts it at format 4.
func TestFsckPatchOnOldFormat(t *testing.T) {
	f, _ := patchFS(t)
	ino := f.baseFile("f", bytes.Repeat([]byte{5}, extentSize))
	f.write(ino, []byte("patch"), 10)
	f.barrier()
	f.fsck()
	old := *f.keys
	old.Patches = false
	r, err := Fsck(context.Background(), f.store, &old, FsckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || !strings.Contains(r.String(), "predates patches") {
		t.Fatalf("fsck at format 3 of a patched value:\n%s", r)
	}
}

// The patch and merge counters (docs/METRICS.md, "Patched extents"):
// every committed patch and its bytes are counted, a merge is counted
// when the merger makes the extent a whole buffer, and the queue is empty
// once the merges are done.
func TestPatchStats(t *testing.T) {
	f, _ := patchFS(t)
	ino := f.baseFile("s", bytes.Repeat([]byte{1}, 9*extentSize))
	if err := f.e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := NewStats()
	e, err := Open(context.Background(), Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20, patchWrites: true, Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	const exts = 8
	for round := 0; round < mergePatches; round++ {
		for i := int64(0); i < exts; i++ {
			f.write(ino, bytes.Repeat([]byte{byte(round + 2)}, 3000), i*extentSize+int64(round)*4000)
		}
		f.barrier()
		if round == 0 {
			if s := st.Snapshot(); s.PatchWrites != exts || s.PatchBytes != exts*3000 || s.Merges != 0 {
				t.Fatalf("after one round: %d patches of %d bytes, %d merges; want %d of %d, none", s.PatchWrites, s.PatchBytes, s.Merges, exts, exts*3000)
			}
		}
	}
	if s := st.Snapshot(); s.PatchWrites != exts*mergePatches || s.PatchBytes != exts*mergePatches*3000 {
		t.Fatalf("%d patches of %d bytes, want %d of %d", s.PatchWrites, s.PatchBytes, exts*mergePatches, exts*mergePatches*3000)
	}
	testutil.Eventually(t, 10*time.Second, "the merges of 8 extents", func() bool {
		return st.Snapshot().Merges == exts && f.e.MergeQueue() == 0
	})
	f.barrier()
	for i := uint64(0); i < exts; i++ {
		if x, _, err := f.e.extentValue(ino, i); err != nil || x.Patched() {
			t.Fatalf("extent %d after its merge: %+v, %v", i, x, err)
		}
	}
	if s := st.Snapshot(); s.PatchWrites != exts*mergePatches {
		t.Fatalf("the merges' flush counted as patches: %d", s.PatchWrites)
	}
}

// A punch of part of a committed extent (the path of NBD TRIM and
// WRITE_ZEROES too) is a patch of zeroes without a frame: nothing is read
// or uploaded, the extent reads zeroes there; punches that together cover
// the base drop it and leave a hole. Reopened from the store, the file
// reads the same, and fsck finds the counters exact.
func TestPunchIsZeroPatch(t *testing.T) {
	f, cs := patchFS(t)
	model := testutil.RandBytes(34, 4*extentSize)
	ino := f.baseFile("p", model)
	ctx := context.Background()
	before := cs.Snapshot()
	punch := func(off, n int64) {
		t.Helper()
		if err := f.e.Punch(ctx, ino, off, n); err != nil {
			t.Fatal(err)
		}
		clear(model[off : off+n])
	}
	punch(1000, 3000)
	punch(extentSize+100, 200)
	f.barrier()
	if d := cs.Snapshot().Sub(before); d.Get+d.GetRange > 0 || d.Put > 1 {
		t.Fatalf("two partial punches: %d GETs, %d ranged GETs, %d PUTs; want no GET and no segment", d.Get, d.GetRange, d.Put)
	}
	x, ok, err := f.e.extentValue(ino, 0)
	if err != nil || !ok || len(x.Patches) != 1 || x.Patches[0].HasFrame() || x.Patches[0].At != 1000 || x.Patches[0].End != 4000 {
		t.Fatalf("extent 0 after a punch: %+v, %v, %v", x, ok, err)
	}
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("punched file differs")
	}
	// The rest of extent 2, in two punches: no frame is left, so no value.
	punch(2*extentSize, 20000)
	punch(2*extentSize+20000, extentSize-20000-1)
	punch(3*extentSize-1, 1)
	f.barrier()
	if x, ok, err := f.e.extentValue(ino, 2); err != nil || ok {
		t.Fatalf("extent 2 zeroed whole by punches: %+v, %v, %v; want no value", x, ok, err)
	}
	f.openPatches()
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("punched file differs from the store")
	}
	f.fsck()
}

// A write of zeroes into part of a committed extent (NBD WRITE_ZEROES
// with NO_HOLE writes them so) is a patch of zeroes without a frame, as a
// punch's: no segment is uploaded for it, it drops the data patches it
// covers, and writes of zeroes that together cover the extent's frames
// leave no value (a hole), the counters exact. A patch that holds data
// besides zeroes keeps its frame.
func TestZeroWriteIsZeroPatch(t *testing.T) {
	f, cs := patchFS(t)
	model := testutil.RandBytes(35, 3*extentSize)
	ino := f.baseFile("z", model)
	write := func(b []byte, off int64) {
		t.Helper()
		f.write(ino, b, off)
		copy(model[off:], b)
	}
	zero := func(off, n int64) { t.Helper(); write(make([]byte, n), off) }

	before := cs.Snapshot()
	zero(1000, 3000)
	f.barrier()
	if d := cs.Snapshot().Sub(before); d.Get+d.GetRange > 0 || d.Put > 1 {
		t.Fatalf("a write of zeroes: %d GETs, %d ranged GETs, %d PUTs; want no GET and no segment", d.Get, d.GetRange, d.Put)
	}
	x, ok, err := f.e.extentValue(ino, 0)
	if err != nil || !ok || !x.HasBase() || len(x.Patches) != 1 || x.Patches[0].HasFrame() || x.Patches[0].At != 1000 || x.Patches[0].End != 4000 {
		t.Fatalf("extent 0 after a write of zeroes: %+v, %v, %v; want the base and one zero patch", x, ok, err)
	}

	// Extent 1: a data patch, then zeroes over it and the rest of the
	// extent in pieces: the data patch goes with the first, the base
	// with the last, and no value is left.
	write(bytes.Repeat([]byte{7}, 500), extentSize+100)
	f.barrier()
	if x, _, _ := f.e.extentValue(ino, 1); len(x.Patches) != 1 || !x.Patches[0].HasFrame() {
		t.Fatalf("extent 1 after a data patch: %+v", x)
	}
	zero(extentSize, 1000)
	f.barrier()
	if x, _, _ := f.e.extentValue(ino, 1); !x.HasBase() || len(x.Patches) != 1 || x.Patches[0].HasFrame() {
		t.Fatalf("extent 1 after zeroes over its data patch: %+v; want the base and one zero patch", x)
	}
	zero(extentSize+1000, 20000)
	f.barrier()
	zero(extentSize+21000, extentSize-21000)
	f.barrier()
	if x, ok, err := f.e.extentValue(ino, 1); err != nil || ok {
		t.Fatalf("extent 1 zeroed whole by writes of zeroes: %+v, %v, %v; want no value", x, ok, err)
	}

	// Extent 2: zeroes and data in one buffer are a patch with a frame.
	write(append(make([]byte, 300), 9), 2*extentSize+50)
	f.barrier()
	if x, _, _ := f.e.extentValue(ino, 2); len(x.Patches) != 1 || !x.Patches[0].HasFrame() {
		t.Fatalf("extent 2 after zeroes and data: %+v; want a patch with a frame", x)
	}
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("file differs")
	}
	f.fsck()
	f.openPatches()
	if got := f.read(ino, len(model), 0); !bytes.Equal(got, model) {
		t.Fatal("file differs from the store")
	}
	f.fsck()
}
