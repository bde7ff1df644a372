package segread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/segment"
)

// TestReadsWaitForFramesInFlight: reads of frames that another read is
// fetching wait for that fetch instead of fetching them again, however
// they overlap: a run, a run that overlaps it (which fetches only the
// frames past it, not reading through those in flight), one frame of it,
// and a Fill of both runs make two GETs in all, each frame fetched once.
// The GETs are held until every read is waiting, so no read can finish
// before another starts, whatever the machine's speed.
func TestReadsWaitForFramesInFlight(t *testing.T) {
	f := newFixture(t, 10)
	gs := &gateStore{countingStore: f.cs, gate: make(chan struct{})}
	r, err := NewReader(ReaderOptions{Store: gs, Keys: f.k, Logger: discardLogger(), DiskDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	check := func(what string, out [][]byte, idx []int, err error) {
		if err == nil {
			for j, i := range idx {
				if !bytes.Equal(out[j], f.plains[i]) {
					err = fmt.Errorf("frame %d differs", i)
				}
			}
		}
		if err != nil {
			errs <- fmt.Errorf("%s: %w", what, err)
		}
	}
	span := func(a, b int) []int {
		var s []int
		for i := a; i < b; i++ {
			s = append(s, i)
		}
		return s
	}
	run := func(what string, idx []int, fillOnly bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []segment.FrameID
			var ps []segment.Pointer
			for _, i := range idx {
				ids, ps = append(ids, f.ids[i]), append(ps, f.ps[i])
			}
			if fillOnly {
				check(what, nil, nil, fill(r, ctx, ids, ps))
				return
			}
			out, err := runOf(r, ctx, ids, ps)
			check(what, out, idx, err)
		}()
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what, cond)
	}
	run("run 0-7", span(0, 8), false)
	wait("the first GET", func() bool { return gs.count("getrange") == 1 })
	run("run 2-9", span(2, 10), false)
	wait("the second GET", func() bool { return gs.count("getrange") == 2 })
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, err := readOf(r, ctx, f.ids[4], f.ps[4])
		check("frame 4", [][]byte{got}, []int{4}, err)
	}()
	run("fill 0-9", span(0, 10), true)
	// Waiting: run 2-9 for frames 2-7, frame 4's read, and the fill for
	// all ten.
	wait("every read waiting", func() bool { return r.Stats().Waits == 6+1+10 })
	close(gs.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	gs.mu.Lock()
	ranges := gs.ranges
	gs.mu.Unlock()
	want := [][2]int64{
		{int64(f.ps[0].Offset), int64(f.ps[7].End() - uint64(f.ps[0].Offset))},
		{int64(f.ps[8].Offset), int64(f.ps[9].End() - uint64(f.ps[8].Offset))},
	}
	if len(ranges) != 2 || ranges[0] != want[0] || ranges[1] != want[1] {
		t.Fatalf("GETs %v, want %v: each frame once", ranges, want)
	}
	if st := r.Stats(); st.BytesFetched != f.ps[9].End() {
		t.Fatalf("%d bytes fetched for %d bytes of frames", st.BytesFetched, f.ps[9].End())
	}
}

// TestCacheOnlyReadAsksNoStore: a read whose context is done from the
// start (fs's cache-only attempt) fails with the context's error without
// asking the store, and leaves nothing in flight for other reads to wait
// for.
func TestCacheOnlyReadAsksNoStore(t *testing.T) {
	f := newFixture(t, 4)
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir()})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := runOf(r, done, f.ids, f.ps); !errors.Is(err, context.Canceled) {
		t.Fatalf("run with a done context: %v, want context.Canceled", err)
	}
	if _, err := readOf(r, done, f.ids[1], f.ps[1]); !errors.Is(err, context.Canceled) {
		t.Fatalf("frame with a done context: %v, want context.Canceled", err)
	}
	if _, err := partOf(r, done, f.ids[2], f.ps[2], 0, 100); !errors.Is(err, context.Canceled) {
		t.Fatalf("part of a frame with a done context: %v, want context.Canceled", err)
	}
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests from reads with a done context", n)
	}
	r.mu.Lock()
	n := len(r.mu.flight)
	r.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d frames left in flight", n)
	}
	f.readRunAll(t, r)
	if g := f.cs.count("getrange"); g != 1 {
		t.Fatalf("%d GETs for the run afterwards, want 1", g)
	}
}

// TestStoreGroupsSplitAtBusyFrames: a group reads through a small gap
// unless a frame in it is being fetched by another read.
func TestStoreGroupsSplitAtBusyFrames(t *testing.T) {
	var ps []segment.Pointer
	for i := range 6 {
		ps = append(ps, segment.Pointer{Segment: 1, Offset: uint32(i * 1000), Length: 1000})
	}
	got := storeGroups(ps, []int{0, 2, 3, 5}, nil)
	if fmt.Sprint(got) != "[[0 2 3 5]]" {
		t.Fatalf("no frame busy: groups %v", got)
	}
	got = storeGroups(ps, []int{0, 2, 3, 5}, []int{1})
	if fmt.Sprint(got) != "[[0] [2 3 5]]" {
		t.Fatalf("frame 1 busy: groups %v", got)
	}
	got = storeGroups(ps, []int{0, 2, 3, 5}, []int{1, 4})
	if fmt.Sprint(got) != "[[0] [2 3] [5]]" {
		t.Fatalf("frames 1 and 4 busy: groups %v", got)
	}
}

// TestStreamPassesRunsToTheBack: a run that a stream (readRunTo) has read
// to its end is the first to make way in the memory cache, not the runs
// fetched ahead of the stream that it has not reached yet.
func TestStreamPassesRunsToTheBack(t *testing.T) {
	f := newFixture(t, 16)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{})
	runs := [][2]int{{0, 4}, {4, 8}, {8, 12}, {12, 16}}
	cost := func(k int) int64 {
		n := int64(0)
		for i := runs[k][0]; i < runs[k][1]; i++ {
			n += int64(f.ps[i].PlainLen) + memEntryOverhead
		}
		return n
	}
	r.mu.Lock()
	r.mu.mem = newMemCache(cost(0) + cost(1) + cost(2) + cost(3) - 1) // room for three of the four
	r.mu.mem.left = r.runLeft
	r.mu.Unlock()
	fillRun := func(k int) {
		t.Helper()
		a, b := runs[k][0], runs[k][1]
		if err := fill(r, ctx, f.ids[a:b], f.ps[a:b]); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 3 {
		fillRun(k)
	}
	// The stream reads the first run.
	dst := make([][]byte, 4)
	for i := range dst {
		dst[i] = make([]byte, f.ps[i].PlainLen)
	}
	if err := runTo(r, ctx, f.ids[:4], f.ps[:4], dst); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.MemHits != 4 {
		t.Fatalf("%d memory hits for the stream's run, want 4", st.MemHits)
	}
	fillRun(3) // pushes one run out
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range 16 {
		_, ok := r.mu.mem.get(f.segID, f.ps[i].Offset, f.ids[i])
		if read := i < 4; ok == read {
			t.Fatalf("frame %d cached %v after a fourth run pushed one out; want only the run the stream read gone", i, ok)
		}
	}
}

// TestFetchedRunCachedAsOneWrite: the frames of one GET go to the disk
// cache as one put, written with one write of the run past the page cache
// (the GET's buffer is placed for O_DIRECT), not frame by frame.
func TestFetchedRunCachedAsOneWrite(t *testing.T) {
	f := newFixture(t, 32)
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir(), MemoryBytes: 1 << 20})
	var writes [][2]int
	setDisk(r, func(c *diskCache) {
		c.writeFrames = func(data, idx string, off int64, b []byte, recs []diskEntry) error {
			writes = append(writes, [2]int{len(recs), int(uintptr(unsafe.Pointer(&b[0]))-uintptr(off)) & (directio.Align - 1)})
			return writeSegmentFrames(data, idx, off, b, recs)
		}
	})
	f.readRunAll(t, r)
	r.disk.sync()
	if len(writes) != 1 || writes[0][0] != 32 || writes[0][1] != 0 {
		t.Fatalf("disk cache writes (frames, misalignment): %v; want one of 32 frames, aligned", writes)
	}
	if st := r.Stats(); st.DiskEntries != 32 {
		t.Fatalf("%d frames in the disk cache, want 32", st.DiskEntries)
	}
}

// TestKeptBuffersReusedOnceWritten: the buffer a fetched run waits in for
// the disk cache is used again for another GET only once the cache has
// written it: a run fetched while the writer is held gets a buffer of
// its own, both come back once written, and every frame the cache wrote
// reads back right from it.
func TestKeptBuffersReusedOnceWritten(t *testing.T) {
	f := newFixture(t, 160)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir(), MemoryBytes: 1 << 20})
	if span := f.ps[79].End() - uint64(f.ps[0].Offset); span <= runBufSize/2 || span > runBufSize {
		t.Fatalf("a run of 80 frames is %d bytes: not a pooled size", span)
	}
	entered, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	setDisk(r, func(c *diskCache) {
		c.writeFrames = func(data, idx string, off int64, b []byte, recs []diskEntry) error {
			once.Do(func() { close(entered); <-hold })
			return writeSegmentFrames(data, idx, off, b, recs)
		}
	})
	if err := fill(r, ctx, f.ids[:80], f.ps[:80]); err != nil {
		t.Fatal(err)
	}
	<-entered // the writer holds the first run's buffer
	if err := fill(r, ctx, f.ids[80:160], f.ps[80:160]); err != nil {
		t.Fatal(err)
	}
	close(hold)
	r.disk.sync()
	r.bufs.mu.Lock()
	kept := len(r.bufs.kept)
	r.bufs.mu.Unlock()
	if kept != 2 {
		t.Fatalf("%d buffers back in the pool once both runs were written, want 2", kept)
	}
	r.mu.Lock()
	r.mu.mem = newMemCache(1 << 20)
	r.mu.Unlock()
	f.cs.reset()
	f.readRunAll(t, r)
	if st := r.Stats(); f.cs.total() != 0 || st.DiskCorrupt != 0 || st.DiskHits != 160 {
		t.Fatalf("reading back: %d store requests, %d damaged, %d disk hits (want 0, 0, 160)", f.cs.total(), st.DiskCorrupt, st.DiskHits)
	}
}
