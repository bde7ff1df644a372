package fs

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// TestFsckVerifiesByRuns: --verify-data reads a segment's frames a run at
// a time (a request per run, not per frame), and a flipped bit in one
// frame names that frame's extent and no other.
func TestFsckVerifiesByRuns(t *testing.T) {
	mem := objstore.NewMem()
	f := newTestFSOn(t, mem)
	data := make([]byte, 8<<20) // 256 frames of 32 KiB, incompressible
	rand.New(rand.NewSource(1)).Read(data)
	f.durableFile(data)
	if err := f.e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.e = nil
	ctx := context.Background()

	count := objstore.NewCounting(mem)
	r, err := Fsck(ctx, count, f.keys, FsckOptions{VerifyData: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.FramesVerified != 256 {
		t.Fatalf("fsck of a sound filesystem: %d frames verified, want 256:\n%s", r.FramesVerified, r)
	}
	segs, err := objstore.ListAll(ctx, mem, "segments/")
	if err != nil {
		t.Fatal(err)
	}
	// A directory read and at most two runs for each segment (1 MiB
	// segments here): far from one request per frame.
	got := count.CountsFor("segments/")
	if reads := got.Get + got.GetRange; reads > int64(3*len(segs)) || reads >= 256 {
		t.Fatalf("verifying 256 frames in %d segments took %d reads", len(segs), reads)
	}

	t.Logf("verifying 256 frames in %d segments took %d reads", len(segs), got.Get+got.GetRange)

	// Flip a bit inside one frame in the middle of a segment.
	obj := segs[len(segs)/2]
	id, ok := segment.ParseKey(obj.Key)
	if !ok {
		t.Fatalf("segment key %q", obj.Key)
	}
	_, dir, err := segment.ReadDirectory(ctx, mem, f.keys, id, obj.Size)
	if err != nil || len(dir) < 3 {
		t.Fatalf("directory of %s: %d entries, %v", obj.Key, len(dir), err)
	}
	victim := dir[len(dir)/2]
	b, err := mem.Get(ctx, obj.Key)
	if err != nil {
		t.Fatal(err)
	}
	b[int(victim.Offset)+int(victim.Length)/2] ^= 0x10
	if _, err := mem.Put(ctx, obj.Key, b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err = Fsck(ctx, mem, f.keys, FsckOptions{VerifyData: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || r.FramesVerified != 255 {
		t.Fatalf("one flipped bit: %d problems, %d frames verified (want 1 and 255):\n%s", len(r.Problems), r.FramesVerified, r)
	}
	// The problem names the file's path and the extent (issue 40).
	want := fmt.Sprintf("damaged: /f bytes [%d,", victim.Extent*32<<10)
	if !strings.Contains(r.Problems[0], want) || !strings.Contains(r.Problems[0], fmt.Sprintf("(inode %d, extent %d)", victim.Ino, victim.Extent)) {
		t.Fatalf("problem %q does not name %s and inode %d extent %d", r.Problems[0], want, victim.Ino, victim.Extent)
	}
	if got := r.DamagedFiles(); len(got) != 1 || got[0] != "/f" {
		t.Fatalf("damaged files %q, want /f", got)
	}
}
