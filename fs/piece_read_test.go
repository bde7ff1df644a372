package fs

import (
	"bytes"
	"context"
	"fmt"
	iofs "io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// TestRandomPieceReads makes random reads into buffers filled with other
// bytes, with Read and ReadVec, of pieced extents, of a short extent
// followed by zeroes (a range cut at the stored bytes) and of a short
// last extent, on a local store and behind a remote one, with 32 KiB and
// 8 KiB extents.
func TestRandomPieceReads(t *testing.T) {
	for _, es := range []int{32 << 10, 8 << 10} {
		for _, kind := range []string{"local", "mem"} {
			t.Run(kind+"-"+strconv.Itoa(es), func(t *testing.T) {
				var s objstore.Store = objstore.NewMem()
				if kind == "local" {
					l, err := objstore.NewLocal(t.TempDir())
					if err != nil {
						t.Fatal(err)
					}
					s = l
				}
				f := newTestFSOn(t, s)
				ctx := context.Background()
				ino := f.create("r")
				if es != 32<<10 {
					if err := f.setExtentSize(ino, strconv.Itoa(es)); err != nil {
						t.Fatal(err)
					}
				}
				size := 10*es - 777
				want := make([]byte, size)
				a := testutil.RandBytes(21, 4*es+es-3000) // extent 4 short: zeroes after it
				copy(want, a)
				f.write(ino, a, 0)
				b := testutil.RandBytes(22, size-6*es)
				copy(want[6*es:], b)
				f.write(ino, b, int64(6*es))
				if err := f.e.Barrier(ctx); err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewSource(5))
				for round := 0; round < 2; round++ {
					f.reopen()
					for k := 0; k < 400; k++ {
						var off, n int
						switch k % 4 {
						case 0:
							off, n = rng.Intn(size), 1+rng.Intn(4096)
						case 1:
							off, n = rng.Intn(size), 1+rng.Intn(3*es)
						case 2: // around the short extent's end
							off, n = 5*es-3000-rng.Intn(5000), 1+rng.Intn(6000)
						case 3: // piece-aligned
							off, n = rng.Intn(size/4096)*4096, 4096*(1+rng.Intn(4))
						}
						if off < 0 {
							off = 0
						}
						exp := want[min(off, size):min(off+n, size)]
						p := bytes.Repeat([]byte{0xa5}, n)
						got, err := f.e.Read(ctx, ino, p, int64(off))
						if err != nil || got != len(exp) || !bytes.Equal(p[:got], exp) {
							t.Fatalf("Read [%d,+%d): %d, %v, equal %v", off, n, got, err, bytes.Equal(p[:max(got, 0)], exp))
						}
						p = bytes.Repeat([]byte{0x5a}, n)
						vecs, release, got, err := f.e.ReadVec(ctx, ino, p, int64(off+1)) // off+1: not sequential
						exp = want[min(off+1, size):min(off+1+n, size)]
						if err != nil || got != len(exp) || !bytes.Equal(joined(vecs, release), exp) {
							t.Fatalf("ReadVec [%d,+%d): %d, %v", off+1, n, got, err)
						}
					}
				}
			})
		}
	}
}

// TestDamagedDiskPieceRetried: behind a remote store, the disk cache
// holds a frame whose piece 2 is damaged. A random read of its pieces 0-3
// opens pieces 0 and 1 into the request's buffer and fails at 2; the
// cache-only attempt records a miss, and the retry returns the right
// bytes.
func TestDamagedDiskPieceRetried(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	f := newTestFSOn(t, s)
	ino := f.create("d")
	const es = 32 << 10
	want := testutil.RandBytes(31, 4*es)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	open := func() {
		if err := f.e.Close(ctx); err != nil {
			t.Fatal(err)
		}
		f.openIn(cache)
	}
	open()
	if got := f.read(ino, len(want), 0); !bytes.Equal(got, want) {
		t.Fatal("warm-up read differs")
	}
	x, ok, err := f.e.visibleExtent(ino, 2)
	ptr := x.Base
	if err != nil || !ok || !ptr.IsPieced() {
		t.Fatalf("pointer %+v %v %v", ptr, ok, err)
	}
	open() // closes, syncing the disk cache
	name := fmt.Sprintf("%016x", ptr.Segment)
	var path string
	filepath.WalkDir(cache, func(p string, d iofs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name {
			path = p
		}
		return nil
	})
	if path == "" {
		t.Fatal("no cache file")
	}
	if err := f.e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[int(ptr.Offset)+2*(segment.PieceSize+keys.Overhead)+100] ^= 1 // in piece 2
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f.openIn(cache)
	off := int64(2 * es)
	p := bytes.Repeat([]byte{0xa5}, 4*4096)
	vecs, release, n, err := f.e.ReadVec(ctx, ino, p, off)
	if err != nil || n != len(p) {
		t.Fatalf("%d %v", n, err)
	}
	if !bytes.Equal(joined(vecs, release), want[off:off+int64(len(p))]) {
		t.Fatal("read over a damaged disk-cache piece differs")
	}
	st := f.e.Reader().Stats()
	if st.DiskCorrupt != 1 {
		t.Fatalf("damaged piece not seen: %+v", st)
	}
}
