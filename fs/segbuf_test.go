package fs

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// TestLocalSegmentBuffersReused: on a local store, flushes build their
// segments in the buffers of segments already uploaded (segBufs); every
// object still holds exactly its own frames (each decodes, and the data
// reads back after a restart), however the buffers went round.
func TestLocalSegmentBuffersReused(t *testing.T) {
	ctx := context.Background()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := newTestFSOn(t, local)
	if !f.e.local {
		t.Fatal("a local store is not seen as local")
	}
	inos := []uint64{f.create("a"), f.create("b")}
	const size = 6 << 20 // six segments of 1 MiB (SegmentTarget) per file
	want := map[uint64][]byte{}
	reused := segBufsReused.Load()
	for round := range 3 {
		for i, ino := range inos {
			data := randBytes(int64(10*round+i), size)
			if round > 0 { // compressible halves too: frames of other lengths
				copy(data[size/2:], bytes.Repeat([]byte("segment buffer "), size/30))
			}
			f.write(ino, data, 0)
			want[ino] = data
		}
		if err := f.e.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := segBufsReused.Load() - reused; n == 0 {
		t.Fatal("no segment was built in the buffer of an uploaded one")
	} else {
		t.Logf("%d segments built in reused buffers", n)
	}
	objs, err := objstore.ListAll(ctx, local, segment.KeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	segs := 0
	for _, info := range objs {
		if !strings.HasPrefix(info.Key, segment.KeyPrefix) {
			continue
		}
		obj, err := local.Get(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		foot, err := segment.ParseFooter(obj[len(obj)-segment.FooterSize:])
		if err != nil || foot.ObjectSize() != int64(len(obj)) {
			t.Fatalf("%s: footer %+v, %v", info.Key, foot, err)
		}
		ents, err := segment.ParseDirectory(f.keys, foot, obj[foot.DirOffset:foot.DirOffset+uint64(foot.DirLen)])
		if err != nil {
			t.Fatalf("%s: directory: %v", info.Key, err)
		}
		for _, e := range ents {
			if _, err := segment.DecodeFrame(f.keys, e.ID(), obj[e.Offset:uint64(e.Offset)+uint64(e.Length)], int(e.PlainLen)); err != nil {
				t.Fatalf("%s: frame %+v: %v", info.Key, e.ID(), err)
			}
		}
		segs++
	}
	if segs < 3*len(inos)*(size>>20) {
		t.Fatalf("%d segments, want at least %d", segs, 3*len(inos)*(size>>20))
	}
	f.reopen()
	for _, ino := range inos {
		if got := f.read(ino, size, 0); !bytes.Equal(got, want[ino]) {
			t.Fatalf("ino %d reads back different bytes", ino)
		}
	}
}
