package objstore

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"os"
	"testing"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/fileutil"
	"golang.org/x/sys/unix"
)

// openDirect opens path with O_DIRECT and returns the descriptor, for the
// caller to close; or false where the filesystem refuses it, which fails
// the test in CI (its disk must take O_DIRECT) and is logged elsewhere.
func openDirect(t *testing.T, path string) (int, bool) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s refuses O_DIRECT (%v): CI's disk must take it", path, err)
		}
		t.Logf("%s refuses O_DIRECT (%v): checking the bytes only", path, err)
		return 0, false
	}
	return fd, true
}

// TestReadSpanSkipsPageCache: a large span of a local object that the
// page cache does not hold is read past it, at any offset and in any
// buffer, up to the object's last byte; one the cache holds, and a small
// one, are read through it; ranges outside the object and buffers without
// the slack are errors; the wrapping stores pass spans on and count them.
// A directio.File beside a descriptor of the file reads the same spans.
func TestReadSpanSkipsPageCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	const key = "segments/00/0000000000000002"
	size := 3<<20 + 1234
	obj := make([]byte, size)
	rand.New(rand.NewSource(5)).Read(obj)
	if _, err := l.Put(ctx, key, obj, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	path := l.path(key)
	evict := func() {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_ = f.Sync()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		if k := resident(t, path, size); k != 0 {
			t.Skipf("this filesystem kept %d pages after FADV_DONTNEED: nothing to measure", k)
		}
	}
	direct := true
	if fd, ok := openDirect(t, path); !ok {
		direct = false
	} else {
		rng, st := [2]uint64{0, 4096}, [5]uint64{}
		if _, _, e := unix.Syscall6(unix.SYS_CACHESTAT, uintptr(fd), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&st)), 0, 0, 0); e != 0 {
			t.Logf("no cachestat here (%v): every span goes through the page cache; checking the bytes only", e)
			direct = false
		}
		unix.Close(fd)
	}
	inside := func(b, buf []byte) bool {
		a, s := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&buf[0]))
		return a >= s && a+uintptr(len(b)) <= s+uintptr(len(buf))
	}

	cases := []struct {
		off, n, shift int // shift: the buffer starts this far into an allocation
	}{
		{0, 1 << 20, 0},
		{12345, 600000, 1},
		{4096, 2 << 20, 4095},
		{size - 300001, 300001, 7}, // to the last byte, which is inside a block
	}
	pf, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	var df directio.File
	for _, c := range cases {
		evict()
		alloc := make([]byte, c.shift+c.n+SpanSlack)
		buf := alloc[c.shift:]
		data, err := ReadSpan(ctx, l, key, int64(c.off), c.n, buf)
		if err != nil {
			t.Fatalf("span [%d,+%d): %v", c.off, c.n, err)
		}
		if !bytes.Equal(data, obj[c.off:c.off+c.n]) || !inside(data, buf) {
			t.Fatalf("span [%d,+%d): wrong bytes, or not in the buffer", c.off, c.n)
		}
		if k := resident(t, path, size); direct && k != 0 {
			t.Fatalf("span [%d,+%d) read through the page cache: %d pages of the object in it", c.off, c.n, k)
		}
		// The same span through a directio.File beside a descriptor of the
		// file (the disk cache's reads).
		evict()
		clear(buf)
		data, ok := df.Read(pf, int64(c.off), c.n, buf)
		if direct && !ok || ok && (!bytes.Equal(data, obj[c.off:c.off+c.n]) || !inside(data, buf)) {
			t.Fatalf("file span [%d,+%d): read %v, or wrong bytes, or not in the buffer", c.off, c.n, ok)
		}
		if k := resident(t, path, size); direct && k != 0 {
			t.Fatalf("file span [%d,+%d) read through the page cache: %d pages of the file in it", c.off, c.n, k)
		}
	}
	// A span running past the end, or a buffer without the slack: not
	// read directly (the caller reads through the shared descriptor).
	evict()
	tail := make([]byte, 1<<20+SpanSlack)
	if _, ok := df.Read(pf, int64(size-300001), 1<<20, tail); ok {
		t.Fatal("a file span past the end was read directly")
	}
	if _, ok := df.Read(pf, 0, 1<<20, tail[:1<<20]); ok {
		t.Fatal("a buffer without the slack was taken for a file span")
	}
	df.Close()
	evict()
	if _, ok := df.Read(pf, 0, 4096, nil); ok {
		t.Fatal("a closed directio.File read")
	}
	var data []byte

	// Held by the page cache: read through it, into buf[:n], large or
	// small (a small one through the open-files cache).
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20+SpanSlack)
	for _, n := range []int{1 << 20, 4096} {
		data, err = ReadSpan(ctx, l, key, 777, n, buf)
		if err != nil || !bytes.Equal(data, obj[777:777+n]) || &data[0] != &buf[0] {
			t.Fatalf("a cached span of %d bytes: err %v, or not read through the page cache", n, err)
		}
	}

	// Small and not in the page cache (a random read of a frame or a
	// piece): past it too, as spans and as GetRange, at any offset, up
	// to the object's last byte; the file stays open (openFiles) with its
	// O_DIRECT descriptor beside it.
	fds := func() int {
		t.Helper()
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	l.files.forget(key)
	open := fds()
	for _, c := range []struct{ off, n int }{{777, 4096}, {8192, 4096}, {100000, 4113}, {5000, 60000}, {size - 4113, 4113}, {size - 1, 1}} {
		evict()
		clear(buf)
		data, err = ReadSpan(ctx, l, key, int64(c.off), c.n, buf)
		if err != nil || !bytes.Equal(data, obj[c.off:c.off+c.n]) || !inside(data, buf) {
			t.Fatalf("small span [%d,+%d): %v, or wrong bytes, or not in the buffer", c.off, c.n, err)
		}
		if k := resident(t, path, size); direct && k != 0 {
			t.Fatalf("small span [%d,+%d) read through the page cache: %d pages of the object in it", c.off, c.n, k)
		}
		evict()
		data, err = l.GetRange(ctx, key, int64(c.off), int64(c.n))
		if err != nil || !bytes.Equal(data, obj[c.off:c.off+c.n]) {
			t.Fatalf("small range [%d,+%d): %v, or wrong bytes", c.off, c.n, err)
		}
		if k := resident(t, path, size); direct && k != 0 {
			t.Fatalf("small range [%d,+%d) read through the page cache: %d pages of the object in it", c.off, c.n, k)
		}
	}
	if _, err := l.GetRange(ctx, key, int64(size-100), 4096); err == nil {
		t.Fatal("a small range past the end of the object was read")
	}
	// The object's file and its O_DIRECT twin stay open, and close with
	// the entry.
	if n := fds() - open; direct && n != 2 {
		t.Fatalf("%d descriptors more after the small reads, want 2 (the file, O_DIRECT beside it)", n)
	}
	l.files.forget(key)
	if n := fds() - open; n != 0 {
		t.Fatalf("%d descriptors left open after the file left the cache", n)
	}

	if _, err := ReadSpan(ctx, l, key, int64(size-1000), 1<<20, buf); err == nil {
		t.Fatal("a span past the end of the object was read")
	}
	if _, err := ReadSpan(ctx, l, key, 0, 1<<20, buf[:1<<20]); err == nil {
		t.Fatal("a buffer without the slack was taken")
	}
	if _, err := ReadSpan(ctx, l, "segments/00/missing", 0, 1<<20, buf); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a missing object: %v, want ErrNotFound", err)
	}

	// Through the wrapping stores: the same bytes, counted as a range read.
	c := NewCounting(l)
	evict()
	data, err = ReadSpan(ctx, NewTimed(c), key, 100, 1<<20, buf)
	if err != nil || !bytes.Equal(data, obj[100:100+1<<20]) {
		t.Fatalf("through the wrappers: %v", err)
	}
	if got := c.Snapshot(); got.GetRange != 1 || got.BytesDown != 1<<20 {
		t.Fatalf("counted %+v, want one range read of 1 MiB", got)
	}
	// A store without spans reads into buf[:n].
	m := NewMem()
	if _, err := m.Put(ctx, key, obj, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	data, err = ReadSpan(ctx, m, key, 5, 1<<20, buf)
	if err != nil || !bytes.Equal(data, obj[5:5+1<<20]) || &data[0] != &buf[0] {
		t.Fatalf("memory store: %v", err)
	}
}

// resident counts the pages of path's first n bytes in the page cache.
func resident(t *testing.T, path string, n int) int {
	t.Helper()
	k, err := fileutil.ResidentPages(path, n)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
