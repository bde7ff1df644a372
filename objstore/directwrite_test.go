package objstore

import (
	"bytes"
	"context"
	"math/rand"
	"os"
	"testing"
	"unsafe"

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
