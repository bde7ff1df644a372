package fs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/segment"
)

// Writes into the extent that holds the end of the file are patches too:
// one inside the file, appends that extend it (each after a barrier, as a
// log writes and fsyncs), a truncate into that extent (a zero patch in
// the transaction of the size) and a write past the new end after it;
// appends to a patch still in memory do not flush it. The bytes read back
// from memory and from the store alone, every byte past the end reads as
// zeroes once the file grows over it again, and fsck is exact.
func TestPatchAtEndOfFile(t *testing.T) {
	f, cs := patchFS(t)
	ctx := context.Background()
	model := testutil.RandBytes(34, 2*extentSize+10000) // extent 2 holds the end
	ino := f.baseFile("log", model)
	value := func() segment.Extent {
		t.Helper()
		x, ok, err := f.e.extentValue(ino, 2)
		if err != nil || !ok {
			t.Fatalf("extent 2: %v %v", ok, err)
		}
		return x
	}
	write := func(p []byte, off int64) {
		t.Helper()
		if end := off + int64(len(p)); end > int64(len(model)) {
			model = append(model, make([]byte, end-int64(len(model)))...)
		}
		copy(model[off:], p)
		f.write(ino, p, off)
	}
	check := func(when string) {
		t.Helper()
		if got := f.read(ino, len(model)+100, 0); !bytes.Equal(got, model) {
			t.Fatalf("%s: the file differs (%d bytes, want %d)", when, len(got), len(model))
		}
	}
	before := cs.CountsFor(segment.KeyPrefix)
	write(bytes.Repeat([]byte{1}, 3000), 2*extentSize+2000) // inside the file
	f.barrier()
	for i := range 3 { // appends, each made durable
		write(bytes.Repeat([]byte{byte(2 + i)}, 2000), int64(len(model)))
		f.barrier()
	}
	if up := cs.CountsFor(segment.KeyPrefix).Sub(before).BytesUp; up > 4*4000 {
		t.Fatalf("uploaded %d bytes for 4 writes of 2-3 KB into the last extent", up)
	}
	if x := value(); len(x.Patches) != 4 {
		t.Fatalf("extent 2: %+v, want its base and 4 patches", x)
	}
	check("after appends")

	// Appends to a patch in memory join it: one patch at the barrier.
	flushes := cs.CountsFor(segment.KeyPrefix).Put
	for i := range 3 {
		write(bytes.Repeat([]byte{byte(7 + i)}, 500), int64(len(model)))
	}
	if n := cs.CountsFor(segment.KeyPrefix).Put; n != flushes {
		t.Fatalf("appends to a patch in memory sent %d segments", n-flushes)
	}
	f.barrier()
	check("after appends in memory")

	// A truncate into the extent: a zero patch, nothing read or sent.
	cold := cs.Snapshot()
	cut := int64(2*extentSize + 9000)
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(cut)}); err != nil {
		t.Fatal(err)
	}
	model = model[:cut]
	if d := cs.Snapshot().Sub(cold); d.Put != 0 || d.Get+d.GetRange != 0 {
		t.Fatalf("a truncate into a patched extent sent %d PUTs and %d GETs", d.Put, d.Get+d.GetRange)
	}
	if x := value(); x.Patches[len(x.Patches)-1].Ptr != (segment.Pointer{}) || x.Patches[len(x.Patches)-1].End != extentSize {
		t.Fatalf("extent 2 after the truncate: %+v, want a zero patch to its end", x)
	}
	check("after the truncate")
	// Growing again: the bytes past the old end read as zeroes.
	write([]byte{42}, cut+5000)
	check("after a write past the end")
	f.barrier()
	f.openPatches()
	check("from the store")
	f.fsck()
}

// Extents left patched below the merge bounds are merged once writes
// stop for mergeIdle, and only then: one whole frame each, every piece
// debited, the bytes the same.
func TestIdleFold(t *testing.T) {
	f, _ := patchFS(t)
	clk := clock.NewFake(time.Now())
	f.e.Close(context.Background())
	e, err := Open(context.Background(), Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20, patchWrites: true, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	const exts = 6
	model := testutil.RandBytes(35, exts*extentSize)
	ino := f.baseFile("db", model)
	for i := int64(0); i < exts; i++ {
		p := testutil.RandBytes(i, 4096)
		copy(model[i*extentSize+4096:], p)
		f.write(ino, p, i*extentSize+4096)
	}
	f.barrier()
	patched := func() (n int) {
		for i := uint64(0); i < exts; i++ {
			if x, _, _ := f.e.extentValue(ino, i); x.Patched() {
				n++
			}
		}
		return n
	}
	if n := patched(); n != exts {
		t.Fatalf("%d extents patched, want %d", n, exts)
	}
	clk.Advance(mergeIdle / 2)
	f.write(ino, model[:1], 0) // a write in the pause: it starts again
	clk.Advance(mergeIdle / 2)
	f.barrier()
	if n := patched(); n != exts {
		t.Fatalf("%d extents patched before the pause was long enough, want %d", n, exts)
	}
	clk.Advance(mergeIdle)
	testutil.Eventually(t, 30*time.Second, "the idle fold", func() bool {
		clk.Advance(time.Second)
		f.barrier()
		return patched() == 0
	})
	f.sameFromStore(ino, model, "folded")
	f.fsck()
}
