package fs

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// TestStoreColdStreamFetchesOnce: a cold sequential read behind a remote
// store (a new disk cache) fetches each byte of the file's frames once,
// also when its requests arrive as the kernel sends them, two at a time
// and handled concurrently, in either order, beside the read-ahead they
// start, which they do not hide from the stream detection. No timing is
// assumed: however the requests, the read-ahead's runs and the second
// attempts interleave, a frame in flight is waited for, not fetched
// again.
func TestStoreColdStreamFetchesOnce(t *testing.T) {
	for _, order := range []string{"in order", "reversed"} {
		t.Run(order, func(t *testing.T) {
			c := objstore.NewCounting(objstore.NewMem())
			f := newTestFSOn(t, c)
			ino := f.create("s")
			const size, chunk = 64 << 20, 1 << 20
			want := testutil.RandBytes(5, size)
			n := f.coldFile(ino, want, c)
			for off := 0; off < size; off += 2 * chunk {
				offs := []int{off, off + chunk}
				if order == "reversed" {
					offs[0], offs[1] = offs[1], offs[0]
				}
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for k, at := range offs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p := make([]byte, chunk)
						vecs, release, n, err := f.e.ReadVec(context.Background(), ino, p, int64(at))
						if err == nil && (n != chunk || !bytes.Equal(joined(vecs, release), want[at:at+chunk])) {
							err = fmt.Errorf("%d bytes, differing from the file", n)
						} else if err != nil && release != nil {
							release()
						}
						if err != nil {
							errs[k] = fmt.Errorf("read [%d,+%d): %w", at, chunk, err)
						}
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				// The requests finishing out of order do not hide the
				// stream: it is read ahead from its first requests on.
				if off == 2*chunk && n.raEnd.Load() <= int64(off+2*chunk) {
					t.Fatalf("read-ahead only up to %d after the first %d bytes", n.raEnd.Load(), off+2*chunk)
				}
			}
			f.e.raGroup.Wait() // the read-aheads still running fetch nothing past the file
			sealed := f.sealedBytes(ino, size)
			got := c.CountsFor("segments/")
			t.Logf("%d bytes in %d GETs for %d bytes of frames; %d frames waited for", got.BytesDown, got.GetRange+got.Get, sealed, f.e.rd.Stats().Waits)
			if got.BytesDown != sealed {
				t.Fatalf("%d bytes fetched from the store for %d bytes of frames (%.3fx): some were fetched twice, or not at all", got.BytesDown, sealed, float64(got.BytesDown)/float64(sealed))
			}
		})
	}
}

// coldFile writes want into ino, makes it durable, reopens the engine on
// a new cache directory (nothing cached), resets c, and returns the inode
// held as an open file holds it, until the test ends.
func (f *testFS) coldFile(ino uint64, want []byte, c *objstore.Counting) *inode {
	f.t.Helper()
	f.write(ino, want, 0)
	if err := f.e.Barrier(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.reopen()
	c.Reset()
	e := f.e
	n, err := e.acquire(ino)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { e.release(n) })
	return n
}

// sealedBytes is the stored length of the frames of ino's first size
// bytes: what reading them from a cold cache fetches, each byte once.
func (f *testFS) sealedBytes(ino uint64, size int) int64 {
	f.t.Helper()
	ptrs, err := f.e.pointersIn(ino, 0, uint64(size/extentSize))
	if err != nil {
		f.t.Fatal(err)
	}
	sealed := int64(0)
	for _, x := range ptrs {
		sealed += int64(x.p.Length)
	}
	return sealed
}
