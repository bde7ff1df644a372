package objstore

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"testing"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/directio"
	"golang.org/x/sys/unix"
)

// TestPutWritesPastPageCache: a large object whose buffer is block-aligned
// (a segment) is written past the page cache, all but its last partial
// block; an unaligned buffer and a small object are written through it;
// every one reads back exactly as put, and is durable as before (the
// store's Put still fsyncs; crash tests cover that).
func TestPutWritesPastPageCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := os.CreateTemp(dir, "probe-")
	if err != nil {
		t.Fatal(err)
	}
	probe.Close()
	fd, direct := openDirect(t, probe.Name())
	if direct {
		unix.Close(fd)
	}
	// tmpfs takes O_DIRECT (Linux 6.6 on) but keeps every page in memory
	// all the same: there is no page cache to stay out of.
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err == nil && fs.Type == unix.TMPFS_MAGIC {
		t.Logf("%s is tmpfs: checking the bytes only", dir)
		direct = false
	}
	aligned := func(n, shift int) []byte {
		raw := make([]byte, n+2*spanAlign)
		at := int(-uintptr(unsafe.Pointer(&raw[0]))&(spanAlign-1)) + shift
		b := raw[at : at+n]
		rand.New(rand.NewSource(int64(n + shift))).Read(b)
		return b
	}
	for _, c := range []struct {
		name        string
		data        []byte
		maxResident int // pages left in the page cache; -1: written through it
	}{
		{"aligned segment", aligned(3<<20+1234, 0), 1}, // the last partial block
		{"aligned, whole blocks", aligned(1<<20, 0), 0},
		{"unaligned buffer", aligned(3<<20+1234, 1), -1},
		{"small object", aligned(DirectMin-spanAlign, 0), -1},
	} {
		key := "segments/00/" + c.name
		if _, err := l.Put(ctx, key, c.data, PutOptions{IfAbsent: true}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		pages := (len(c.data) + os.Getpagesize() - 1) / os.Getpagesize()
		if k := resident(t, l.path(key), len(c.data)); direct && c.maxResident >= 0 && k > c.maxResident {
			t.Fatalf("%s: %d of %d pages in the page cache after the put, want at most %d", c.name, k, pages, c.maxResident)
		} else if direct && c.maxResident < 0 && k == 0 {
			t.Fatalf("%s: written past the page cache", c.name)
		}
		got, err := l.Get(ctx, key)
		if err != nil || !bytes.Equal(got, c.data) {
			t.Fatalf("%s: reads back %d bytes (%v), want the %d put", c.name, len(got), err, len(c.data))
		}
	}
}

// TestWriteAtDirect: writes at any offset into a file that already holds
// bytes land exactly where f.WriteAt would put them, from buffers aligned
// with the file's blocks or not; where the buffer and the offset agree on
// the block boundaries, the whole blocks go past the page cache.
func TestWriteAtDirect(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/probe", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, direct := openDirect(t, dir+"/probe")
	if direct {
		unix.Close(fd)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err == nil && sfs.Type == unix.TMPFS_MAGIC {
		direct = false
	}
	rng := rand.New(rand.NewSource(7))
	const size = 4 << 20
	for _, c := range []struct {
		name     string
		off, n   int
		shift    int  // the buffer's offset from a block boundary, minus off's
		pastPage bool // its whole blocks are expected past the page cache
	}{
		{"aligned both ends", 8192, 1 << 20, 0, true},
		{"unaligned ends, aligned with the file", 1000, 1<<20 + 3000, 0, true},
		{"buffer out of step with the file", 1000, 1<<20 + 3000, 8, false},
		{"too short for O_DIRECT", 4096, DirectMin - 4096, 0, false},
		{"within one block", 100, 200, 0, false},
		{"past the end", size - 4096, 1 << 20, 0, true},
	} {
		path := dir + "/" + c.name
		want := make([]byte, size)
		rng.Read(want)
		if err := os.WriteFile(path, want, 0o600); err != nil {
			t.Fatal(err)
		}
		dropCache(t, path)
		raw := make([]byte, c.n+3*spanAlign)
		at := int(-uintptr(unsafe.Pointer(&raw[0]))&(spanAlign-1)) + (c.off&(spanAlign-1)+c.shift)&(spanAlign-1)
		b := raw[at : at+c.n]
		rng.Read(b)
		if end := c.off + c.n; end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		copy(want[c.off:], b)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := directio.WriteAt(f, b, int64(c.off)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		f.Close()
		// Pages of the written range in the page cache: the partial
		// blocks at the ends only, when the middle went past it.
		first, last := c.off/spanAlign, (c.off+c.n-1)/spanAlign
		inCache := resident(t, path, (last+1)*spanAlign)
		if first > 0 {
			inCache -= resident(t, path, first*spanAlign)
		}
		if direct && c.pastPage && inCache > 2 {
			t.Fatalf("%s: %d of the %d written pages in the page cache, want the partial ones at most", c.name, inCache, last-first+1)
		}
		if direct && !c.pastPage && inCache == 0 {
			t.Fatalf("%s: written past the page cache", c.name)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: the file holds other bytes than f.WriteAt would have left (%d bytes, %v)", c.name, len(got), err)
		}
	}
}

// dropCache writes the file at path out and drops its pages from the page
// cache.
func dropCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}
