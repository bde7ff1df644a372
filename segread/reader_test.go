package segread

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

type fixture struct {
	k      *keys.Keys
	cs     *countingStore
	segID  uint64
	data   []byte
	ids    []segment.FrameID
	plains [][]byte
	ps     []segment.Pointer
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	k := testKeys(t)
	const segID = 0x0000000200000017
	data, ids, plains, ps := buildSegment(t, k, segID, segment.CodecZstd, n)
	cs := newCounting(objstore.NewMem())
	if err := segment.Upload(context.Background(), cs, segID, data); err != nil {
		t.Fatal(err)
	}
	cs.reset()
	return &fixture{k: k, cs: cs, segID: segID, data: data, ids: ids, plains: plains, ps: ps}
}

func (f *fixture) reader(t *testing.T, o ReaderOptions) *Reader {
	t.Helper()
	o.Store, o.Keys = f.cs, f.k
	if o.Logger == nil {
		o.Logger = discardLogger()
	}
	r, err := NewReader(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func (f *fixture) readAll(t *testing.T, r *Reader, idx ...int) {
	t.Helper()
	for _, i := range idx {
		got, err := readOf(r, context.Background(), f.ids[i], f.ps[i])
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !bytes.Equal(got, f.plains[i]) {
			t.Fatalf("read %d: wrong data", i)
		}
		if r.disk != nil {
			r.disk.sync() // disk cache writes are asynchronous
		}
	}
}

// readRunAll reads every frame of f as one run and checks each.
func (f *fixture) readRunAll(t *testing.T, r *Reader) {
	t.Helper()
	out, err := runOf(r, context.Background(), f.ids, f.ps)
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if !bytes.Equal(out[i], f.plains[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
}

func TestReadDirectoryTwoGets(t *testing.T) {
	prev := slog.Default()
	var logs bytes.Buffer
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	f := newFixture(t, 12)
	ctx := context.Background()
	foot, ents, err := segment.ReadDirectory(ctx, f.cs, f.k, f.segID, int64(len(f.data)))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.cs.total(); got != 2 || f.cs.count("getrange") != 2 {
		t.Fatalf("%d requests (%v), want exactly 2 ranged GETs", got, f.cs.counts)
	}
	if f.cs.ranges[0] != [2]int64{int64(len(f.data)) - segment.FooterSize, segment.FooterSize} {
		t.Fatalf("first GET %v is not the footer", f.cs.ranges[0])
	}
	if f.cs.ranges[1] != [2]int64{int64(foot.DirOffset), int64(foot.DirLen)} {
		t.Fatalf("second GET %v is not the directory", f.cs.ranges[1])
	}
	if len(ents) != 12 || ents[5].Pointer(f.segID) != f.ps[5] {
		t.Fatalf("entries %v", ents)
	}

	// Wrong size: corrupt, naming the key, after one GET.
	f.cs.reset()
	_, _, err = segment.ReadDirectory(ctx, f.cs, f.k, f.segID, int64(len(f.data))-1)
	if !errors.Is(err, segment.ErrCorrupt) || !strings.Contains(err.Error(), segment.Key(f.segID)) {
		t.Fatalf("wrong size: %v", err)
	}
	// Another segment's id: the key differs, so NotFound.
	_, _, err = segment.ReadDirectory(ctx, f.cs, f.k, f.segID+1, int64(len(f.data)))
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// Object copied under another id: footer names the wrong segment.
	if _, err := f.cs.Put(ctx, segment.Key(99), f.data, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _, err = segment.ReadDirectory(ctx, f.cs, f.k, 99, int64(len(f.data)))
	if !errors.Is(err, segment.ErrCorrupt) || !strings.Contains(err.Error(), segment.Key(99)) {
		t.Fatalf("moved segment: %v", err)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 2 || !strings.Contains(logs.String(), "object="+segment.Key(99)) {
		t.Fatalf("want 2 error logs naming the objects, got %d:\n%s", n, logs.String())
	}
}

func TestReaderReadAndMemoryCache(t *testing.T) {
	f := newFixture(t, 10)
	// Room for three 32 KiB frames.
	limit := int64(3 * (segment.ExtentSize + memEntryOverhead))
	r := f.reader(t, ReaderOptions{MemoryBytes: limit})
	f.readAll(t, r, 0, 1, 2)
	if g := f.cs.count("getrange"); g != 3 {
		t.Fatalf("%d GETs for 3 cold reads", g)
	}
	f.readAll(t, r, 0, 1, 2)
	if g := f.cs.count("getrange"); g != 3 {
		t.Fatalf("warm reads sent GETs: %d", g)
	}
	st := r.Stats()
	if st.MemHits != 3 || st.Misses != 3 || st.BytesFetched != uint64(f.ps[0].Length+f.ps[1].Length+f.ps[2].Length) {
		t.Fatalf("stats %+v", st)
	}
	f.readAll(t, r, 3, 4, 5, 6, 7, 8, 9)
	st = r.Stats()
	if st.MemBytes > limit || st.MemEntries > 3 {
		t.Fatalf("memory cache over budget: %+v (limit %d)", st, limit)
	}
	before := f.cs.count("getrange")
	f.readAll(t, r, 0) // evicted long ago
	if f.cs.count("getrange") != before+1 {
		t.Fatal("evicted frame served without a GET")
	}
	f.readAll(t, r, 9) // most recent: still cached
	if f.cs.count("getrange") != before+1 {
		t.Fatal("recent frame was evicted")
	}
	// A cached frame is handed out without a copy: the slice is shared
	// (and read-only by contract).
	a, _ := readOf(r, context.Background(), f.ids[9], f.ps[9])
	b, _ := readOf(r, context.Background(), f.ids[9], f.ps[9])
	if len(a) == 0 || &a[0] != &b[0] {
		t.Fatal("two reads of a cached frame returned separate copies")
	}
}

func TestReaderCacheRefusesOtherID(t *testing.T) {
	f := newFixture(t, 2)
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir()})
	f.readAll(t, r, 0)
	other := f.ids[0]
	other.Gen++
	if _, err := readOf(r, context.Background(), other, f.ps[0]); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("cached frame served for another id: %v", err)
	}
}

// dirSize returns the bytes the disk cache's files take on disk
// (allocated blocks, so punched holes do not count) and how many files
// it has (segment files and their indexes).
func dirSize(t *testing.T, dir string) (int64, int) {
	var n int64
	var files int
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			info, _ := d.Info()
			n += info.Sys().(*syscall.Stat_t).Blocks * 512
			files++
		}
		return nil
	})
	return n, files
}

func TestDiskCacheBoundedAndSurvivesReopen(t *testing.T) {
	f := newFixture(t, 10)
	dir := t.TempDir()
	limit := int64(4 * (segment.ExtentSize + segment.FrameOverhead))
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir, DiskBytes: limit})
	f.readAll(t, r, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	st := r.Stats()
	// Evicted frames are punched out of the segment file: what the files
	// take is the cached frames, give or take the blocks they share and
	// the index.
	slack := int64(4096 * (2*st.DiskEntries + 1))
	onDisk, files := dirSize(t, dir)
	if st.DiskBytes > limit || onDisk > st.DiskBytes+slack || onDisk < st.DiskBytes-slack || files != 2 {
		t.Fatalf("disk cache over budget: stats %+v, %d bytes in %d files, limit %d", st, onDisk, files, limit)
	}
	if st.DiskEntries < 3 {
		t.Fatalf("disk cache holds only %d entries", st.DiskEntries)
	}
	r.Close()

	// Reopen: the most recent entries are served from disk with no GET.
	f.cs.reset()
	r2 := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir, DiskBytes: limit})
	if st2 := r2.Stats(); st2.DiskEntries != st.DiskEntries || st2.DiskBytes != st.DiskBytes {
		t.Fatalf("rebuilt index %+v, had %+v", st2, st)
	}
	f.readAll(t, r2, 9, 8)
	if g := f.cs.total(); g != 0 {
		t.Fatalf("reopened cache sent %d requests", g)
	}
	if r2.Stats().DiskHits != 2 {
		t.Fatalf("stats %+v", r2.Stats())
	}
	r2.Close()

	// Reopen with a smaller budget: trimmed at open.
	r3 := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir, DiskBytes: limit / 2})
	if st3 := r3.Stats(); st3.DiskBytes > limit/2 {
		t.Fatalf("not trimmed at open: %+v", st3)
	}
	if onDisk, _ := dirSize(t, dir); onDisk > limit/2+slack {
		t.Fatalf("%d bytes left on disk", onDisk)
	}
}

func TestDiskCacheCorruptEntryRefetched(t *testing.T) {
	f := newFixture(t, 4)
	dir := t.TempDir()
	var logs bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&logs, nil))
	r := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir, Logger: lg})
	f.readAll(t, r, 0, 1, 2)
	r.Close()

	// One segment file holds the frames at their offsets.
	path := filepath.Join(dir, "17", fmt.Sprintf("%016x", f.segID))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[f.ps[1].Offset+f.ps[1].Length/2] ^= 0x10
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Frame 2 cut short: dropped at open.
	if err := os.Truncate(path, int64(f.ps[2].Offset)+100); err != nil {
		t.Fatal(err)
	}
	// An unknown file is left alone.
	foreign := filepath.Join(dir, "17", "README")
	os.WriteFile(foreign, []byte("x"), 0o600)

	f.cs.reset()
	r2 := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir, Logger: lg})
	if st := r2.Stats(); st.DiskEntries != 2 {
		t.Fatalf("after open: %+v", st)
	}
	f.readAll(t, r2, 0, 1, 2)
	st := r2.Stats()
	if st.DiskHits != 1 || st.Misses != 2 || st.DiskCorrupt != 1 || st.Corrupt != 0 {
		t.Fatalf("stats %+v", st)
	}
	if g := f.cs.count("getrange"); g != 2 {
		t.Fatalf("%d GETs, want 2 refetches", g)
	}
	// Both entries were rewritten and now hit.
	f.readAll(t, r2, 1, 2)
	if g := f.cs.count("getrange"); g != 2 || r2.Stats().DiskHits != 3 {
		t.Fatalf("rewritten entries missed: %d GETs, %+v", g, r2.Stats())
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatal("unknown file was removed")
	}
	if !strings.Contains(logs.String(), "damaged") {
		t.Fatalf("no warning logged: %s", logs.String())
	}
}

func TestReaderStoreCorruption(t *testing.T) {
	f := newFixture(t, 4)
	ctx := context.Background()
	bad := bytes.Clone(f.data)
	bad[f.ps[2].Offset+30] ^= 1
	if _, err := f.cs.Put(ctx, segment.Key(f.segID), bad, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	dir := t.TempDir()
	r := f.reader(t, ReaderOptions{DiskDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 3 {
		out, err := readOf(r, ctx, f.ids[2], f.ps[2])
		if !errors.Is(err, segment.ErrCorrupt) || out != nil {
			t.Fatalf("corrupt frame: %v", err)
		}
		if !strings.Contains(err.Error(), segment.Key(f.segID)) {
			t.Fatalf("error does not name the object: %v", err)
		}
		var ce *segment.CorruptError
		if !errors.As(err, &ce) || ce.Key != segment.Key(f.segID) || ce.Offset != int64(f.ps[2].Offset) {
			t.Fatalf("not a CorruptError: %#v", err)
		}
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), segment.Key(f.segID)) {
		t.Fatalf("want one error log naming the object, got %d:\n%s", n, logs.String())
	}
	if st := r.Stats(); st.Corrupt != 3 || st.DiskEntries != 0 {
		t.Fatalf("stats %+v (a corrupt frame must not be cached)", st)
	}
	// Its neighbours are fine, alone and in a run.
	f.readAll(t, r, 1, 3)
	if _, err := runOf(r, ctx, f.ids, f.ps); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("run over corrupt frame: %v", err)
	}
	// The run's authenticated frames reached the disk cache; the corrupt
	// one did not.
	r.disk.sync()
	for i, p := range f.ps {
		if _, ok := r.disk.get(p); ok != (i != 2) {
			t.Fatalf("frame %d in the disk cache: %v", i, ok)
		}
	}
	if _, err := verifiedOf(r, ctx, f.ids, f.ps); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("verified encoded read: %v", err)
	}
	// Invalid pointer: clean error.
	if _, err := readOf(r, ctx, f.ids[0], segment.Pointer{Segment: f.segID, Length: 3}); !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("invalid pointer: %v", err)
	}
	// Missing object.
	p := f.ps[0]
	p.Segment++
	if _, err := readOf(r, ctx, f.ids[0], p); !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), segment.Key(p.Segment)) {
		t.Fatalf("missing object: %v", err)
	}
}

func TestReadRunCoalesces(t *testing.T) {
	f := newFixture(t, 10)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir()})
	f.readRunAll(t, r)
	if g := f.cs.total(); g != 1 {
		t.Fatalf("%d requests for a run, want 1", g)
	}
	if f.cs.ranges[0] != [2]int64{0, int64(f.ps[9].End())} {
		t.Fatalf("range %v", f.ranges0())
	}
	// Now everything is cached: no requests.
	f.cs.reset()
	if _, err := runOf(r, ctx, f.ids, f.ps); err != nil || f.cs.total() != 0 {
		t.Fatalf("warm run: %v, %d requests", err, f.cs.total())
	}

	// Sparse run with small gaps: still one GET, reading through the gaps.
	r2 := f.reader(t, ReaderOptions{MemoryBytes: -1})
	f.cs.reset()
	sel := []int{1, 2, 4, 6, 7}
	var ids []segment.FrameID
	var ps []segment.Pointer
	for _, i := range sel {
		ids, ps = append(ids, f.ids[i]), append(ps, f.ps[i])
	}
	out, err := runOf(r2, ctx, ids, ps)
	if err != nil || f.cs.total() != 1 {
		t.Fatalf("sparse run: %v, %d requests", err, f.cs.total())
	}
	for j, i := range sel {
		if !bytes.Equal(out[j], f.plains[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	// A gap above MaxRunGap splits the GET.
	f.cs.reset()
	if _, err := runOf(r2, ctx, []segment.FrameID{f.ids[0], f.ids[9]}, []segment.Pointer{f.ps[0], f.ps[9]}); err != nil || f.cs.total() != 2 {
		t.Fatalf("split run: %v, %d requests", err, f.cs.total())
	}
	// Out-of-order and cross-segment runs are refused.
	if _, err := runOf(r2, ctx, []segment.FrameID{f.ids[1], f.ids[0]}, []segment.Pointer{f.ps[1], f.ps[0]}); err == nil {
		t.Fatal("unordered run accepted")
	}
	q := f.ps[1]
	q.Segment++
	if _, err := runOf(r2, ctx, f.ids[:2], []segment.Pointer{f.ps[0], q}); err == nil {
		t.Fatal("cross-segment run accepted")
	}
	if _, err := runOf(r2, ctx, f.ids[:1], f.ps[:2]); err == nil {
		t.Fatal("length mismatch accepted")
	}
}

func (f *fixture) ranges0() [2]int64 { return f.cs.ranges[0] }

func TestReadEncoded(t *testing.T) {
	f := newFixture(t, 6)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{DiskDir: t.TempDir()})
	out, err := sealedOf(r, ctx, f.ps)
	if err != nil || f.cs.total() != 1 {
		t.Fatalf("%v, %d requests", err, f.cs.total())
	}
	for i, p := range f.ps {
		if !bytes.Equal(out[i], f.data[p.Offset:p.End()]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if st := r.Stats(); st.DiskEntries != 0 || st.MemEntries != 0 {
		t.Fatalf("repack reads filled the caches: %+v", st)
	}
	// Copy into a new segment: the frames open there.
	b := segment.NewBuilder(f.k, 77, segment.CodecZstd)
	for i := range out {
		b.AddEncoded(f.ids[i], out[i], f.ps[i].PlainLen)
	}
	if err := segment.Upload(ctx, f.cs, 77, b.Finish()); err != nil {
		t.Fatal(err)
	}
	_, ents, err := r.ReadDirectory(ctx, 77, int64(len(b.Finish())))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		got, err := readOf(r, ctx, e.ID(), e.Pointer(77))
		if err != nil || !bytes.Equal(got, f.plains[i]) {
			t.Fatalf("repacked frame %d: %v", i, err)
		}
	}
	if _, err := verifiedOf(r, ctx, f.ids, f.ps); err != nil {
		t.Fatal(err)
	}
}

func TestReaderForgetAndClose(t *testing.T) {
	f := newFixture(t, 3)
	ctx := context.Background()
	dir := t.TempDir()
	r := f.reader(t, ReaderOptions{DiskDir: dir})
	f.readAll(t, r, 0, 1, 2)
	r.Forget(f.segID)
	st := r.Stats()
	if st.MemEntries != 0 || st.DiskEntries != 0 {
		t.Fatalf("after Forget: %+v", st)
	}
	if _, files := dirSize(t, dir); files != 0 {
		t.Fatalf("%d cache files left", files)
	}

	r.Close()
	if _, err := readOf(r, ctx, f.ids[1], f.ps[1]); err == nil {
		t.Fatal("read after Close succeeded")
	}
}

func TestUploadIdempotent(t *testing.T) {
	k := testKeys(t)
	ctx := context.Background()
	mem := objstore.NewMem()
	data, _, _, _ := buildSegment(t, k, 5, segment.CodecLZ4, 2)
	if err := segment.Upload(ctx, mem, 5, data); err != nil {
		t.Fatal(err)
	}
	if err := segment.Upload(ctx, mem, 5, data); err != nil {
		t.Fatalf("retry of the same upload: %v", err)
	}
	other, _, _, _ := buildSegment(t, k, 5, segment.CodecLZ4, 2)
	if err := segment.Upload(ctx, mem, 5, other); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("different object under the same id: %v", err)
	}
	got, _ := mem.Get(ctx, segment.Key(5))
	if !bytes.Equal(got, data) {
		t.Fatal("object replaced")
	}
}

func TestReaderConcurrent(t *testing.T) {
	f := newFixture(t, 8)
	r := f.reader(t, ReaderOptions{MemoryBytes: 4 * (segment.ExtentSize + memEntryOverhead), DiskDir: t.TempDir(), DiskBytes: 5 * segment.ExtentSize})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 50 {
				i := (g + n*3) % len(f.ps)
				got, err := readOf(r, context.Background(), f.ids[i], f.ps[i])
				if err == nil && !bytes.Equal(got, f.plains[i]) {
					err = errors.New("wrong data")
				}
				if err != nil {
					errs <- err
					return
				}
				if n%10 == 0 {
					r.Forget(f.segID)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// gateStore blocks ranged GETs until released.
type gateStore struct {
	*countingStore
	gate chan struct{}
}

func (g *gateStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	g.inc("getrange")
	g.mu.Lock()
	g.ranges = append(g.ranges, [2]int64{off, n})
	g.mu.Unlock()
	<-g.gate
	return g.Store.GetRange(ctx, key, off, n)
}

func TestReaderSharesConcurrentMisses(t *testing.T) {
	f := newFixture(t, 2)
	gs := &gateStore{countingStore: f.cs, gate: make(chan struct{})}
	r, err := NewReader(ReaderOptions{Store: gs, Keys: f.k, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := readOf(r, context.Background(), f.ids[1], f.ps[1])
			if err == nil && !bytes.Equal(got, f.plains[1]) {
				err = errors.New("wrong data")
			}
			errs <- err
		}()
	}
	for gs.count("getrange") == 0 {
		runtime.Gosched()
	}
	time.Sleep(50 * time.Millisecond) // let the others queue behind the first GET
	close(gs.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := gs.count("getrange"); n != 1 {
		t.Fatalf("%d GETs for 6 concurrent reads of one frame", n)
	}
}

// The memory cache keeps and drops the frames of one coalesced GET as a
// run charged for its whole buffer; a hit on any frame refreshes the run,
// and the budget holds however runs and single frames mix.
func TestMemCacheRuns(t *testing.T) {
	id := func(i int) segment.FrameID { return segment.FrameID{Ino: 1, Extent: uint64(i), Gen: 1} }
	c := newMemCache(3*1000 + 8*memEntryOverhead)
	buf := make([]byte, 1000)
	run := func(seg uint64) {
		c.putRun(seg, []uint32{0, 100, 200}, []segment.FrameID{id(0), id(1), id(2)}, [][]byte{buf[:100], buf[100:200], buf[200:300]}, int64(len(buf)))
	}
	run(1)
	run(2)
	if c.used != 2*(1000+3*memEntryOverhead) || c.len() != 6 {
		t.Fatalf("two runs: used %d, %d frames", c.used, c.len())
	}
	if _, ok := c.get(1, 100, id(1)); !ok { // refreshes run 1
		t.Fatal("miss on a cached frame")
	}
	if _, ok := c.get(1, 100, id(2)); ok {
		t.Fatal("hit for another id")
	}
	run(3) // evicts run 2, the least recent, as a whole
	for _, off := range []uint32{0, 100, 200} {
		if _, ok := c.get(2, off, id(int(off/100))); ok {
			t.Fatalf("frame %d of the evicted run still cached", off)
		}
		if _, ok := c.get(1, off, id(int(off/100))); !ok {
			t.Fatalf("frame %d of the refreshed run evicted", off)
		}
	}
	c.put(4, 0, id(0), make([]byte, 500))
	if c.used > c.max {
		t.Fatalf("used %d over budget %d", c.used, c.max)
	}
	c.forget(1)
	if _, ok := c.get(1, 0, id(0)); ok || c.len() != 4 {
		t.Fatalf("forget left run 1 (frames %d)", c.len())
	}
	// A run larger than the budget is not cached.
	c.putRun(5, []uint32{0}, []segment.FrameID{id(0)}, [][]byte{buf}, c.max)
	if _, ok := c.get(5, 0, id(0)); ok {
		t.Fatal("cached a run over the budget")
	}
}

// ReadRun decrypts in place and caches runs: under a small budget the
// cache stays within it and every frame still reads back right.
func TestReadRunSmallCache(t *testing.T) {
	f := newFixture(t, 12)
	ctx := context.Background()
	limit := int64(5 * (segment.ExtentSize + memEntryOverhead))
	r := f.reader(t, ReaderOptions{MemoryBytes: limit})
	for round := range 3 {
		for i := 0; i+3 <= len(f.ids); i += 3 {
			out, err := runOf(r, ctx, f.ids[i:i+3], f.ps[i:i+3])
			if err != nil {
				t.Fatal(err)
			}
			for j := range out {
				if !bytes.Equal(out[j], f.plains[i+j]) {
					t.Fatalf("round %d: frame %d differs", round, i+j)
				}
			}
			if st := r.Stats(); st.MemBytes > limit {
				t.Fatalf("memory cache %d over its %d budget", st.MemBytes, limit)
			}
		}
	}
	// The last run is cached: reading it again sends nothing.
	f.cs.reset()
	if _, err := runOf(r, ctx, f.ids[9:], f.ps[9:]); err != nil || f.cs.total() != 0 {
		t.Fatalf("re-read of the last run: %v, %d requests", err, f.cs.total())
	}
}

// TestMemCacheDrop: dropping a frame cached alone gives its memory back;
// dropping one of a run hides that frame only, and the run's memory goes
// when the run does.
func TestMemCacheDrop(t *testing.T) {
	id := func(i int) segment.FrameID { return segment.FrameID{Ino: 1, Extent: uint64(i), Gen: 1} }
	c := newMemCache(1 << 20)
	buf := make([]byte, 1000)
	c.putRun(1, []uint32{0, 100, 200}, []segment.FrameID{id(0), id(1), id(2)}, [][]byte{buf[:100], buf[100:200], buf[200:300]}, int64(len(buf)))
	c.put(2, 0, id(3), make([]byte, 500))
	full := c.used
	c.drop(2, 0)
	if _, ok := c.get(2, 0, id(3)); ok || c.len() != 3 || c.used != full-500-memEntryOverhead {
		t.Fatalf("after dropping a lone frame: found %v, %d frames, used %d", ok, c.len(), c.used)
	}
	c.drop(1, 100)
	c.drop(1, 100) // twice: nothing more
	c.drop(9, 0)   // never cached
	if _, ok := c.get(1, 100, id(1)); ok || c.len() != 2 {
		t.Fatalf("dropped frame of a run still found (%d frames)", c.len())
	}
	if _, ok := c.get(1, 200, id(2)); !ok {
		t.Fatal("the rest of the run went with the dropped frame")
	}
	c.forget(1)
	if c.len() != 0 || c.used != 0 || len(c.m) != 0 {
		t.Fatalf("after forget: %d frames, used %d, %d segments", c.len(), c.used, len(c.m))
	}
}

// TestRunBuffersReusedOnlyWhenUnread: the buffer of a run the memory
// cache let go is used again for another run, but only once nothing can
// read it: not while a loan of it is out, and never after a frame of it
// was handed out without one.
func TestRunBuffersReusedOnlyWhenUnread(t *testing.T) {
	const per = 40 // 40 extents of up to 32 KiB: a run over half a pooled buffer
	f := newFixture(t, 6*per)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{MemoryBytes: runBufSize + per*memEntryOverhead + 1000}) // one run
	group := func(g int) ([]segment.FrameID, []segment.Pointer) {
		return f.ids[g*per : (g+1)*per], f.ps[g*per : (g+1)*per]
	}
	check := func(what string, g int, datas [][]byte) {
		t.Helper()
		for j, d := range datas {
			if !bytes.Equal(d, f.plains[g*per+j]) {
				t.Fatalf("%s: frame %d of run %d changed under its reader", what, j, g)
			}
		}
	}
	lent := func(g int) ([][]byte, *Loan) {
		t.Helper()
		ids, ps := group(g)
		datas, loan, err := runLent(r, ctx, ids, ps)
		if err != nil {
			t.Fatal(err)
		}
		check("lent", g, datas)
		return datas, loan
	}
	fetch := func(g int) {
		t.Helper()
		ids, ps := group(g)
		if err := fill(r, ctx, ids, ps); err != nil {
			t.Fatal(err)
		}
	}

	free := func(b []byte) bool { // b's buffer is on the free list
		r.bufs.mu.Lock()
		defer r.bufs.mu.Unlock()
		for _, f := range r.bufs.free {
			if &f[:1][0] == &b[0] {
				return true
			}
		}
		return false
	}
	a, loanA := lent(0)
	fetch(1) // pushes run 0 out of the cache; it is on loan
	fetch(2) // pushes run 1 out: its buffer is free
	fetch(3) // takes a free buffer
	fetch(4)
	check("on loan while others were read", 0, a)
	if free(a[0]) {
		t.Fatal("a buffer on loan is free")
	}
	loanA.Release() // run 0 is out of the cache: its buffer is free now
	if !free(a[0]) {
		t.Fatal("a released run's buffer is not free")
	}

	// A frame handed out by ReadRun has no release: its buffer is never
	// used again.
	ids, ps := group(5)
	kept, err := runOf(r, ctx, ids, ps)
	if err != nil {
		t.Fatal(err)
	}
	for g := range 5 {
		fetch(g)
	}
	check("handed out without a loan", 5, kept)
	if free(kept[0]) {
		t.Fatal("a buffer handed out without a loan is free")
	}
}

// TestReadRunTo: frames decrypted straight into the caller's buffers read
// the same as ReadRun, cached frames are copied from the cache, nothing
// new is cached, and a damaged frame is an error naming the object.
func TestReadRunTo(t *testing.T) {
	f := newFixture(t, 12)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{})
	// Frames 3 and 4 cached, by a read that keeps them.
	if _, err := runOf(r, ctx, f.ids[3:5], f.ps[3:5]); err != nil {
		t.Fatal(err)
	}
	var dst [][]byte
	// Decrypted by the caller alone (a run this small), then on every core.
	defer func(was int) { decryptAloneMax = was }(decryptAloneMax)
	for _, alone := range []int{decryptAloneMax, 0} {
		decryptAloneMax = alone
		before := r.Stats()
		dst = make([][]byte, len(f.ps))
		for i, p := range f.ps {
			dst[i] = make([]byte, p.PlainLen, p.PlainLen+100) // room past the frame must stay untouched
		}
		f.cs.reset()
		if err := runTo(r, ctx, f.ids, f.ps, dst); err != nil {
			t.Fatal(err)
		}
		for i := range dst {
			if !bytes.Equal(dst[i], f.plains[i]) {
				t.Fatalf("alone up to %d bytes: frame %d differs", alone, i)
			}
			if tail := dst[i][len(dst[i]):cap(dst[i])]; bytes.Count(tail, []byte{0}) != len(tail) {
				t.Fatalf("alone up to %d bytes: frame %d: written past its buffer", alone, i)
			}
		}
		st := r.Stats()
		if st.MemEntries != before.MemEntries || st.MemHits-before.MemHits != 2 || st.Misses-before.Misses != 10 {
			t.Fatalf("stats before %+v, after %+v: want 2 hits, 10 read, nothing new cached", before, st)
		}
		if n := f.cs.total(); n != 1 {
			t.Fatalf("%d requests, want 1 (the frames around the cached ones, reading through them)", n)
		}
	}
	if err := runTo(r, ctx, f.ids[:1], f.ps[:1], [][]byte{make([]byte, 1)}); err == nil {
		t.Fatal("a buffer of the wrong length was accepted")
	}

	bad := bytes.Clone(f.data)
	bad[f.ps[6].Offset+30] ^= 1
	if _, err := f.cs.Put(ctx, segment.Key(f.segID), bad, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	r2 := f.reader(t, ReaderOptions{})
	err := runTo(r2, ctx, f.ids[5:8], f.ps[5:8], dst[5:8])
	var ce *segment.CorruptError
	if !errors.As(err, &ce) || ce.Key != segment.Key(f.segID) || ce.Offset != int64(f.ps[6].Offset) {
		t.Fatalf("damaged frame: %v", err)
	}
}

// TestReadAheadServesReadRunTo: a run's sealed bytes read ahead serve the
// reads of frames inside them without another request, also a read that
// straddles two spans and one through ReadRunLent; a span leaves the
// table and its buffer goes back to the pool once all of it has been
// read; a full table refuses new spans, and lets a stale one go; and a
// read-ahead that failed leaves the reader to read the frames itself.
func TestReadAheadServesReadRunTo(t *testing.T) {
	const per = 40 // a run over half a pooled buffer, as fs reads ahead
	f := newFixture(t, 3*per)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{})
	readTo := func(lo, hi int) {
		t.Helper()
		dst := make([][]byte, hi-lo)
		for i := range dst {
			dst[i] = make([]byte, f.ps[lo+i].PlainLen)
		}
		if err := runTo(r, ctx, f.ids[lo:hi], f.ps[lo:hi], dst); err != nil {
			t.Fatal(err)
		}
		for i := range dst {
			if !bytes.Equal(dst[i], f.plains[lo+i]) {
				t.Fatalf("frame %d differs", lo+i)
			}
		}
	}
	spans := func() int {
		r.ahead.mu.Lock()
		defer r.ahead.mu.Unlock()
		return len(r.ahead.spans)
	}
	freeBufs := func() int { // sealed spans' buffers free (the pool is the process's)
		_, warm, cold := sealedBufs.Stats()
		return warm + cold
	}
	requests := func(want int, what string) {
		t.Helper()
		if n := f.cs.total(); n != want {
			t.Fatalf("%s: %d requests, want %d", what, n, want)
		}
	}

	aheadOf(r, ctx, f.ps[:per])
	aheadOf(r, ctx, f.ps[per:2*per])
	requests(2, "two runs read ahead")
	aheadOf(r, ctx, f.ps[3:per/2]) // inside a span held already
	requests(2, "a run inside a span held")
	free := freeBufs()
	readTo(0, per-5)
	readTo(per-5, per+5) // across both spans
	datas, loan, err := runLent(r, ctx, f.ids[per+5:2*per], f.ps[per+5:2*per])
	if err != nil {
		t.Fatal(err)
	}
	for j, d := range datas {
		if !bytes.Equal(d, f.plains[per+5+j]) {
			t.Fatalf("lent frame %d differs", per+5+j)
		}
	}
	loan.Release()
	requests(2, "frames read ahead")
	if spans() != 0 || freeBufs() != free+2 {
		t.Fatalf("after the spans were read whole: %d spans held, %d free buffers (was %d); want 0 and %d", spans(), freeBufs(), free, free+2)
	}
	readTo(2*per, 3*per) // not read ahead: read here
	requests(3, "frames not read ahead")

	// Read-aheads that overlap read each frame once, and every span
	// leaves once its frames are read.
	f.cs.reset()
	fetched := r.Stats().BytesFetched
	aheadOf(r, ctx, f.ps[:per])
	aheadOf(r, ctx, f.ps[per-2:2*per]) // shares two frames with the first
	aheadOf(r, ctx, f.ps[per-1:per+1]) // held whole: nothing to read
	readTo(0, 2*per)
	requests(2, "overlapping read-aheads")
	if got, want := r.Stats().BytesFetched-fetched, f.ps[2*per-1].End()-uint64(f.ps[0].Offset); got != want {
		t.Fatalf("overlapping read-aheads read %d bytes for frames of %d", got, want)
	}
	if st := r.Stats(); spans() != 0 || st.AheadSpans != 0 || st.AheadBytes != 0 {
		t.Fatalf("after overlapping spans were read: %d spans held (stats %d, %d bytes)", spans(), st.AheadSpans, st.AheadBytes)
	}

	// A full table refuses new spans; its spans still serve their frames.
	f.cs.reset()
	for i := range aheadMax + 2 {
		aheadOf(r, ctx, f.ps[2*per+i:2*per+i+1])
	}
	requests(aheadMax, "a full table")
	readTo(2*per+aheadMax, 2*per+aheadMax+2) // refused: read here, with one request
	readTo(2*per, 2*per+aheadMax)
	requests(aheadMax+1, "frames of a full table")
	if spans() != 0 {
		t.Fatalf("%d spans held after all were read", spans())
	}

	// A span nobody reads whole stays, however long its reader takes, and
	// makes way in a full table once aheadStale newer read-aheads were
	// asked for.
	aheadOf(r, ctx, f.ps[:per])
	readTo(0, 1) // reads a little of it
	holds := func(p segment.Pointer) bool {
		r.ahead.mu.Lock()
		defer r.ahead.mu.Unlock()
		return r.ahead.holdsLocked(p)
	}
	for i := range aheadStale - 1 {
		aheadOf(r, ctx, f.ps[per+i:per+i+1])
	}
	if !holds(f.ps[1]) || spans() != aheadMax {
		t.Fatalf("before it is stale: span held %v, %d spans, want it and a full table", holds(f.ps[1]), spans())
	}
	f.cs.reset()
	readTo(1, 2)
	requests(0, "a frame of a span left unread")
	aheadOf(r, ctx, f.ps[per+aheadStale-1:per+aheadStale])
	if holds(f.ps[2]) || !holds(f.ps[per+aheadStale-1]) {
		t.Fatalf("once stale: old span held %v, new one held %v; want it replaced", holds(f.ps[2]), holds(f.ps[per+aheadStale-1]))
	}
	readTo(2, 3)
	requests(2, "the new span and a frame of the stale one")

	// A read-ahead that fails is dropped; the reader reads for itself.
	other := newFixture(t, 4)
	r2 := other.reader(t, ReaderOptions{})
	if err := other.cs.Delete(ctx, segment.Key(other.segID)); err != nil {
		t.Fatal(err)
	}
	aheadOf(r2, ctx, other.ps)
	if _, err := other.cs.Put(ctx, segment.Key(other.segID), other.data, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := make([][]byte, len(other.ps))
	for i, p := range other.ps {
		dst[i] = make([]byte, p.PlainLen)
	}
	if err := runTo(r2, ctx, other.ids, other.ps, dst); err != nil {
		t.Fatalf("after a failed read-ahead: %v", err)
	}
	for i := range dst {
		if !bytes.Equal(dst[i], other.plains[i]) {
			t.Fatalf("frame %d differs after a failed read-ahead", i)
		}
	}
}

// TestReadAheadConcurrent: readers and read-aheads of the same runs at
// once (run with -race) read the right bytes.
func TestReadAheadConcurrent(t *testing.T) {
	const per = 10
	f := newFixture(t, 4*per)
	ctx := context.Background()
	r := f.reader(t, ReaderOptions{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for g := range 4 {
				aheadOf(r, ctx, f.ps[g*per:(g+1)*per])
			}
		}()
		go func() {
			defer wg.Done()
			for g := range 4 {
				g = (g + w) % 4
				dst := make([][]byte, per)
				for i := range dst {
					dst[i] = make([]byte, f.ps[g*per+i].PlainLen)
				}
				if err := runTo(r, ctx, f.ids[g*per:(g+1)*per], f.ps[g*per:(g+1)*per], dst); err != nil {
					errs <- err
					return
				}
				for i := range dst {
					if !bytes.Equal(dst[i], f.plains[g*per+i]) {
						errs <- fmt.Errorf("run %d frame %d differs", g, i)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
