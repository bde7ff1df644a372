package fs

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
)

// gateStore blocks segment reads once armed, until released.
type gateStore struct {
	objstore.Store
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateStore) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.entered, g.release = true, make(chan struct{}), make(chan struct{})
}

func (g *gateStore) gate(key string) {
	if !strings.HasPrefix(key, "segments/") {
		return
	}
	g.mu.Lock()
	armed, entered, release := g.armed, g.entered, g.release
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(entered)
		<-release
	}
}

func (g *gateStore) Get(ctx context.Context, key string) ([]byte, error) {
	g.gate(key)
	return g.Store.Get(ctx, key)
}

func (g *gateStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	g.gate(key)
	return g.Store.GetRange(ctx, key, off, n)
}

// TestPunchEdgeReadDoesNotStallBarrier: a punch with unaligned edges reads
// its edge extent from the store. While that GET hangs, a barrier started
// after the punch must complete: no lock a barrier needs is held across
// the request.
func TestPunchEdgeReadDoesNotStallBarrier(t *testing.T) {
	g := &gateStore{Store: objstore.NewMem()}
	f := newTestFSOn(t, g)
	ctx := context.Background()
	data := testutil.RandBytes(1, 4*extentSize)
	ino := f.create("disk")
	f.write(ino, data, 0)
	f.reopen() // empty caches: the edge must come from the store
	ino = f.lookup("disk").Ino

	g.arm()
	punched := make(chan error, 1)
	go func() { punched <- f.e.Punch(ctx, ino, extentSize/2, 2*extentSize) }()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the punch never read its edge")
	}
	other := f.create("other")
	f.write(other, testutil.RandBytes(2, 3*extentSize), 0)
	barrier := make(chan error, 1)
	go func() { barrier <- f.e.Barrier(ctx) }()
	select {
	case err := <-barrier:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		close(g.release)
		t.Fatal("a barrier waited for the punch's edge GET")
	}
	close(g.release)
	if err := <-punched; err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), data...)
	clear(want[extentSize/2 : extentSize/2+2*extentSize])
	f.reopen()
	if got := f.read(f.lookup("disk").Ino, len(data), 0); !bytes.Equal(got, want) {
		t.Fatal("punched file differs from the model after a restart")
	}
	f.e.Close(ctx)
	f.e = nil
	f.fsck()
}

func (f *testFS) extents(ino uint64) int {
	f.t.Helper()
	lo, hi := schema.ExtentRange(ino, 0, 0)
	n := 0
	if err := f.e.scan(lo, hi, func(k, v []byte) error { n++; return nil }); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *testFS) rangeTombs() int {
	f.t.Helper()
	lo, hi := schema.PrefixRange(schema.PRangeTomb)
	n := 0
	if err := f.e.scan(lo, hi, func(k, v []byte) error { n++; return nil }); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestTruncateHugeSparseFile: a 1 TiB sparse file with 100,000 extents is
// truncated to a few bytes. The truncate returns with the pointers still
// there (a range tombstone), reads already see the new size and zeroes
// where the old data was, data written into the range afterwards
// survives the cleaner, and the cleaner removes the rest with the
// counters right (fsck).
func TestTruncateHugeSparseFile(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	const extents = 100000
	const stride = (1 << 40) / extents / extentSize * extentSize // about 10 MiB
	ino := f.create("huge")
	one := []byte{0xab}
	for i := int64(0); i < extents; i++ {
		f.write(ino, one, i*stride)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.extents(ino); n != extents {
		t.Fatalf("%d extents written, want %d", n, extents)
	}
	start := time.Now()
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: 5}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if n := f.extents(ino); n < extents-InlineDropExtents {
		t.Fatalf("truncate removed %d pointers itself; want them left to the cleaner", extents-n)
	}
	if f.rangeTombs() != 1 {
		t.Fatal("no range tombstone written")
	}
	t.Logf("truncate of %d extents returned in %v", extents, took)
	// Grow it again: the old bytes must not come back.
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	if got := f.read(ino, 1, 7*stride); got[0] != 0 {
		t.Fatal("old data visible after a truncate")
	}
	if off, err := f.e.SeekData(ctx, ino, extentSize); err != ErrNoData {
		t.Fatalf("SEEK_DATA found data at %d (err %v) in the truncated range", off, err)
	}
	// New data inside the range, before the cleaner ran.
	fresh := testutil.RandBytes(3, 2*extentSize)
	f.write(ino, fresh, 9*stride)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		_, n, _, err := f.e.CleanTombstones(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if f.rangeTombs() != 0 {
		t.Fatal("range tombstone left after the cleaner finished")
	}
	if n := f.extents(ino); n != 3 { // extent 0 (5 bytes) and the new two
		t.Fatalf("%d extents after cleaning, want 3", n)
	}
	f.reopen()
	ino = f.lookup("huge").Ino
	if got := f.read(ino, len(fresh), 9*stride); !bytes.Equal(got, fresh) {
		t.Fatal("data written after the truncate was lost to the cleaner")
	}
	if got := f.read(ino, 6, 0); !bytes.Equal(got, []byte{0xab, 0, 0, 0, 0, 0}) {
		t.Fatalf("head %x", got)
	}
	f.e.Close(ctx)
	f.e = nil
	f.fsck()
}

// TestSmallPunchInline: a punch over a few extents changes pointers and
// counters in its own transaction, without a tombstone.
func TestSmallPunchInline(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("f")
	f.write(ino, testutil.RandBytes(4, 40*extentSize), 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Punch(ctx, ino, 10*extentSize, 20*extentSize); err != nil {
		t.Fatal(err)
	}
	if n := f.extents(ino); n != 20 {
		t.Fatalf("%d extents after punching 20 of 40", n)
	}
	if f.rangeTombs() != 0 {
		t.Fatal("a small punch wrote a range tombstone")
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.e.Close(ctx)
	f.e = nil
	f.fsck()
}

// TestFlushNeverPersistsSizeAboveUnflushedData: while a flush uploads, the
// file is truncated and then appended to; the appended extents are dirty,
// in no commit. The flush's commit must not persist the new size over
// them (a replica, or recovery after a crash, would read zeroes there).
// The same holds for a flush split over segments: the first segment's
// commit does not persist the size covering extents of the second.
func TestFlushNeverPersistsSizeAboveUnflushedData(t *testing.T) {
	ctx := context.Background()
	base := objstore.NewMem()
	k, err := Init(ctx, base, "password123")
	if err != nil {
		t.Fatal(err)
	}
	slow := objstore.NewFaulty(base)
	gate := &putGate{Store: slow}
	// No background flush: 10 extents stay below the segment target.
	e, err := Open(ctx, Options{Store: gate, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour, SegmentTarget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close(ctx) }()
	// covered fails the test if the stored record's size reaches over an
	// extent with no committed pointer (all data written here is nonzero).
	covered := func(what string, ino uint64) uint64 {
		t.Helper()
		rec, err := e.getRecord(ino)
		if err != nil {
			t.Fatal(err)
		}
		for idx := uint64(0); idx*extentSize < rec.Size; idx++ {
			if _, ok, err := e.extentValue(ino, idx); err != nil || !ok {
				t.Fatalf("%s: stored size %d covers extent %d, which no commit holds", what, rec.Size, idx)
			}
		}
		return rec.Size
	}

	a, _ := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	e.Write(ctx, a.Ino, testutil.RandBytes(1, 10*extentSize), 0)
	entered, release := gate.arm()
	done := make(chan error, 1)
	go func() { done <- e.Seal(ctx) }()
	<-entered // the snapshot is taken; its upload waits
	if _, err := e.SetAttr(ctx, a.Ino, SetAttr{Valid: SetSize, Size: 3 * extentSize}); err != nil {
		t.Fatal(err)
	}
	e.Write(ctx, a.Ino, testutil.RandBytes(2, 3*extentSize), 3*extentSize)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := covered("truncate and append during the upload", a.Ino); got > 3*extentSize {
		t.Fatalf("stored size %d", got)
	}
	if err := e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if got := covered("after the next barrier", a.Ino); got != 6*extentSize {
		t.Fatalf("stored size %d after the barrier, want %d", got, 6*extentSize)
	}

	// A 2 MiB file flushed as several 256 KiB segments: check the record
	// while a later segment is still uploading.
	// Small segments, each upload slow.
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err = Open(ctx, Options{Store: gate, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour, SegmentTarget: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	slow.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: "segments/", Latency: 300 * time.Millisecond})
	b, _ := e.Create(ctx, RootIno, "g", 0o644, 0, 0)
	e.Write(ctx, b.Ino, testutil.RandBytes(3, 64*extentSize), 0)
	go func() { done <- e.Seal(ctx) }()
	checks := 0
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-time.After(5 * time.Millisecond):
			if hasPointer(e, b.Ino) {
				covered("a flush split over segments, midway", b.Ino)
				checks++
			}
		}
	}
	if checks == 0 {
		t.Fatal("no check while the split flush was midway")
	}
	if got := covered("the split flush, done", b.Ino); got != 64*extentSize {
		t.Fatalf("stored size %d, want %d", got, 64*extentSize)
	}
}

// hasPointer reports whether any extent of ino has a committed pointer.
func hasPointer(e *Engine, ino uint64) bool {
	_, ok, _ := e.extentValue(ino, 0)
	return ok
}

// putGate holds the next segment PUT once armed: entered is closed when
// it arrives, and it goes on when release is closed.
type putGate struct {
	objstore.Store
	mu               sync.Mutex
	entered, release chan struct{}
}

func (g *putGate) arm() (entered, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	return g.entered, g.release
}

func (g *putGate) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (string, error) {
	if strings.HasPrefix(key, "segments/") {
		g.mu.Lock()
		entered, release := g.entered, g.release
		g.entered = nil
		g.mu.Unlock()
		if entered != nil {
			close(entered)
			<-release
		}
	}
	return g.Store.Put(ctx, key, data, opts)
}
