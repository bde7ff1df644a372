package segread

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/diskspace"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/segment"
	"golang.org/x/sys/unix"
)

// diskCache keeps encrypted frames on local disk, one sparse file per
// segment, each frame at its offset in the segment object:
//
//	<dir>/<low byte of segment id, 2 hex>/<segment id, 16 hex>      the frames
//	<dir>/<low byte of segment id, 2 hex>/<segment id, 16 hex>.idx  which frames: 8-byte records
//
// A segment read in order is then read from one file in order, which the
// kernel reads ahead, through one open file descriptor; a frame costs one
// pread. The frames of a segment this process uploaded are written with
// one write.
//
// The total length of the cached frames is bounded; the least recently
// used frames are evicted first, by punching a hole where they were
// (fallocate), and a segment file with no frame left is removed. The index
// lives in memory and is rebuilt on open from the .idx files (least
// recently used = oldest modification time of its .idx), leaving out a
// frame that lies past the end of its file or over a hole. Entries are
// authenticated by the frame AEAD when read, so the cache needs no
// checksums and no fsync: a frame a crash tore or a disk damaged fails
// authentication, is dropped, and is fetched again. Files whose names the
// cache does not recognise are left alone.
//
// Besides its own bound the cache watches the free space of the
// filesystem it lives on (statfs): it keeps at least reserve bytes free
// there (diskReserve: a tenth of the filesystem, between 16 MiB and
// 1 GiB), evicting its least recently used frames, and caches nothing
// new while it cannot. It checks before every write and every
// diskspace.Every (its Watcher), so a disk that something else fills gets the cache's
// space back (the metadata in the same directory needs it more). A write
// that fails (ENOSPC, EIO) costs a future miss; it is logged when the
// failures start and when they end, not for every frame.
type diskCache struct {
	dir string
	log *slog.Logger

	mu sync.Mutex
	// statfs reports the filesystem's total size and the bytes free for
	// use; writeFrames stores frames of one segment; readFrame reads one;
	// punch frees the bytes of an evicted frame. Tests replace them (under
	// mu) to fake a full or failing disk.
	statfs      func(dir string) (total, avail int64, err error)
	writeFrames func(data, idx string, off int64, b []byte, recs []diskEntry) error
	readFrame   func(f *os.File, df *directio.File, off int64, n int, buf []byte) ([]byte, error)
	punch       func(path string, off, n int64) error

	max     int64
	used    int64
	reserve int64      // bytes kept free on the filesystem; 0 until known
	failing bool       // writes are failing; logged once
	lru     *list.List // front = most recent; values *diskEntry
	segs    map[uint64]*diskSeg
	files   *list.List // segments with an open file, front = most recent; values *diskSeg

	// Writes happen on one background worker (writer) so that reads do
	// not wait for them; when the queue is full a frame is simply not
	// cached, except that a span fetched from the store waits a bounded
	// time for room (putSpan). The space watcher's periodic nudge is a
	// Notify of it.
	q       chan diskPut
	w       *worker.Worker     // the writer
	unwatch func()             // stops the nudges
	space   *diskspace.Watcher // the watcher started for want of ReaderOptions.Space
	queued  atomic.Int64       // bytes of memory the puts in q hold
	skipped atomic.Int64       // frame bytes left out: the queue was full
	closeMu sync.Mutex
	closed  bool
	// overflow holds, under ovMu, frames of admitted objects that did
	// not fit in the queue (overflowBytes of them); the writer takes them
	// after its current put. Without it a writer uploading faster than the
	// cache disk absorbed left whole segments of what it had just written
	// out of the cache, and their reads went to the store.
	//
	// The writer never takes closeMu: sync holds it while it sends to a
	// queue that only the writer empties.
	ovMu          sync.Mutex
	overflow      []diskPut
	overflowBytes int64

	// roomCh is closed, and replaced, under roomMu, each time the writer
	// has written a put and so freed memory in the queue or the overflow:
	// a fetched span waits on it for room (putSpan).
	roomMu sync.Mutex
	roomCh chan struct{}
	after  func(time.Duration) <-chan time.Time // time.After; tests replace it

	// pend holds, under mu, the runs of frames queued or in the overflow,
	// by segment, until the writer has written them (or given up on
	// them): reads find them there meanwhile (present, readSpan, get). A
	// repack output's frames, or those just uploaded, were read from the
	// store until the writer got to them.
	pend map[uint64][]*diskRun
}

// diskSeg is one segment's file in the cache.
type diskSeg struct {
	id     uint64
	frames map[uint32]*list.Element // by offset; values *diskEntry in lru
	f      *os.File                 // open for reading, or nil
	df     *directio.File           // f's file in O_DIRECT mode, while f != nil
	fel    *list.Element            // in files while f != nil
}

type diskPut struct {
	// Runs of adjacent frames, holding cost bytes of memory; release, if
	// set, is called once they are written (or dropped).
	runs    []diskRun
	cost    int64
	release func()
	ack     chan struct{} // a sync marker: closed once everything before it is written
}

// diskRun is adjacent frames es of segment seg, whose bytes are b.
type diskRun struct {
	seg uint64
	es  []diskEntry
	b   []byte
}

// diskQueue is how many puts may wait to be written to the disk cache,
// and diskQueueBytes how many bytes of memory they may hold: a put that
// does not fit is left out (an admitted object may wait in the overflow).
const (
	diskQueue      = 256
	diskQueueBytes = 64 << 20
	// diskOverflowBytes bounds the memory the overflow holds
	// (diskCache.overflow): with the queue, at most 128 MiB, most of it
	// objects the writer uploaded, held a little longer.
	diskOverflowBytes = 64 << 20
	// diskRoomWait bounds how long a read waits for room for the span it
	// fetched (putSpan). A span left out is fetched again by the next
	// read of it; waiting for the cache disk is cheaper than that GET,
	// but a stuck cache disk must not hold up reads the store can serve.
	diskRoomWait = 2 * time.Second
)

// diskOpenFiles is how many segment files the cache keeps open for
// reading (with their O_DIRECT twins, twice as many descriptors). A 1 GiB
// file written at once spans about 80 segments: random reads over it
// reopened a file for every sixth read with 64.
const diskOpenFiles = 256

type diskEntry struct {
	seg    uint64
	off    uint32
	length uint32
}

// diskRecord is the size of one .idx record: offset, length (uint32 LE).
const diskRecord = 8

// diskTmpPrefix names the temporary files an earlier version wrote frames
// through; one left by an interrupted write is removed at open, as are
// the one-file-per-frame entries (<segment>-<offset>-<length>) of that
// version.
const diskTmpPrefix = ".tmp-"

// diskReserve is the free space the cache leaves on a filesystem of total
// bytes.
func diskReserve(total int64) int64 {
	return min(max(total/10, 16<<20), 1<<30)
}

// diskBlock is what a frame is charged when space must be freed: its
// length rounded up to 4 KiB.
func diskBlock(n uint32) int64 { return (int64(n) + 4095) &^ 4095 }

func openDiskCache(dir string, max int64, log *slog.Logger, space *diskspace.Watcher) (*diskCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("segment cache: %w", err)
	}
	c := &diskCache{dir: dir, log: log, max: max, lru: list.New(), files: list.New(), segs: map[uint64]*diskSeg{},
		q: make(chan diskPut, diskQueue), pend: map[uint64][]*diskRun{}, roomCh: make(chan struct{}), after: time.After,
		statfs: diskspace.Statfs, writeFrames: writeSegmentFrames, readFrame: readSpanFile, punch: punchHole}
	type found struct {
		es  []diskEntry
		mod time.Time
	}
	var all []found
	shards, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("segment cache: %w", err)
	}
	for _, sh := range shards {
		shard, ok := parseShard(sh.Name())
		if !ok || !sh.IsDir() {
			continue
		}
		sdir := filepath.Join(dir, sh.Name())
		files, err := os.ReadDir(sdir)
		if err != nil {
			return nil, fmt.Errorf("segment cache: %w", err)
		}
		names := map[string]bool{}
		for _, f := range files {
			names[f.Name()] = f.Type().IsRegular()
		}
		for _, f := range files {
			name := f.Name()
			path := filepath.Join(sdir, name)
			if strings.HasPrefix(name, diskTmpPrefix) || isFrameFileName(name) {
				_ = os.Remove(path) // an earlier version's entry
				continue
			}
			seg, isIdx, ok := parseSegmentFileName(name)
			if !ok || seg&0xff != uint64(shard) || !f.Type().IsRegular() {
				continue
			}
			data := name
			if isIdx {
				data = strings.TrimSuffix(name, ".idx")
			}
			if !isIdx {
				if !names[name+".idx"] {
					_ = os.Remove(path) // frames nothing lists
				}
				continue
			}
			if !names[data] {
				_ = os.Remove(path)
				continue
			}
			info, err := f.Info()
			if err != nil {
				continue
			}
			es := loadSegmentIndex(filepath.Join(sdir, data), path, seg)
			if len(es) == 0 {
				log.Warn("segment cache: dropping a segment file with no readable frame", "file", filepath.Join(sdir, data))
				_ = os.Remove(filepath.Join(sdir, data))
				_ = os.Remove(path)
				continue
			}
			all = append(all, found{es, info.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.Before(all[j].mod) })
	for _, f := range all {
		for _, e := range f.es {
			c.insertLocked(e) // oldest first, so the newest end up in front
		}
	}
	c.mu.Lock()
	c.evictLocked(0)
	c.mu.Unlock()
	c.watch()
	c.w = worker.Start("segread-disk-writer", nil, c.writer)
	if space == nil {
		c.space = diskspace.Start(nil)
		space = c.space
	}
	c.unwatch = space.Add(c.w.Notify)
	return c, nil
}

// watch gives space back when the filesystem has less than the reserve
// free.
func (c *diskCache) watch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roomLocked(0, true)
}

// roomLocked evicts until n more bytes fit on the filesystem with the
// reserve left free, and reports whether they do; report logs what it
// evicted (a cache that stays at the reserve while it fills evicts a
// frame per frame written, which is not news). When statfs fails the
// cache goes on by its own bound only.
func (c *diskCache) roomLocked(n int64, report bool) bool {
	total, avail, err := c.statfs(c.dir)
	if err != nil {
		return true
	}
	c.reserve = diskReserve(total)
	short := c.reserve + n - avail
	if short <= 0 {
		return true
	}
	freed := int64(0)
	evicted := 0
	for freed < short && c.lru.Len() > 0 {
		el := c.lru.Back()
		freed += diskBlock(el.Value.(*diskEntry).length)
		c.removeLocked(el, true)
		evicted++
	}
	if evicted > 0 && report {
		c.log.Info("segment cache: its filesystem is low on space; evicted frames", "dir", c.dir,
			"free", avail, "reserve", c.reserve, "evicted", evicted, "freed", freed, "left", c.used)
	}
	return freed >= short
}

// shrink evicts least recently used frames until at least n bytes are
// freed or the cache is empty, and returns the bytes freed.
func (c *diskCache) shrink(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var freed int64
	for freed < n && c.lru.Len() > 0 {
		el := c.lru.Back()
		freed += diskBlock(el.Value.(*diskEntry).length)
		c.removeLocked(el, true)
	}
	return freed
}

// ShrinkDiskCache evicts at least n bytes of the disk cache, least
// recently used first (fewer if it holds less), and returns the bytes
// freed: for a caller that needs space on the cache's filesystem.
func (r *Reader) ShrinkDiskCache(n int64) int64 {
	if r.disk == nil || n <= 0 {
		return 0
	}
	return r.disk.shrink(n)
}

// sync waits until every queued frame is written.
func (c *diskCache) sync() {
	c.closeMu.Lock()
	if c.closed {
		c.closeMu.Unlock()
		return
	}
	ack := make(chan struct{})
	c.q <- diskPut{ack: ack}
	c.closeMu.Unlock()
	<-ack
}

// close drains the queue, stops the writer and closes the open files.
func (c *diskCache) close() {
	c.unwatch()
	if c.space != nil {
		c.space.Close()
	}
	c.closeMu.Lock()
	if !c.closed {
		c.closed = true
		close(c.q)
	}
	c.closeMu.Unlock()
	c.freed()   // a put waiting for room gives up
	c.w.Close() // the writer returns once it has drained q
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.files.Len() > 0 {
		c.closeFileLocked(c.files.Back().Value.(*diskSeg))
	}
}

// roomSignal is closed the next time the writer frees room (freed).
func (c *diskCache) roomSignal() <-chan struct{} {
	c.roomMu.Lock()
	defer c.roomMu.Unlock()
	return c.roomCh
}

// freed wakes the puts waiting for room.
func (c *diskCache) freed() {
	c.roomMu.Lock()
	close(c.roomCh)
	c.roomCh = make(chan struct{})
	c.roomMu.Unlock()
}

func (c *diskCache) dataPath(seg uint64) string {
	return filepath.Join(c.dir, fmt.Sprintf("%02x", seg&0xff), fmt.Sprintf("%016x", seg))
}

func (c *diskCache) idxPath(seg uint64) string { return c.dataPath(seg) + ".idx" }

func (c *diskCache) insertLocked(e diskEntry) {
	s := c.segs[e.seg]
	if s == nil {
		s = &diskSeg{id: e.seg, frames: map[uint32]*list.Element{}}
		c.segs[e.seg] = s
	}
	if el, ok := s.frames[e.off]; ok {
		c.lru.MoveToFront(el)
		return
	}
	ne := e
	s.frames[e.off] = c.lru.PushFront(&ne)
	c.used += int64(e.length)
}

// evictLocked removes least recently used entries until room more bytes fit.
func (c *diskCache) evictLocked(room int64) {
	for c.used+room > c.max && c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back(), true)
	}
}

// removeLocked removes the entry el; free punches its bytes out of the
// segment file. The file of a segment left with no entry is removed, and
// so is every entry of a segment whose file cannot be punched.
func (c *diskCache) removeLocked(el *list.Element, free bool) {
	e := el.Value.(*diskEntry)
	c.lru.Remove(el)
	c.used -= int64(e.length)
	s := c.segs[e.seg]
	if s == nil {
		return
	}
	delete(s.frames, e.off)
	if len(s.frames) == 0 {
		c.removeSegLocked(s)
		return
	}
	if !free {
		return
	}
	if err := c.punch(c.dataPath(e.seg), int64(e.off), int64(e.length)); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("segment cache: cannot free an evicted frame; dropping its segment", "file", c.dataPath(e.seg), "err", err)
		}
		c.removeSegLocked(s)
	}
}

// removeSegLocked removes every entry of s and its files.
func (c *diskCache) removeSegLocked(s *diskSeg) {
	for _, el := range s.frames {
		c.lru.Remove(el)
		c.used -= int64(el.Value.(*diskEntry).length)
	}
	s.frames = nil
	c.closeFileLocked(s)
	delete(c.segs, s.id)
	for _, path := range []string{c.idxPath(s.id), c.dataPath(s.id)} {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("segment cache: remove failed", "err", err)
		}
	}
}

// fileLocked returns s's file, open for reading.
func (c *diskCache) fileLocked(s *diskSeg) (*os.File, *directio.File, error) {
	if s.f != nil {
		c.files.MoveToFront(s.fel)
		return s.f, s.df, nil
	}
	f, err := os.Open(c.dataPath(s.id))
	if err != nil {
		return nil, nil, err
	}
	// Reads ask for what they need: a frame, or the span of a run the
	// prefetcher wants. Kernel read-ahead would only add bytes to a
	// random read.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	s.f, s.df, s.fel = f, new(directio.File), c.files.PushFront(s)
	for c.files.Len() > diskOpenFiles {
		c.closeFileLocked(c.files.Back().Value.(*diskSeg))
	}
	return f, s.df, nil
}

// closeFileLocked closes s's file if open. A read in progress on it
// finishes first (os.File counts its users); one that starts after gets
// os.ErrClosed.
func (c *diskCache) closeFileLocked(s *diskSeg) {
	if s.f == nil {
		return
	}
	c.files.Remove(s.fel)
	s.df.Close()
	s.f.Close()
	s.f, s.df, s.fel = nil, nil, nil
}

// get returns the cached encrypted frame, if any.
func (c *diskCache) get(p segment.Pointer) ([]byte, bool) {
	for try := 0; try < 2; try++ {
		c.mu.Lock()
		if r := c.pendFrameLocked(p); r != nil {
			b := bytes.Clone(r.b[p.Offset-r.es[0].off:][:p.Length])
			c.mu.Unlock()
			return b, true
		}
		var el *list.Element
		s := c.segs[p.Segment]
		if s != nil {
			el = s.frames[p.Offset]
		}
		if el == nil || el.Value.(*diskEntry).length != p.Length {
			c.mu.Unlock()
			return nil, false
		}
		c.lru.MoveToFront(el)
		f, df, err := c.fileLocked(s)
		read := c.readFrame
		c.mu.Unlock()
		if err != nil {
			c.drop(p, "unreadable: "+err.Error())
			return nil, false
		}
		b, err := read(f, df, int64(p.Offset), int(p.Length), nil)
		if errors.Is(err, os.ErrClosed) {
			continue // closed under us to stay within diskOpenFiles
		}
		if err != nil {
			c.drop(p, "unreadable: "+err.Error())
			return nil, false
		}
		if len(b) != int(p.Length) {
			c.drop(p, fmt.Sprintf("%d bytes, want %d", len(b), p.Length))
			return nil, false
		}
		return b, true
	}
	return nil, false
}

// present returns those of the frames ps[i], i in idx, that the cache
// holds or has queued, refreshing the ones it holds.
func (c *diskCache) present(ps []segment.Pointer, idx []int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var have []int
	for _, i := range idx {
		p := ps[i]
		if s := c.segs[p.Segment]; s != nil {
			if el, ok := s.frames[p.Offset]; ok && el.Value.(*diskEntry).length == p.Length {
				c.lru.MoveToFront(el)
				have = append(have, i)
				continue
			}
		}
		if c.pendFrameLocked(p) != nil {
			have = append(have, i)
		}
	}
	return have
}

// errNotCached: the segment has no file in the cache (any more).
var errNotCached = errors.New("segment not in the disk cache")

// readSpan reads n bytes at off of segment seg's file into buf (nil: a
// buffer of its own; past the page cache where it can: readSpanFile),
// with one read: the frames a span holds and the gaps between them. It
// returns the slice holding them; fewer bytes (the file ends) are
// returned as they are. What queued runs hold of the span is copied out
// of them (readPendLocked).
func (c *diskCache) readSpan(seg uint64, off int64, n int, buf []byte) ([]byte, error) {
	for try := 0; ; try++ {
		c.mu.Lock()
		if b, ok, err := c.readPendLocked(seg, off, n, buf); ok {
			return b, err
		}
		s := c.segs[seg]
		if s == nil {
			c.mu.Unlock()
			return nil, errNotCached
		}
		f, df, err := c.fileLocked(s)
		read := c.readFrame
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		b, err := read(f, df, off, n, buf)
		if errors.Is(err, os.ErrClosed) && try == 0 {
			continue // closed under us to stay within diskOpenFiles
		}
		return b, err
	}
}

// drop removes an entry found damaged.
// It reports whether the cache held one: a frame evicted, or given up by
// the writer, after present found it reads as a hole, which is no damage.
func (c *diskCache) drop(p segment.Pointer, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.segs[p.Segment]; s != nil {
		if el, ok := s.frames[p.Offset]; ok {
			c.log.Warn("segment cache: dropping damaged entry", "file", c.dataPath(p.Segment), "offset", p.Offset, "reason", why)
			c.removeLocked(el, true)
			return true
		}
	}
	return false
}

// forget drops every cached frame of seg, queued ones included.
func (c *diskCache) forget(seg uint64) {
	// A frame of seg still in the queue would be written after this and
	// stay: write the queue out first.
	c.sync()
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.segs[seg]; s != nil {
		c.removeSegLocked(s)
	}
}

func (c *diskCache) stats() (bytes int64, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, c.lru.Len()
}
