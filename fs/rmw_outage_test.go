package fs

import (
	"bytes"
	"context"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// TestPartialWritesWaitOutStoreErrors: a write that starts and ends
// inside two different extents, neither cached, needs both read from the
// store; so does a truncate into an extent. While the store fails those
// reads, the operations wait and then succeed (an NBD write in the chaos
// soak failed with EIO when its second extent's read met one error).
func TestPartialWritesWaitOutStoreErrors(t *testing.T) {
	ctx := context.Background()
	fs := objstore.NewFaulty(objstore.NewMem())
	f := newTestFSOn(t, fs)
	ino := f.create("f")
	orig := testutil.RandBytes(5, 4*extentSize)
	// Each extent in a segment of its own: a read of one does not bring
	// the next into the cache.
	for i := 0; i < len(orig); i += extentSize {
		f.write(ino, orig[i:i+extentSize], int64(i))
		if err := f.e.Seal(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.openWhole() // nothing cached; patches off: the write reads its extents
	id := fs.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet, objstore.OpGetRange}, Prefix: "segments/", Skip: 1, Count: 6, Fail: true})
	patch := testutil.RandBytes(6, extentSize)
	off := int64(extentSize / 2)
	if n, err := f.e.Write(ctx, ino, patch, off); err != nil || n != len(patch) {
		t.Fatalf("write over two partial extents: %d, %v", n, err)
	}
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: 3*extentSize + 7}); err != nil {
		t.Fatalf("truncate into an extent: %v", err)
	}
	if fs.Fired(id) == 0 {
		t.Fatal("no store read failed: the test proves nothing")
	}
	want := append([]byte(nil), orig[:3*extentSize+7]...)
	copy(want[off:], patch)
	if got := f.read(ino, len(want)+10, 0); !bytes.Equal(got, want) {
		t.Fatalf("content after the writes differs (%d bytes read)", len(got))
	}
}
