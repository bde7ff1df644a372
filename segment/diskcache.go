package segment

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// diskCache keeps encrypted frames as files, one per frame:
//
//	<dir>/<low byte of segment id, 2 hex>/<segment id, 16 hex>-<offset, 8 hex>-<length, 8 hex>
//
// The total size of the files is bounded; the least recently used are
// removed first. The index lives in memory and is rebuilt from the
// directory on open (oldest modification time = least recently used).
// Entries are authenticated by the frame AEAD when read, so the cache
// needs no checksums and no fsync: a torn or damaged file fails its size
// check or authentication, is dropped, and the frame is fetched again.
// Files whose names the cache does not recognise are left alone.
//
// Besides its own bound the cache watches the free space of the
// filesystem it lives on (statfs): it keeps at least reserve bytes free
// there (diskReserve: a tenth of the filesystem, between 16 MiB and
// 1 GiB), evicting its least recently used frames, and caches nothing
// new while it cannot. It checks before every frame it writes and every
// diskWatchEvery, so a disk that something else fills gets the cache's
// space back (the metadata in the same directory needs it more). A write
// that fails (ENOSPC, EIO) costs a future miss; it is logged when the
// failures start and when they end, not for every frame.
type diskCache struct {
	dir string
	log *slog.Logger

	mu sync.Mutex
	// statfs reports the filesystem's total size and the bytes free for
	// use; writeFile stores one frame file; readFile reads one. Tests
	// replace them (under mu) to fake a full or failing disk.
	statfs    func(dir string) (total, avail int64, err error)
	writeFile func(path string, b []byte) error
	readFile  func(path string, n int) ([]byte, error)

	max     int64
	used    int64
	reserve int64      // bytes kept free on the filesystem; 0 until known
	failing bool       // writes are failing; logged once
	lru     *list.List // front = most recent; values *diskEntry
	m       map[uint64]map[uint32]*list.Element

	// Writes happen on one background goroutine so that reads never wait
	// for file creation; when the queue is full a frame is simply not
	// cached.
	q       chan diskPut
	queued  atomic.Int64 // frame bytes in q
	done    chan struct{}
	closeMu sync.Mutex
	closed  bool
}

type diskPut struct {
	p     Pointer
	frame []byte
	// Or the frames ps of a whole object obj (admit).
	ps  []Pointer
	obj []byte
	ack chan struct{} // a sync marker: closed once everything before it is written
}

// diskQueue is how many puts may wait to be written to the disk cache,
// and diskQueueBytes how many frame bytes they may hold: a put that does
// not fit is left out.
const (
	diskQueue      = 256
	diskQueueBytes = 32 << 20
)

type diskEntry struct {
	seg    uint64
	off    uint32
	length uint32
}

// diskTmpPrefix names the temporary files earlier versions wrote frames
// through; one left by an interrupted write is removed at open.
const diskTmpPrefix = ".tmp-"

// diskWatchEvery is how often the cache checks its filesystem's free
// space when it writes nothing.
const diskWatchEvery = time.Second

// diskReserve is the free space the cache leaves on a filesystem of total
// bytes.
func diskReserve(total int64) int64 {
	return min(max(total/10, 16<<20), 1<<30)
}

// diskBlock is the allocation unit a frame file is charged when space is
// freed: its length rounded up to 4 KiB.
func diskBlock(n uint32) int64 { return (int64(n) + 4095) &^ 4095 }

func statfsDir(dir string) (total, avail int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// writeFrameFile writes a frame file in place: no temporary file and no
// rename, which cost more than the 32 KiB write itself. Nothing reads the
// file before putSync indexes it, after this returns; a file a crash tore
// fails its size check or authentication at its first read and is
// dropped.
func writeFrameFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// readFrameFile reads a frame file expected to hold n bytes with one
// read: a file of another length returns what one read of n+1 bytes got,
// which the caller's size check refuses.
func readFrameFile(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n+1)
	k, err := io.ReadFull(f, b)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return b[:k], err
}

func openDiskCache(dir string, max int64, log *slog.Logger) (*diskCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("segment cache: %w", err)
	}
	c := &diskCache{dir: dir, log: log, max: max, lru: list.New(), m: map[uint64]map[uint32]*list.Element{},
		q: make(chan diskPut, diskQueue), done: make(chan struct{}),
		statfs: statfsDir, writeFile: writeFrameFile, readFile: readFrameFile}
	type found struct {
		e   diskEntry
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
		for _, f := range files {
			name := f.Name()
			path := filepath.Join(sdir, name)
			if strings.HasPrefix(name, diskTmpPrefix) {
				_ = os.Remove(path) // interrupted write of our own
				continue
			}
			e, ok := parseCacheName(name)
			if !ok || e.seg&0xff != uint64(shard) || !f.Type().IsRegular() {
				continue
			}
			info, err := f.Info()
			if err != nil {
				continue
			}
			if info.Size() != int64(e.length) {
				log.Warn("segment cache: dropping damaged entry", "file", path, "size", info.Size(), "want", e.length)
				_ = os.Remove(path)
				continue
			}
			all = append(all, found{e, info.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod.Before(all[j].mod) })
	for _, f := range all {
		c.insertLocked(f.e) // oldest first, so the newest end up in front
	}
	c.mu.Lock()
	c.evictLocked(0)
	c.mu.Unlock()
	c.watch()
	go c.writer()
	return c, nil
}

func (c *diskCache) writer() {
	defer close(c.done)
	tick := time.NewTicker(diskWatchEvery)
	defer tick.Stop()
	for {
		select {
		case it, ok := <-c.q:
			if !ok {
				return
			}
			if it.ack != nil {
				close(it.ack)
				continue
			}
			if it.obj != nil {
				var n int64
				for _, p := range it.ps {
					c.putSync(p, it.obj[p.Offset:p.End()])
					n += int64(p.Length)
				}
				c.queued.Add(-n)
				continue
			}
			c.putSync(it.p, it.frame)
			c.queued.Add(-int64(len(it.frame)))
		case <-tick.C:
			c.watch()
		}
	}
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
		c.removeLocked(el)
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
		c.removeLocked(el)
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

// close drains the queue and stops the writer.
func (c *diskCache) close() {
	c.closeMu.Lock()
	if !c.closed {
		c.closed = true
		close(c.q)
	}
	c.closeMu.Unlock()
	<-c.done
}

func parseShard(s string) (uint8, bool) {
	if len(s) != 2 || !lowerHex(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 8)
	return uint8(v), err == nil
}

func cacheName(seg uint64, off, length uint32) string {
	return fmt.Sprintf("%016x-%08x-%08x", seg, off, length)
}

func parseCacheName(s string) (diskEntry, bool) {
	if len(s) != 16+1+8+1+8 || s[16] != '-' || s[25] != '-' {
		return diskEntry{}, false
	}
	if !lowerHex(s[:16]) || !lowerHex(s[17:25]) || !lowerHex(s[26:]) {
		return diskEntry{}, false
	}
	seg, err1 := strconv.ParseUint(s[:16], 16, 64)
	off, err2 := strconv.ParseUint(s[17:25], 16, 32)
	n, err3 := strconv.ParseUint(s[26:], 16, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return diskEntry{}, false
	}
	return diskEntry{seg: seg, off: uint32(off), length: uint32(n)}, true
}

func (c *diskCache) path(e diskEntry) string {
	return filepath.Join(c.dir, fmt.Sprintf("%02x", e.seg&0xff), cacheName(e.seg, e.off, e.length))
}

func (c *diskCache) insertLocked(e diskEntry) {
	sm := c.m[e.seg]
	if sm == nil {
		sm = map[uint32]*list.Element{}
		c.m[e.seg] = sm
	}
	if el, ok := sm[e.off]; ok {
		c.lru.MoveToFront(el)
		return
	}
	ne := e
	sm[e.off] = c.lru.PushFront(&ne)
	c.used += int64(e.length)
}

// evictLocked removes least recently used entries until room more bytes fit.
func (c *diskCache) evictLocked(room int64) {
	for c.used+room > c.max && c.lru.Len() > 0 {
		c.removeLocked(c.lru.Back())
	}
}

func (c *diskCache) removeLocked(el *list.Element) {
	e := el.Value.(*diskEntry)
	c.lru.Remove(el)
	c.used -= int64(e.length)
	if sm := c.m[e.seg]; sm != nil {
		delete(sm, e.off)
		if len(sm) == 0 {
			delete(c.m, e.seg)
		}
	}
	if err := os.Remove(c.path(*e)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("segment cache: remove failed", "err", err)
	}
}

// get returns the cached encrypted frame, if any.
func (c *diskCache) get(p Pointer) ([]byte, bool) {
	e := diskEntry{seg: p.Segment, off: p.Offset, length: p.Length}
	c.mu.Lock()
	el, ok := c.m[e.seg][e.off]
	if ok && el.Value.(*diskEntry).length != e.length {
		ok = false
	}
	if ok {
		c.lru.MoveToFront(el)
	}
	read := c.readFile
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	b, err := read(c.path(e), int(e.length))
	if err != nil {
		c.drop(p, "unreadable: "+err.Error())
		return nil, false
	}
	if len(b) != int(e.length) {
		c.drop(p, fmt.Sprintf("%d bytes, want %d", len(b), e.length))
		return nil, false
	}
	return b, true
}

// drop removes an entry found damaged.
func (c *diskCache) drop(p Pointer, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[p.Segment][p.Offset]; ok {
		c.log.Warn("segment cache: dropping damaged entry", "file", c.path(*el.Value.(*diskEntry)), "reason", why)
		c.removeLocked(el)
	}
}

// put queues a copy of an encrypted frame for the disk cache without
// waiting.
func (c *diskCache) put(p Pointer, frame []byte) {
	if int64(len(frame)) > c.max || len(frame) != int(p.Length) {
		return
	}
	c.putOwned(p, append([]byte(nil), frame...))
}

// putOwned is put of a frame the cache may keep: the caller neither
// changes nor reuses it.
func (c *diskCache) putOwned(p Pointer, frame []byte) {
	if int64(len(frame)) > c.max || len(frame) != int(p.Length) {
		return
	}
	c.enqueue(diskPut{p: p, frame: frame}, int64(len(frame)))
}

// admit queues the frames ps of the object obj (whole, as uploaded) for
// the disk cache without waiting, as one put: as many of them, in order,
// as the queue's byte bound has room for. The cache keeps obj until they
// are written; the caller must not change it.
func (c *diskCache) admit(obj []byte, ps []Pointer) {
	var n int64
	room := diskQueueBytes - c.queued.Load()
	k := 0
	for ; k < len(ps); k++ {
		p := ps[k]
		if p.Length == 0 || p.End() > uint64(len(obj)) || int64(p.Length) > c.max || n+int64(p.Length) > room {
			break
		}
		n += int64(p.Length)
	}
	if k > 0 {
		c.enqueue(diskPut{ps: ps[:k:k], obj: obj}, n)
	}
}

// enqueue queues it, holding n frame bytes, unless the queue is full.
func (c *diskCache) enqueue(it diskPut, n int64) {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed || c.queued.Load()+n > diskQueueBytes {
		return
	}
	select {
	case c.q <- it:
		c.queued.Add(n)
	default:
	}
}

// putSync stores an encrypted frame (writeFrameFile). Errors only cost
// a future cache miss, so they are logged and otherwise ignored.
func (c *diskCache) putSync(p Pointer, frame []byte) {
	e := diskEntry{seg: p.Segment, off: p.Offset, length: p.Length}
	c.mu.Lock()
	if el, ok := c.m[e.seg][e.off]; ok {
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return
	}
	c.evictLocked(int64(len(frame)))
	if !c.roomLocked(diskBlock(e.length), false) {
		c.mu.Unlock()
		return
	}
	write := c.writeFile
	c.mu.Unlock()
	path := c.path(e)
	err := write(path, frame)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if !c.failing {
			c.failing = true
			c.log.Warn("segment cache: cannot write frames; reads go to the store until it can (logged once)", "file", path, "err", err)
		}
		if errors.Is(err, syscall.ENOSPC) {
			c.roomLocked(diskBlock(e.length), true)
		}
		return
	}
	if c.failing {
		c.failing = false
		c.log.Info("segment cache: writing frames again", "dir", c.dir)
	}
	if _, ok := c.m[e.seg][e.off]; ok {
		return
	}
	c.evictLocked(int64(len(frame)))
	c.insertLocked(e)
}

// forget drops every cached frame of seg, queued ones included.
func (c *diskCache) forget(seg uint64) {
	// A frame of seg still in the queue would be written after this and
	// stay: write the queue out first.
	c.sync()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, el := range c.m[seg] {
		c.removeLocked(el)
	}
}

func (c *diskCache) stats() (bytes int64, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, c.lru.Len()
}
