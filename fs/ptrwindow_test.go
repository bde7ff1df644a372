package fs

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// TestStreamPointerWindow: a sequential read looks up the pointers of the
// next streamWindow bytes once, and the requests after it find theirs in
// that window; a commit (here an overwrite, flushed) makes the next
// request look them up again, so that it reads what the file now holds,
// not a frame the metadata no longer points to.
func TestStreamPointerWindow(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.create("w")
	const size, chunk = 12 << 20, 1 << 20
	want := testutil.RandBytes(7, size)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := f.e.acquire(ino) // held, as an open file holds it
	if err != nil {
		t.Fatal(err)
	}
	defer f.e.release(n)
	read := func(off int) {
		t.Helper()
		if got := f.read(ino, chunk, int64(off)); !bytes.Equal(got, want[off:off+chunk]) {
			t.Fatalf("read [%d,+%d) differs from the file", off, chunk)
		}
	}
	before := committedScans.Load()
	for off := 0; off < streamWindow; off += chunk {
		read(off)
	}
	// One lookup for the window; a second if a background commit (an
	// attribute flush) came in between.
	if got := committedScans.Load() - before; got > 2 {
		t.Fatalf("%d pointer lookups for %d sequential reads of one window, want 1", got, streamWindow/chunk)
	}
	if w := n.ptrWin.Load(); w == nil || w.from != 0 || w.to != streamWindow/extentSize {
		t.Fatalf("window %+v, want extents [0, %d)", w, streamWindow/extentSize)
	}

	// A window over [8 MiB, 12 MiB); then extents inside it are
	// overwritten and committed: the reads after must see the new bytes.
	read(streamWindow)
	at := streamWindow + chunk + 4096
	fresh := testutil.RandBytes(8, 3*extentSize)
	f.write(ino, fresh, int64(at))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	copy(want[at:], fresh)
	for off := streamWindow + chunk; off < size; off += chunk {
		read(off)
	}
}

// TestRandomPointerWindows: the second random read that misses an
// aligned randomWindow with no commit in between looks up the window's
// pointers, and the random reads after find theirs there; an overwrite
// committed inside a window, and a truncate, are read back (the window no
// longer holds); reads that never come back to a window, and reads each
// after a commit, look their pointers up themselves.
func TestRandomPointerWindows(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.create("r")
	const size = 4 * randomWindow
	want := testutil.RandBytes(9, size)
	f.write(ino, want, 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := f.e.acquire(ino)
	if err != nil {
		t.Fatal(err)
	}
	defer f.e.release(n)
	read := func(off int) {
		t.Helper()
		if got := f.read(ino, 4096, int64(off)); !bytes.Equal(got, want[off:off+4096]) {
			t.Fatalf("read [%d,+4096) differs from the file", off)
		}
	}
	// Offsets spread over the second window, never one after the other.
	offs := []int{}
	for i := 0; i < 24; i++ {
		offs = append(offs, randomWindow+(i*7919*4096)%(randomWindow-4096))
	}
	before := committedScans.Load()
	for _, off := range offs {
		read(off)
	}
	// The first read finds the moment not yet known quiet, the second
	// reads the window; one more of each if a background commit came.
	if got := committedScans.Load() - before; got > 4 {
		t.Fatalf("%d pointer lookups for %d random reads of one window, want 2", got, len(offs))
	}

	// An overwrite inside the window, committed: the reads see it.
	at := randomWindow + 3*extentSize + 100
	fresh := testutil.RandBytes(10, 4096)
	f.write(ino, fresh, int64(at))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	copy(want[at:], fresh)
	read(at - 100)
	read(randomWindow + 8*extentSize)
	read(at - 100)

	kept := func() int {
		f.e.wins.mu.Lock()
		defer f.e.wins.mu.Unlock()
		return len(f.e.wins.m)
	}
	reset := func() {
		f.e.wins.mu.Lock()
		f.e.wins.m, f.e.wins.lru, f.e.wins.ptrs, f.e.wins.ghosts = nil, list.List{}, 0, nil
		f.e.wins.mu.Unlock()
	}
	// Reads spread thin, one in each window: none is read.
	reset()
	for w := 0; w < 4; w++ {
		read(w*randomWindow + 5*extentSize)
	}
	if k := kept(); k != 0 {
		t.Fatalf("%d windows read for single reads in each", k)
	}

	// Commits between the reads: no window is read, every read looks
	// its pointers up.
	reset()
	before = committedScans.Load()
	for i, off := range offs[:8] {
		b := testutil.RandBytes(int64(20+i), 10)
		f.write(ino, b, int64(3*randomWindow+i*extentSize))
		copy(want[3*randomWindow+i*extentSize:], b)
		if err := f.e.Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		read(off)
		if k := kept(); k != 0 {
			t.Fatalf("a window read for a random read right after a commit (read %d)", i)
		}
	}
	if got, k := committedScans.Load()-before, kept(); got != 8 || k != 0 {
		t.Fatalf("%d pointer lookups for 8 random reads each after a commit (want 8), %d windows read (want 0)", got, k)
	}
	read(3 * randomWindow)

	// A truncate into the window and a write past it: the window read
	// before no longer holds; the bytes between are zeroes.
	for _, off := range offs[:4] {
		read(off)
	}
	cut := randomWindow + 2*extentSize
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(cut)}); err != nil {
		t.Fatal(err)
	}
	tail := testutil.RandBytes(11, 4096)
	f.write(ino, tail, int64(randomWindow+10*extentSize))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	clear(want[cut:])
	copy(want[randomWindow+10*extentSize:], tail)
	for _, off := range []int{randomWindow + 5*extentSize, randomWindow + 10*extentSize, randomWindow + extentSize} {
		read(off)
	}
}

// TestPointerWindowsBounded: the random windows' LRU holds at most
// randomPointers pointers, whatever the windows' sizes, and keeps its
// count and map in step with what it holds.
func TestPointerWindowsBounded(t *testing.T) {
	var w ptrWindows
	for i := uint64(0); i < 3000; i++ {
		n := 32
		switch i % 3 {
		case 0:
			n = 256
		case 1:
			n = 0 // a window over a hole
		}
		w.store(&pointerWindow{ino: i % 700, from: i * 256, to: i*256 + uint64(n), seen: 1, ptrs: make([]extentPointer, n)})
		if w.ptrs > randomPointers {
			t.Fatalf("after %d windows: %d pointers held, bound %d", i+1, w.ptrs, randomPointers)
		}
	}
	held := 0
	for el := w.lru.Front(); el != nil; el = el.Next() {
		held += el.Value.(*pointerWindow).cost()
	}
	if held != w.ptrs || w.lru.Len() != len(w.m) || held < randomPointers-257 {
		t.Fatalf("counted %d pointers, hold %d; %d windows, %d in the map", w.ptrs, held, w.lru.Len(), len(w.m))
	}
	// A window read at another change count is not returned, and leaves.
	last := w.lru.Front().Value.(*pointerWindow)
	if w.lookup(last.ino, last.from, 1) != last || w.lookup(last.ino, last.from, 2) != nil || w.lookup(last.ino, last.from, 1) != nil {
		t.Fatal("a window was returned at a change count it was not read at, or kept after")
	}
}

// TestPointerWindowsBoundHoles: windows over holes (no pointers) count
// against the bound too, so random reads of a large sparse file cannot
// pile them up.
func TestPointerWindowsBoundHoles(t *testing.T) {
	var w ptrWindows
	for i := uint64(0); i < 3*randomPointers; i++ {
		w.store(&pointerWindow{ino: 1, from: i * 32, to: i*32 + 32, seen: 1})
	}
	if w.lru.Len() > randomPointers || len(w.m) != w.lru.Len() {
		t.Fatalf("%d empty windows kept (%d in the map), bound %d", w.lru.Len(), len(w.m), randomPointers)
	}
}

// TestCacheOnlyContext: a first attempt's context is cancelled from the
// start with errCacheOnly (a context.Canceled), keeps its parent's values,
// and contexts made from it are cancelled with the same error, so a
// store call under it returns at once and missed recognises it.
func TestCacheOnlyContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer cancel()
	e := &Engine{}
	ctx := e.cacheOnly(parent)
	select {
	case <-ctx.Done():
	default:
		t.Fatal("a cache-only context is not done")
	}
	if ctx.Err() != errCacheOnly || !errors.Is(ctx.Err(), context.Canceled) || ctx.Value(key{}) != "v" {
		t.Fatalf("err %v, value %v", ctx.Err(), ctx.Value(key{}))
	}
	if !missed(ctx, errors.New("x")) || missed(ctx, nil) || missed(parent, errors.New("x")) {
		t.Fatal("missed does not tell a cache-only attempt's error")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	timed, stop2 := context.WithTimeout(ctx, time.Hour)
	defer stop2()
	for _, c := range []context.Context{child, timed, context.WithValue(ctx, key{}, "w")} {
		select {
		case <-c.Done():
		case <-time.After(time.Second):
			t.Fatal("a context made from a cache-only one is not done")
		}
		if c.Err() != errCacheOnly {
			t.Fatalf("derived context: err %v, want errCacheOnly", c.Err())
		}
	}
	if e.local = true; e.cacheOnly(parent) != parent {
		t.Fatal("a local store's first attempt is not the request's own context")
	}
}
