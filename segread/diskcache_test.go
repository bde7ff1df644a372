package segread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/fileutil"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"golang.org/x/sys/unix"
)

// fakeDisk is a filesystem of total bytes whose free space is what the
// frame files in the cache leave of room (set by the test).
type fakeDisk struct {
	total int64
	room  int64 // free space with the cache empty
	c     *diskCache
}

// statfs is called with c.mu held.
func (d *fakeDisk) statfs(string) (int64, int64, error) {
	var used int64
	for el := d.c.lru.Front(); el != nil; el = el.Next() {
		used += diskBlock(el.Value.(*diskEntry).length)
	}
	return d.total, d.room - used, nil
}

func setDisk(r *Reader, f func(c *diskCache)) {
	r.disk.mu.Lock()
	defer r.disk.mu.Unlock()
	f(r.disk)
}

// TestDiskCacheKeepsFilesystemReserve: with a disk_size far above what the
// filesystem has, the cache stops at the filesystem's reserve; when
// something else takes the free space it evicts (the watcher, without a
// read), and reads go on from the store.
func TestDiskCacheKeepsFilesystemReserve(t *testing.T) {
	f := newFixture(t, 10)
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: t.TempDir(), DiskBytes: 1 << 40})
	var frame int64 // the largest frame's blocks
	for _, p := range f.ps {
		frame = max(frame, diskBlock(p.Length))
	}
	d := &fakeDisk{total: 100 << 20, c: r.disk}
	reserve := diskReserve(d.total)
	if reserve != 16<<20 || diskReserve(1<<40) != 1<<30 || diskReserve(1<<30) != (1<<30)/10 {
		t.Fatalf("reserves: %d, %d, %d", reserve, diskReserve(1<<40), diskReserve(1<<30))
	}
	free := func() int64 {
		r.disk.mu.Lock()
		defer r.disk.mu.Unlock()
		_, avail, _ := d.statfs("")
		return avail
	}
	d.room = reserve + 4*frame + frame/2 // room for at least 4 frames above the reserve
	setDisk(r, func(c *diskCache) { c.statfs = d.statfs })
	f.readAll(t, r, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	if fr := free(); fr < reserve {
		t.Fatalf("the cache left %d bytes free, below the reserve %d", fr, reserve)
	}
	f.cs.reset()
	f.readAll(t, r, 9, 8, 7, 6)
	if g := f.cs.count("getrange"); g != 0 {
		t.Fatalf("the 4 most recent frames cost %d GETs", g)
	}

	// Something else takes the free space: room for one frame is left.
	setDisk(r, func(c *diskCache) { d.room = reserve + frame })
	r.disk.watch()
	if st := r.Stats(); st.DiskEntries < 1 || free() < reserve {
		t.Fatalf("after the disk filled: %+v, %d free (reserve %d)", st, free(), reserve)
	}
	// Below the reserve: the cache empties itself.
	setDisk(r, func(c *diskCache) { d.room = reserve / 2 })
	r.disk.watch()
	if st := r.Stats(); st.DiskEntries != 0 || st.DiskBytes != 0 {
		t.Fatalf("below the reserve the cache still holds %+v", st)
	}
	f.cs.reset()
	f.readAll(t, r, 0, 1, 2)
	if st := r.Stats(); st.DiskEntries != 0 {
		t.Fatalf("cached %d frames with no room", st.DiskEntries)
	}
	if g := f.cs.count("getrange"); g != 3 {
		t.Fatalf("%d GETs for 3 reads with no disk cache room", g)
	}

	// Space returns: caching resumes.
	setDisk(r, func(c *diskCache) { d.room = reserve + 10*frame })
	f.readAll(t, r, 3, 4)
	if st := r.Stats(); st.DiskEntries != 2 {
		t.Fatalf("after space returned the cache holds %d frames, want 2", st.DiskEntries)
	}
	if freed := r.ShrinkDiskCache(1); freed <= 0 || freed > frame {
		t.Fatalf("ShrinkDiskCache(1) freed %d, want one frame", freed)
	}
	if st := r.Stats(); st.DiskEntries != 1 {
		t.Fatalf("after a shrink of one frame: %d entries", st.DiskEntries)
	}
}

// TestDiskCacheEIO: a cache disk that fails every read and write (EIO)
// costs store requests, never a failed or wrong read; the failing writes
// are logged once, and their end once.
func TestDiskCacheEIO(t *testing.T) {
	f := newFixture(t, 6)
	var logs testutil.SyncBuffer
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	f.readAll(t, r, 0, 1)
	if st := r.Stats(); st.DiskEntries != 2 {
		t.Fatalf("%d entries", st.DiskEntries)
	}
	eio := func(*os.File, *directio.File, int64, int, []byte) ([]byte, error) { return nil, syscall.EIO }
	eioW := func(string, string, int64, []byte, []diskEntry) error { return syscall.EIO }
	setDisk(r, func(c *diskCache) { c.readFrame, c.writeFrames = eio, eioW })

	// Cached frames that cannot be read are fetched again and dropped.
	f.cs.reset()
	f.readAll(t, r, 0, 1)
	if g := f.cs.count("getrange"); g != 2 {
		t.Fatalf("%d GETs for 2 frames the disk could not read", g)
	}
	if st := r.Stats(); st.DiskEntries != 0 {
		t.Fatalf("unreadable entries kept: %+v", st)
	}
	// New frames cannot be written: nothing cached, reads fine.
	f.readAll(t, r, 2, 3, 4)
	if st := r.Stats(); st.DiskEntries != 0 {
		t.Fatalf("entries cached through a failing write: %+v", st)
	}
	if n := strings.Count(logs.String(), "cannot write frames"); n != 1 {
		t.Fatalf("failing writes logged %d times, want once:\n%s", n, logs.String())
	}
	// The disk recovers.
	setDisk(r, func(c *diskCache) { c.readFrame, c.writeFrames = readSpanFile, writeSegmentFrames })
	f.readAll(t, r, 5)
	f.cs.reset()
	f.readAll(t, r, 5)
	if st := r.Stats(); st.DiskEntries != 1 || st.DiskHits != 1 || f.cs.count("getrange") != 0 {
		t.Fatalf("after recovery: %+v, %d GETs", st, f.cs.count("getrange"))
	}
	if !strings.Contains(logs.String(), "writing frames again") {
		t.Fatalf("recovery not logged:\n%s", logs.String())
	}
}

// TestDiskCacheOpenTidiesUp: at open the cache removes the entries of the
// earlier one-file-per-frame layout and its temporary files, segment files
// no index lists and indexes with no segment file, keeps files it does not
// know, and lists a frame only where its file holds it.
func TestDiskCacheOpenTidiesUp(t *testing.T) {
	f := newFixture(t, 4)
	dir := t.TempDir()
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
	f.readAll(t, r, 0, 1, 2, 3)
	r.Close()
	shard := filepath.Join(dir, "17")
	data := filepath.Join(shard, fmt.Sprintf("%016x", f.segID))
	// Frame 1 evicted by an earlier run: a hole where it was.
	if err := punchHole(data, int64(f.ps[1].Offset), int64(f.ps[1].Length)); err != nil {
		t.Fatal(err)
	}
	stale := []string{
		filepath.Join(shard, fmt.Sprintf("%016x-%08x-%08x", f.segID, 0, 100)), // old layout
		filepath.Join(shard, diskTmpPrefix+"123"),
		filepath.Join(shard, "0000000000000117"),     // frames nothing lists
		filepath.Join(shard, "0000000000000217.idx"), // a list with no frames
	}
	keep := []string{filepath.Join(shard, "README"), filepath.Join(shard, "0000000000000318.idx")}
	for _, p := range append(append([]string{}, stale...), keep...) {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.cs.reset()
	r2 := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
	if st := r2.Stats(); st.DiskEntries != 3 {
		t.Fatalf("after open %d entries, want 3 (frame 1 was punched out)", st.DiskEntries)
	}
	for _, p := range stale {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left at open (%v)", filepath.Base(p), err)
		}
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed at open", filepath.Base(p))
		}
	}
	f.readAll(t, r2, 0, 1, 2, 3)
	if g, st := f.cs.count("getrange"), r2.Stats(); g != 1 || st.DiskHits != 3 || st.DiskCorrupt != 0 {
		t.Fatalf("%d GETs, %+v; want 1 GET (frame 1) and 3 disk hits", g, st)
	}
}

// TestReadRunFromDiskCache: a run of frames in the disk cache is read with
// one read of its span (through the hole of a frame evicted from its
// middle), decrypted in place and kept in memory as one run; the evicted
// frame and a damaged one come from the store (one GET), and the damaged
// one is dropped from the disk cache.
func TestReadRunFromDiskCache(t *testing.T) {
	f := newFixture(t, 8)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir(), MemoryBytes: 1 << 20})
	if _, err := runOf(r, ctx, f.ids, f.ps); err != nil {
		t.Fatal(err)
	}
	r.disk.sync()
	// Frame 3 evicted (punched out); frame 5 damaged on disk.
	r.disk.mu.Lock()
	r.disk.removeLocked(r.disk.segs[f.segID].frames[f.ps[3].Offset], true)
	r.disk.mu.Unlock()
	data := r.disk.dataPath(f.segID)
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	b[f.ps[5].Offset+f.ps[5].Length/2] ^= 1
	if err := os.WriteFile(data, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var reads [][2]int64
	setDisk(r, func(c *diskCache) {
		c.readFrame = func(fl *os.File, df *directio.File, off int64, n int, buf []byte) ([]byte, error) {
			reads = append(reads, [2]int64{off, int64(n)})
			return readSpanFile(fl, df, off, n, buf)
		}
	})
	r.mu.Lock()
	r.mu.mem = newMemCache(1 << 20)
	r.mu.Unlock()
	f.cs.reset()
	before := r.Stats()
	out, err := runOf(r, ctx, f.ids, f.ps)
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if !bytes.Equal(out[i], f.plains[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	st := r.Stats()
	if len(reads) != 1 || reads[0] != [2]int64{int64(f.ps[0].Offset), int64(f.ps[7].End()) - int64(f.ps[0].Offset)} {
		t.Fatalf("disk reads %v, want one of the whole span", reads)
	}
	if hits := st.DiskHits - before.DiskHits; hits != 6 || st.DiskCorrupt-before.DiskCorrupt != 1 {
		t.Fatalf("%d disk hits (want 6), %d damaged (want 1)", hits, st.DiskCorrupt-before.DiskCorrupt)
	}
	// The two are close enough for one GET, which reads through frame 4.
	if g := f.cs.count("getrange"); g != 1 || f.cs.ranges[0] != [2]int64{int64(f.ps[3].Offset), int64(f.ps[5].End()) - int64(f.ps[3].Offset)} {
		t.Fatalf("%d GETs (%v), want 1 of frames 3-5", g, f.cs.ranges)
	}
	if st.MemEntries != 8 {
		t.Fatalf("%d frames in memory after the run, want 8", st.MemEntries)
	}
	// In memory now: no read of the disk or the store.
	reads = nil
	f.cs.reset()
	if _, err := runOf(r, ctx, f.ids, f.ps); err != nil || len(reads) != 0 || f.cs.total() != 0 {
		t.Fatalf("warm run: %v, %d disk reads, %d requests", err, len(reads), f.cs.total())
	}
}

// TestRelocatedStaysCached: frames that repack copies into a new segment
// are found in the caches at their new pointers when they were cached at
// their old ones, with no request to the store; frames that were not
// cached stay uncached.
func TestRelocatedStaysCached(t *testing.T) {
	f, r := bothCaches(t, 8, 4) // 4-7 never read
	ctx := context.Background()
	encoded, err := sealedOf(r, ctx, f.ps)
	if err != nil {
		t.Fatal(err)
	}
	// The repack output: every frame, in reverse order, so that no new
	// pointer equals an old one.
	const out = 0x0000000300000001
	b := segment.NewBuilder(f.k, out, segment.CodecNone)
	moves := make([]segment.Move, 0, len(f.ps))
	for i := len(f.ps) - 1; i >= 0; i-- {
		np := b.AddEncoded(f.ids[i], encoded[i], f.ps[i].PlainLen)
		moves = append(moves, segment.Move{Ino: f.ids[i].Ino, Extent: f.ids[i].Extent, Old: f.ps[i], New: np})
	}
	obj := b.Finish()
	r.Relocated(obj, moves)
	r.disk.sync()
	newPtr := func(i int) segment.Pointer { return moves[len(moves)-1-i].New }

	// The output is not in the store: a cached frame must not need it.
	f.cs.reset()
	for i := range 4 {
		got, err := readOf(r, ctx, f.ids[i], newPtr(i))
		if err != nil || !bytes.Equal(got, f.plains[i]) {
			t.Fatalf("frame %d at its new place: %v", i, err)
		}
	}
	if f.cs.total() != 0 {
		t.Fatalf("%d requests for frames cached before the repack", f.cs.total())
	}
	// From the disk cache alone (a new memory cache).
	r.mu.Lock()
	r.mu.mem = newMemCache(1 << 20)
	r.mu.Unlock()
	before := r.Stats()
	for i := range 4 {
		got, err := readOf(r, ctx, f.ids[i], newPtr(i))
		if err != nil || !bytes.Equal(got, f.plains[i]) {
			t.Fatalf("frame %d from the disk cache at its new place: %v", i, err)
		}
	}
	if hits := r.Stats().DiskHits - before.DiskHits; hits != 4 || f.cs.total() != 0 {
		t.Fatalf("%d disk hits and %d requests, want 4 and 0", hits, f.cs.total())
	}
	// Frames that were not cached are not admitted at their new place.
	if _, err := readOf(r, ctx, f.ids[6], newPtr(6)); err == nil {
		t.Fatal("a frame that was not cached was read from its new place without the store")
	}
}

// TestAdmitOverflowKeepsUploadedFrames: an uploaded object admitted while
// the queue is full waits in the overflow and is written once the writer
// gets to it, instead of being left out (a writer uploading faster than the
// cache disk absorbed lost whole segments of what it had just written); one
// that finds the overflow full is left out, so the memory held stays
// bounded.
func TestAdmitOverflowKeepsUploadedFrames(t *testing.T) {
	// The writer is held in its first write.
	f, r, free := heldWriter(t, 8, 7)
	c := r.disk
	c.queued.Add(diskQueueBytes)

	r.Admit(f.data, f.ps[:4], nil) // no room in the queue: into the overflow
	c.closeMu.Lock()
	full := diskOverflowBytes - c.overflowBytes
	c.overflowBytes += full
	c.closeMu.Unlock()
	r.Admit(f.data, f.ps[4:7], nil) // the overflow is full: left out
	c.closeMu.Lock()
	c.overflowBytes -= full
	c.closeMu.Unlock()
	c.queued.Add(-diskQueueBytes)
	free()
	c.sync()
	if got, want := r.Stats().DiskSkipped, uint64(sumLength(f.ps[4:7])); got != want {
		t.Fatalf("DiskSkipped = %d, want %d (the frames left out)", got, want)
	}

	f.cs.reset()
	f.readAll(t, r, 0, 1, 2, 3)
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for frames admitted through the overflow, want 0", n)
	}
	before := f.cs.total()
	f.readAll(t, r, 4)
	if f.cs.total() == before {
		t.Fatal("a frame admitted with the overflow taken was cached; the overflow is not bounded")
	}
}

func sumLength(ps []segment.Pointer) int64 {
	var n int64
	for _, p := range ps {
		n += int64(p.Length)
	}
	return n
}

// TestAdmitBoundsHeldMemory: an admitted object is held until its frames are
// written, so the queue and the overflow count the whole object, not its
// admitted frames; an object of which few frames are admitted (the cached
// frames of a repack output) has them copied out and is not held.
func TestAdmitBoundsHeldMemory(t *testing.T) {
	_, r, free := heldWriter(t, 1, 0)
	c := r.disk
	held := func() int64 {
		c.closeMu.Lock()
		defer c.closeMu.Unlock()
		return c.queued.Load() + c.overflowBytes
	}
	base := held()

	// Three 33 MiB segments of 1 MiB frames, all admitted: the first
	// waits in the queue, the second in the overflow, and the third fits
	// in neither whole, so as many of its frames as the larger room left
	// (the overflow's 31 MiB) holds are copied out.
	// Each object's owner gets it back once the cache no longer reads
	// it: the held ones after they are written, the others at once.
	const frame, frames = 1 << 20, 33
	const objSize = frame * frames
	var released [4]atomic.Int32
	releases := func() (n [4]int32) {
		for i := range released {
			n[i] = released[i].Load()
		}
		return n
	}
	for i := range 3 {
		seg := uint64(0x0000000500000000 + i)
		ps := make([]segment.Pointer, frames)
		for j := range ps {
			ps[j] = segment.Pointer{Segment: seg, Offset: uint32(j * frame), Length: frame, PlainLen: frame - 41}
		}
		r.Admit(make([]byte, objSize), ps, func() { released[i].Add(1) })
	}
	const copied = (diskOverflowBytes - objSize) / frame
	if got, want := held()-base, int64(2*objSize+copied*frame); got != want {
		t.Fatalf("admissions hold %d bytes by the count, want %d (two whole objects and %d copied frames)", got, want, copied)
	}
	if got, want := r.Stats().DiskSkipped, uint64((frames-copied)*frame); got != want {
		t.Fatalf("DiskSkipped = %d, want %d (the third object's frames that did not fit)", got, want)
	}

	// A 100 MiB repack output with two cached frames: copied, 8 KiB held.
	before := held()
	r.Admit(make([]byte, 100<<20), []segment.Pointer{
		{Segment: 0x0000000600000000, Offset: 1 << 20, Length: 4096, PlainLen: 4055},
		{Segment: 0x0000000600000000, Offset: 90 << 20, Length: 4096, PlainLen: 4055},
	}, func() { released[3].Add(1) })
	if got := held() - before; got != 8192 {
		t.Fatalf("a sparse admission of a 100 MiB object holds %d bytes by the count, want 8192 (its frames, copied)", got)
	}
	if got, want := releases(), [4]int32{0, 0, 1, 1}; got != want {
		t.Fatalf("releases before the writer wrote anything: %v, want %v (the held objects not yet, the copied ones once)", got, want)
	}
	free()
	c.sync()
	if got, want := releases(), [4]int32{1, 1, 1, 1}; got != want {
		t.Fatalf("releases once the queue and overflow are written: %v, want %v", got, want)
	}
	if got := held(); got != 0 {
		t.Fatalf("%d bytes still counted as held after the queue was written", got)
	}
	if n, entries := c.stats(); entries != 1+2*frames+copied+2 {
		t.Fatalf("disk cache holds %d entries (%d bytes) after the admissions were written, want %d", entries, n, 1+2*frames+copied+2)
	}
}

// TestSyncWithFullQueue: sync (and so forget, which reclamation calls
// during reads) waits for its marker to get into a queue full by count
// while holding closeMu; the writer must be able to empty the queue
// meanwhile. An overflow step that took closeMu once deadlocked here.
func TestSyncWithFullQueue(t *testing.T) {
	f, r, free := heldWriter(t, 1, 0)
	c := r.disk
	for len(c.q) < cap(c.q) {
		c.put(f.ps[0], f.data[f.ps[0].Offset:f.ps[0].End()])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.forget(0x0000000700000000)
	}()
	time.Sleep(50 * time.Millisecond) // forget is waiting to queue its marker
	free()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("forget did not return once the writer was released: the writer is stuck behind sync")
	}
}

// TestAdmitCopiesUpToTheQueueBound: of a run of frames longer than the
// queue's bound in an object too large to hold, the frames that fit are
// copied out and cached; only the rest is left out.
func TestAdmitCopiesUpToTheQueueBound(t *testing.T) {
	f := newFixture(t, 1)
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: t.TempDir(), DiskBytes: 1 << 30})
	const frame, frames = 1 << 20, 70
	ps := make([]segment.Pointer, frames)
	for j := range ps {
		ps[j] = segment.Pointer{Segment: 0x0000000800000000, Offset: uint32(j * frame), Length: frame, PlainLen: frame - 41}
	}
	r.Admit(make([]byte, 100<<20), ps, nil)
	r.disk.sync()
	if _, entries := r.disk.stats(); entries != diskQueueBytes/frame {
		t.Fatalf("%d frames cached, want %d (as many as the queue's bound holds)", entries, diskQueueBytes/frame)
	}
	if got, want := r.Stats().DiskSkipped, uint64(frames*frame-diskQueueBytes); got != want {
		t.Fatalf("DiskSkipped = %d, want %d", got, want)
	}
}

// heldWriter returns a fixture of n frames and a reader with a disk cache
// whose writer is stopped in the write of frame i until free is called (at
// the latest when the test ends, before the reader's Close, which waits
// for the writer).
func heldWriter(t *testing.T, n, i int) (*fixture, *Reader, func()) {
	f := newFixture(t, n)
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: t.TempDir(), DiskBytes: 1 << 30})
	entered, release := make(chan struct{}), make(chan struct{})
	var once, unblock sync.Once
	setDisk(r, func(c *diskCache) {
		c.writeFrames = func(data, idx string, off int64, b []byte, recs []diskEntry) error {
			once.Do(func() { close(entered); <-release })
			return writeSegmentFrames(data, idx, off, b, recs)
		}
	})
	free := func() { unblock.Do(func() { close(release) }) }
	t.Cleanup(free)
	r.disk.put(f.ps[i], f.data[f.ps[i].Offset:f.ps[i].End()])
	<-entered
	return f, r, free
}

// TestDiskCacheRunSkipsPageCache: a run of objstore.DirectMin bytes or
// more read back from the disk cache comes past the page cache, through a
// descriptor of its own (the cache file's shared one is left as it was),
// and its frames are right; a single frame is still read through it.
func TestDiskCacheRunSkipsPageCache(t *testing.T) {
	f := newFixture(t, 32)
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir(), MemoryBytes: 1 << 20})
	f.readRunAll(t, r)
	r.disk.sync()
	span := int(f.ps[31].End() - uint64(f.ps[0].Offset))
	if span < objstore.DirectMin {
		t.Fatalf("the fixture's run is %d bytes, below %d", span, objstore.DirectMin)
	}
	path := r.disk.dataPath(f.segID)
	size := int(f.ps[31].End())
	fl, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = fl.Sync()
	err = unix.Fadvise(int(fl.Fd()), 0, 0, unix.FADV_DONTNEED)
	fl.Close()
	if k, rerr := fileutil.ResidentPages(path, size); err != nil || rerr != nil || k != 0 {
		t.Skipf("this filesystem kept %d pages after FADV_DONTNEED (%v, %v): nothing to measure", k, err, rerr)
	}
	forget := func() {
		r.mu.Lock()
		r.mu.mem = newMemCache(1 << 20)
		r.mu.Unlock()
	}
	forget()
	f.cs.reset()
	f.readRunAll(t, r)
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for a run the disk cache holds", n)
	}
	if k, err := fileutil.ResidentPages(path, size); err != nil || k != 0 {
		t.Fatalf("the run was read through the page cache: %d pages of the cache file in it (%v)", k, err)
	}
	// A single frame and a piece of one (random reads) go past the page
	// cache too, through the file's O_DIRECT descriptor.
	forget()
	f.readAll(t, r, 5)
	p := f.ps[9]
	part, err := partOf(r, context.Background(), f.ids[9], p, 100, int(p.PlainLen)-100)
	if err != nil || !bytes.Equal(part, f.plains[9][100:int(p.PlainLen)-100]) {
		t.Fatalf("a part of frame 9: %v, or wrong bytes", err)
	}
	if k, err := fileutil.ResidentPages(path, size); err != nil || k != 0 || f.cs.total() != 0 {
		t.Fatalf("single frames: %d pages of the cache file in the page cache (%v), %d store requests", k, err, f.cs.total())
	}
	// The shared descriptor is not left O_DIRECT, and a file the page
	// cache holds is read through it.
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	forget()
	f.readAll(t, r, 5, 6)
	f.readRunAll(t, r)
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for frames the disk cache holds", n)
	}
}

// TestReadSpanFileEnds: a cache file's span running past its end is what
// the file has, read directly or not, and so is a span into a buffer
// without room for a direct read.
func TestReadSpanFileEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	want := make([]byte, 3<<20+1234)
	rand.New(rand.NewSource(3)).Read(want)
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var df directio.File
	defer df.Close()
	off := len(want) - 300001
	for _, buf := range [][]byte{make([]byte, 1<<20+directio.Slack), make([]byte, 1<<20), nil} {
		got, err := readSpanFile(f, &df, int64(off), 1<<20, buf)
		if err != nil || !bytes.Equal(got, want[off:]) {
			t.Fatalf("a span past the end (buffer of %d): %v, %d bytes, want the last 300001", len(buf), err, len(got))
		}
	}
	got, err := readSpanFile(f, &df, 12345, 600000, make([]byte, 600000+directio.Slack))
	if err != nil || !bytes.Equal(got, want[12345:12345+600000]) {
		t.Fatalf("a span inside the file: %v", err)
	}
}

// TestReadRunToFromDiskCache: a stream's run (ReadRunTo) of frames the
// disk cache holds is decrypted into the caller's buffers from the cache,
// from a span read ahead out of it where there is one, with no store
// request and nothing put in the memory cache; a damaged entry is dropped
// and read from the store, as are frames the cache lacks (and those go
// into the caches). ReadAhead takes only runs the cache holds whole.
func TestReadRunToFromDiskCache(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 32)
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir(), MemoryBytes: 1 << 20})
	if _, err := runOf(r, ctx, f.ids[:24], f.ps[:24]); err != nil {
		t.Fatal(err)
	}
	r.disk.sync()
	r.mu.Lock()
	r.mu.mem = newMemCache(1 << 20)
	r.mu.Unlock()
	// Damage frames 5 and 10 (the second inside the span read ahead) in
	// the cache's file.
	fl, err := os.OpenFile(r.disk.dataPath(f.segID), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{5, 10} {
		if _, err := fl.WriteAt([]byte("damage"), int64(f.ps[i].Offset)+40); err != nil {
			t.Fatal(err)
		}
	}
	fl.Close()
	if aheadOf(r, ctx, f.ps[20:28]) {
		t.Fatal("ReadAhead took a run the disk cache holds only part of")
	}
	if !aheadOf(r, ctx, f.ps[8:16]) {
		t.Fatal("ReadAhead refused a run the disk cache holds whole")
	}
	f.cs.reset()
	before := r.Stats()
	dst := make([][]byte, len(f.ps))
	for i, p := range f.ps {
		dst[i] = make([]byte, p.PlainLen)
	}
	// In two reads, as a stream's requests come: the first leaves the
	// span read ahead half used, so it is still there when frame 10 is
	// read again from the store.
	for _, part := range [][2]int{{0, 12}, {12, len(f.ps)}} {
		a, b := part[0], part[1]
		if err := runTo(r, ctx, f.ids[a:b], f.ps[a:b], dst[a:b]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range dst {
		if !bytes.Equal(dst[i], f.plains[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	after := r.Stats()
	if got := after.DiskHits - before.DiskHits; got != 22 {
		t.Fatalf("%d frames read from the disk cache, want 22 (24 held, two damaged)", got)
	}
	if got := after.AheadHits - before.AheadHits; got != 8 {
		t.Fatalf("%d frames from the span read ahead, want 8", got)
	}
	if got := after.DiskCorrupt - before.DiskCorrupt; got != 2 {
		t.Fatalf("%d damaged entries dropped, want 2", got)
	}
	if got := after.Corrupt - before.Corrupt; got != 0 {
		t.Fatalf("%d frames counted as corrupt in the store: a damaged cache entry was taken for the store's", got)
	}
	if got := after.Misses - before.Misses; got != 10 {
		t.Fatalf("%d frames from the store, want 10 (the damaged two and the 8 not cached)", got)
	}
	if f.cs.total() == 0 {
		t.Fatal("no store request for frames the disk cache lacks")
	}
	if after.MemEntries > 10 {
		t.Fatalf("the memory cache holds %d frames after the stream; the ones from the disk cache went into it", after.MemEntries)
	}
	// The frames fetched went into the disk cache: read again, nothing
	// goes to the store.
	r.disk.sync()
	r.mu.Lock()
	r.mu.mem = newMemCache(1 << 20)
	r.mu.Unlock()
	f.cs.reset()
	if err := runTo(r, ctx, f.ids, f.ps, dst); err != nil {
		t.Fatal(err)
	}
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for a run the disk cache now holds whole", n)
	}
	for i := range dst {
		if !bytes.Equal(dst[i], f.plains[i]) {
			t.Fatalf("frame %d differs on the second read", i)
		}
	}
}

// TestQueuedFramesRead: frames waiting for the disk cache's writer (an
// uploaded object admitted, a frame fetched and put) are read out of the
// queue, whole, as a stream or in part, with no store request, and the
// object is released only once they are written. Without this, a repack
// output's frames, or those just uploaded, were read from the store
// until the writer got to them. A span over several queued runs is read
// from the store and not taken for a damaged entry.
func TestQueuedFramesRead(t *testing.T) {
	f, r, free := heldWriter(t, 8, 7) // frame 7's put is being written, held
	ctx := context.Background()
	var released atomic.Int32
	r.Admit(f.data, f.ps[:6], func() { released.Add(1) })
	f.cs.reset()
	check := func(what string, i int, got []byte, err error) {
		t.Helper()
		if err != nil || !bytes.Equal(got, f.plains[i]) {
			t.Fatalf("%s of queued frame %d: %v", what, i, err)
		}
	}
	for _, i := range []int{0, 3, 5, 7} {
		got, err := readOf(r, ctx, f.ids[i], f.ps[i])
		check("Read", i, got, err)
	}
	stream := func(from, to int) {
		t.Helper()
		dst := make([][]byte, to-from)
		for j := range dst {
			dst[j] = make([]byte, f.ps[from+j].PlainLen)
		}
		err := runTo(r, ctx, f.ids[from:to], f.ps[from:to], dst)
		for j := range dst {
			check("ReadRunTo", from+j, dst[j], err)
		}
	}
	stream(0, 6)
	part, err := partOf(r, ctx, f.ids[2], f.ps[2], 100, 5000)
	if err != nil || !bytes.Equal(part, f.plains[2][100:5000]) {
		t.Fatalf("ReadPart of a queued frame: %v", err)
	}
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for queued frames, want 0", n)
	}
	if n := released.Load(); n != 0 {
		t.Fatal("the admitted object was released before its frames were written")
	}

	// Frame 6 queued on its own: frames 5-7 lie in three queued runs,
	// read as one span.
	r.disk.put(f.ps[6], f.data[f.ps[6].Offset:f.ps[6].End()])
	stream(5, 8)
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for a span over three queued runs, want 0", n)
	}

	free()
	r.disk.sync()
	if n := released.Load(); n != 1 {
		t.Fatalf("the admitted object was released %d times once written, want 1", n)
	}
	r.disk.mu.Lock()
	pending := len(r.disk.pend)
	r.disk.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d segments still have queued runs after sync", pending)
	}
	f.cs.reset()
	stream(0, 8)
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for frames written to the disk cache, want 0", n)
	}

	// Frames 4-5 evicted (their bytes punched out of the file) and queued
	// again: a span over written and queued frames takes each from where
	// it is, read ahead or read.
	c := r.disk
	for _, i := range []int{4, 5} {
		c.mu.Lock()
		c.removeLocked(c.segs[f.segID].frames[f.ps[i].Offset], true)
		c.mu.Unlock()
	}
	again := diskPut{runs: []diskRun{{seg: f.segID, b: f.data[f.ps[4].Offset:f.ps[5].End()],
		es: []diskEntry{{f.segID, f.ps[4].Offset, f.ps[4].Length}, {f.segID, f.ps[5].Offset, f.ps[5].Length}}}}}
	c.mu.Lock()
	c.pendLocked(again)
	c.mu.Unlock()
	if !aheadOf(r, ctx, f.ps) {
		t.Fatal("ReadAhead left a run of written and queued frames to Fetch")
	}
	r.ahead.mu.Lock()
	read := len(r.ahead.spans) == 1 && r.ahead.spans[0].data != nil
	r.ahead.mu.Unlock()
	if !read {
		t.Fatal("ReadAhead holds no span of the written and queued frames")
	}
	stream(0, 8)
	r.ahead.mu.Lock()
	for len(r.ahead.spans) > 0 { // the next stream reads the cache itself
		sp := r.ahead.spans[0]
		r.ahead.removeLocked(sp)
		r.ahead.freeLocked(sp, &r.bufs)
	}
	r.ahead.mu.Unlock()
	stream(0, 8)
	if n := f.cs.total(); n != 0 {
		t.Fatalf("%d store requests for a span over written and queued frames, want 0", n)
	}
	c.unpend(again)
	if n := r.Stats().DiskCorrupt; n != 0 {
		t.Fatalf("%d damaged entries counted, want 0", n)
	}
}

// TestEvictedMeanwhileIsNoDamage: a frame the disk cache held when the
// read looked, but evicted before its bytes were read (they read as a
// hole), is a miss read from the store, not a damaged entry; a frame
// damaged on the disk still counts as one.
func TestEvictedMeanwhileIsNoDamage(t *testing.T) {
	f := newFixture(t, 4)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: t.TempDir(), DiskBytes: 1 << 30})
	f.readAll(t, r, 0, 1, 2, 3) // all four on the disk
	c := r.disk
	// The next read of the cache's file first evicts frames 0 and 1
	// (punched out; 2 and 3 keep the file).
	var evict atomic.Bool
	setDisk(r, func(c *diskCache) {
		c.readFrame = func(file *os.File, df *directio.File, off int64, n int, buf []byte) ([]byte, error) {
			if evict.Swap(false) {
				c.mu.Lock()
				for _, i := range []int{0, 1} {
					if el, ok := c.segs[f.segID].frames[f.ps[i].Offset]; ok {
						c.removeLocked(el, true)
					}
				}
				c.mu.Unlock()
			}
			return readSpanFile(file, df, off, n, buf)
		}
	})
	check := func(what string, i int, got []byte, err error) {
		t.Helper()
		if err != nil || !bytes.Equal(got, f.plains[i]) {
			t.Fatalf("%s of frame %d: %v", what, i, err)
		}
	}
	evict.Store(true)
	got, err := readOf(r, ctx, f.ids[0], f.ps[0])
	check("Read", 0, got, err)
	f.readAll(t, r, 0, 1) // cached again from the store
	evict.Store(true)
	dst := make([][]byte, 4)
	for i := range dst {
		dst[i] = make([]byte, f.ps[i].PlainLen)
	}
	err = runTo(r, ctx, f.ids, f.ps, dst)
	for i := range dst {
		check("ReadRunTo", i, dst[i], err)
	}
	if st := r.Stats(); st.DiskCorrupt != 0 || st.Misses == 0 {
		t.Fatalf("%d damaged entries counted and %d misses for frames evicted during their reads, want 0 and some", st.DiskCorrupt, st.Misses)
	}

	// Real damage: a byte of frame 2 flipped in the cache's file.
	r.disk.sync()
	path := c.dataPath(f.segID)
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	at := int64(f.ps[2].Offset) + int64(f.ps[2].Length)/2
	if _, err := file.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := file.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	file.Close()
	got, err = readOf(r, ctx, f.ids[2], f.ps[2])
	check("Read of a damaged entry", 2, got, err)
	if n := r.Stats().DiskCorrupt; n != 1 {
		t.Fatalf("%d damaged entries counted, want 1", n)
	}
}

// TestReadRunToLent: a stream's frames the memory cache holds, and those
// read into it from the store, are lent (not copied into the caller's
// buffers); those the disk cache holds are decrypted into them; ReadRunTo
// copies all of them.
func TestReadRunToLent(t *testing.T) {
	f, r := bothCaches(t, 6, 4)
	ctx := context.Background()
	// 0-1 in memory, 2-3 on disk only, 4-5 in neither cache.
	r.Drop(f.ps[2])
	r.Drop(f.ps[3])
	bufs := func() [][]byte {
		dst := make([][]byte, len(f.ps))
		for i := range dst {
			dst[i] = make([]byte, f.ps[i].PlainLen)
		}
		return dst
	}
	dst := bufs()
	f.cs.reset()
	lent, loan, err := runToLent(r, ctx, f.ids, f.ps, dst)
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.ps {
		got, wantLent := dst[i], i != 2 && i != 3
		if wantLent {
			got = lent[i]
			if !bytes.Equal(dst[i], make([]byte, len(dst[i]))) {
				t.Fatalf("frame %d was lent and also copied into the buffer", i)
			}
		}
		if (lent[i] != nil) != wantLent || !bytes.Equal(got, f.plains[i]) {
			t.Fatalf("frame %d: lent %v (want %v), right bytes %v", i, lent[i] != nil, wantLent, bytes.Equal(got, f.plains[i]))
		}
	}
	loan.Release()
	if n := f.cs.total(); n != 1 {
		t.Fatalf("%d store requests, want 1 (frames 4-5)", n)
	}
	dst = bufs()
	if err := runTo(r, ctx, f.ids, f.ps, dst); err != nil {
		t.Fatal(err)
	}
	for i := range dst {
		if !bytes.Equal(dst[i], f.plains[i]) {
			t.Fatalf("ReadRunTo: frame %d differs", i)
		}
	}
}

// bothCaches returns a fixture of n frames and a reader with a memory
// cache and a disk cache that both hold the first k frames.
func bothCaches(t *testing.T, n, k int) (*fixture, *Reader) {
	t.Helper()
	f := newFixture(t, n)
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir(), MemoryBytes: 1 << 20})
	if _, err := runOf(r, context.Background(), f.ids[:k], f.ps[:k]); err != nil {
		t.Fatal(err)
	}
	r.disk.sync()
	return f, r
}
