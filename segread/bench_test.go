package segread

import (
	"context"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segment/segtest"
)

const benchSegmentBytes = 32 << 20

func benchExtents() [][]byte { return segtest.BenchExtents(benchSegmentBytes, segment.ExtentSize) }

func newBenchLocal(b *testing.B) objstore.Store {
	s, err := objstore.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkSegmentRead(b *testing.B) {
	k := testKeys(b)
	exts := benchExtents()
	s := newBenchLocal(b)
	ctx := context.Background()
	const seg = 1
	bl := segment.NewBuilder(k, seg, segment.CodecLZ4)
	var ids []segment.FrameID
	var ps []segment.Pointer
	for i, e := range exts {
		id := segment.FrameID{Ino: 1, Extent: uint64(i), Gen: 1}
		ids, ps = append(ids, id), append(ps, bl.Add(id, e))
	}
	data := bl.Finish()
	if err := segment.Upload(ctx, s, seg, data); err != nil {
		b.Fatal(err)
	}
	// Cold reads: no caches, so every byte comes from the store.
	newReader := func(b *testing.B) *Reader {
		r, err := NewReader(ReaderOptions{Store: s, Keys: k, MemoryBytes: -1, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	b.Run("run1MiB", func(b *testing.B) {
		r := newReader(b)
		b.SetBytes(benchSegmentBytes)
		for b.Loop() {
			if _, _, err := r.ReadDirectory(ctx, seg, int64(len(data))); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < len(ps); i += 32 {
				if _, err := runOf(r, ctx, ids[i:i+32], ps[i:i+32]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("frame", func(b *testing.B) {
		r := newReader(b)
		b.SetBytes(benchSegmentBytes)
		for b.Loop() {
			for i := range ps {
				if _, err := readOf(r, ctx, ids[i], ps[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("memhit", func(b *testing.B) {
		r, err := NewReader(ReaderOptions{Store: s, Keys: k, MemoryBytes: 64 << 20, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		for i := range ps {
			readOf(r, ctx, ids[i], ps[i])
		}
		b.SetBytes(benchSegmentBytes)
		for b.Loop() {
			for i := range ps {
				if _, err := readOf(r, ctx, ids[i], ps[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
