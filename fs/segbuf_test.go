package fs

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
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
			data := testutil.RandBytes(int64(10*round+i), size)
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

// TestRemoteSegmentBuffersReused: on an object store, a segment's buffer
// is shared by its upload and the disk cache, which writes the uploaded
// frames later; it is built in again only once both let go. Every frame
// the disk cache wrote is the one uploaded: after a restart the files read
// back whole from the disk cache with every segment request failing (a
// frame overwritten while the cache held it would fail its tag there and
// go to the store).
func TestRemoteSegmentBuffersReused(t *testing.T) {
	ctx := context.Background()
	fst, open := remoteFS(t, 1<<20)
	e := open()
	if e.local {
		t.Fatal("a memory store is seen as local")
	}
	var inos []uint64
	for _, name := range []string{"a", "b"} {
		a, err := e.Create(ctx, RootIno, name, 0o644, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		inos = append(inos, a.Ino)
	}
	const size = 6 << 20
	want := map[uint64][]byte{}
	reused := segBufsReused.Load()
	for round := range 3 {
		for i, ino := range inos {
			data := testutil.RandBytes(int64(100+10*round+i), size)
			if n, err := e.Write(ctx, ino, data, 0); err != nil || n != len(data) {
				t.Fatalf("write: %d, %v", n, err)
			}
			want[ino] = data
		}
		if err := e.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := segBufsReused.Load() - reused; n == 0 {
		t.Fatal("no segment was built in the buffer of an uploaded one")
	} else {
		t.Logf("%d segments built in reused buffers", n)
	}
	if err := e.Close(ctx); err != nil { // drains the disk cache's queue
		t.Fatal(err)
	}
	e = open()
	defer e.Close(ctx)
	id := fst.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet, objstore.OpGetRange}, Prefix: "segments/", Err: objstore.ErrNotFound})
	for _, ino := range inos {
		buf := make([]byte, size)
		n, err := e.Read(ctx, ino, buf, 0)
		if err != nil || n != size || !bytes.Equal(buf, want[ino]) {
			t.Fatalf("ino %d after restart: %d bytes, %v, equal %v (segment requests: %d)", ino, n, err, bytes.Equal(buf[:n], want[ino][:n]), fst.Fired(id))
		}
	}
	if fst.Fired(id) != 0 {
		t.Fatalf("%d segment requests; want every frame from the disk cache", fst.Fired(id))
	}
}
