package fs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/hugemem"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// Engine is an open ebbfs filesystem. All methods are safe for concurrent use.
//
// Locking: ns serializes namespace changes and guards the table of loaded
// inodes; each loaded inode has its own mutex for its attributes and dirty
// data; ptrMu covers every read-modify-write of extent pointers, so a
// repack repoint, the cleaner and a flush commit never debit a counter for
// a pointer another of them just moved. Order: flushMu, ns, ptrMu, inode.mu.
// Writes take only the inode's mutex, so work on other files goes on.
type Engine struct {
	opts  Options
	log   *slog.Logger
	clk   clock.Clock
	db    *lsm.DB
	rd    *segread.Reader
	codec segment.Codec

	cacheLock *os.File // flock on CacheDir/LOCK, held until Close

	space spaceCache // quota accounting (space.go)
	// resTotal is the writer's total of fallocate reservations in bytes
	// (reserved.go).
	resTotal atomic.Int64

	ns struct {
		sync.Mutex
		nextIno uint64
		inodes  map[uint64]*inode
	}

	ranges     rangeTombs    // pending range tombstones (rangetomb.go)
	damage     damageLog     // what reads found damaged (damage.go)
	wins       ptrWindows    // random reads' pointer windows (file.go)
	follow     follower      // a replica's progress (follow.go)
	marks      restoreMarks  // open inodes a restore changed (restore_marks.go)
	flushMu    chan struct{} // one flush (and barrier) at a time; see lockFlush
	group      groupCommit   // barriers shared by overlapping callers (groupcommit.go)
	ptrMu      sync.Mutex    // every read-modify-write of extent pointers and counters
	segSeq     atomic.Uint64
	inflightMu sync.Mutex
	inflight   map[uint64]bool // segment ids allocated but not yet committed
	dirtyBytes atomic.Int64
	dirtyWait  chan struct{} // closed and replaced whenever dirty bytes drop

	flushW atomic.Pointer[worker.Worker] // the flusher, once started
	mergeW atomic.Pointer[worker.Worker] // the merger (merge.go), with patches on
	merges mergeQueue
	// idle is the extents left patched below the merge bounds, and
	// lastWrite the clock's time of the last write (UnixNano): foldIdle
	// merges them once writes pause (merge.go).
	idle      mergeQueue
	lastWrite atomic.Int64
	closed    atomic.Bool
	started   atomic.Bool
	// ro: the engine refuses writes (a replica, a checkpoint reader, or
	// a standby until its promotion, standby.go).
	ro atomic.Bool
	// standby: the engine may be promoted (Options.Standby, or a writer
	// that handed over, standby.go).
	standby atomic.Bool
	bg      context.Context // background work; canceled by Close
	raSem   chan struct{}   // read-aheads in flight
	local   bool            // the store is a local directory (objstore.IsLocal)
	segBufs *hugemem.Pool   // buffers segments are built in (segPool)
	cancel  context.CancelFunc
	raGroup worker.Group // the read-aheads in flight (read.go); Close waits for them
	waitMu  sync.Mutex
	hostMu  sync.RWMutex // held shared by a cleaner transaction; Close waits for it

	// commitFault, set only by tests, fails a commit when it returns an error.
	commitFault func() error
	// cleanerHook, set only by tests, runs before each cleaner commit.
	cleanerHook func()
}

// inode is a loaded inode: open, dirty, or in use by an operation.
type inode struct {
	ino    uint64
	parent uint64 // directories: containing directory (guarded by Engine.ns)
	refs   int    // operations in progress (guarded by Engine.ns)
	open   int    // open handles (guarded by Engine.ns)

	mu        sync.RWMutex
	attr      Attr              // current attributes (size includes unflushed writes)
	psize     uint64            // size safe to persist: covered by committed data
	shift     uint8             // log2 of the extent size (schema.Inode.ExtentShift); directories: their children's
	dirty     map[uint64][]byte // extent index -> extent plaintext (es bytes) not yet sealed
	flushing  map[uint64]*flushEntry
	spans     map[uint64]span     // dirty extents in patch mode: the bytes their buffers hold (patch.go)
	rmw       map[uint64]bool     // dirty extents that a partial write filled from committed data
	attrDirty bool                // attributes changed without a commit (atime, mtime of writes)
	res       []schema.ExtentSpan // holes reserved by fallocate (allocate.go)
	resPut    int64               // bytes res reserved when the record was last written (reserved.go)
	deleted   bool
	// stale: a restore (restore.go) removed the inode; its open handles
	// read ESTALE. Set with deleted.
	stale bool

	seq    readStream   // a sequential reader's stream (read_stream.go)
	raEnd  atomic.Int64 // read-ahead issued up to this offset
	ra     atomic.Pointer[readAheadRun]
	ptrWin atomic.Pointer[pointerWindow] // a sequential reader's pointers (committedIn)
}

// readAheadRun is a read-ahead in flight: reads of its range wait for it
// rather than fetching the same frames a second time.
type readAheadRun struct {
	from, to int64
	done     chan struct{}
}

type flushEntry struct {
	data []byte
	// remember: once committed, data goes to the reader's memory cache
	// (not back to the buffer pool), because the extent was filled from
	// committed data for a partial write and the next one would read it
	// again.
	remember bool
	// span: the buffer is in patch mode and holds these bytes of the
	// extent only; the flush stores them as a patch (patch.go).
	span span
}

// defaultSegmentTarget is Options.SegmentTarget's default.
const defaultSegmentTarget = 32 << 20

// Open opens (recovering if needed) the filesystem described by o.
func Open(ctx context.Context, o Options) (*Engine, error) {
	if o.Store == nil || o.Keys == nil {
		return nil, errors.New("fs: Options.Store and Options.Keys are required")
	}
	if o.CacheDir == "" {
		return nil, errors.New("fs: Options.CacheDir is required")
	}
	o.setDefaults()
	if err := os.MkdirAll(o.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("fs: cache dir: %w", err)
	}
	cacheLock, err := lockCacheDir(o.CacheDir)
	if err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			cacheLock.Close()
		}
	}()
	// Before the metadata store releases its emergency reserve, the disk
	// cache gives back what it can (cachedisk.go).
	var reader atomic.Pointer[segread.Reader]
	db, err := openMeta(ctx, o, &reader)
	if err != nil {
		return nil, err
	}
	diskDir := filepath.Join(o.CacheDir, "frames")
	if objstore.IsLocal(o.Store) || o.DiskCacheBytes < 0 {
		// A local-directory store is a disk already: caching its frames on
		// disk again would only double the bytes written.
		diskDir, o.DiskCacheBytes = "", 0
	} else if o.DiskCacheBytes == 0 {
		o.DiskCacheBytes = 10 << 30
	}
	rd, err := segread.NewReader(segread.ReaderOptions{
		Store:       o.Store,
		Keys:        o.Keys,
		MemoryBytes: o.MemoryCacheBytes,
		DiskDir:     diskDir,
		DiskBytes:   o.DiskCacheBytes,
		Logger:      o.Logger,
		Space:       db.Space(),
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	reader.Store(rd)
	e := &Engine{
		opts:      o,
		local:     objstore.IsLocal(o.Store),
		segBufs:   segPool(segBufSize(o.SegmentTarget)),
		cacheLock: cacheLock,
		log:       o.Logger,
		clk:       o.Clock,
		idle:      mergeQueue{limit: idleQueueMax},
		db:        db,
		rd:        rd,
		codec:     segment.CodecLZ4,
		dirtyWait: make(chan struct{}),
		flushMu:   make(chan struct{}, 1),
	}
	e.ro.Store(o.ReadOnly)
	e.standby.Store(o.Standby && o.PinManifest == 0)
	e.ns.inodes = map[uint64]*inode{}
	e.inflight = map[uint64]bool{}
	if err := e.load(ctx); err != nil {
		rd.Close()
		db.Close()
		return nil, err
	}
	bg, cancel := context.WithCancel(context.Background())
	e.bg, e.cancel = bg, cancel
	e.raSem = make(chan struct{}, 8)
	if !o.DeferBackground {
		e.StartBackground()
	}
	opened = true
	return e, nil
}

// patchesByDefault turns patch writes on for every engine that does not
// ask for whole writes (Options.wholeWrites, for tests and benchmarks of
// the whole-extent path), on a filesystem of descriptor format 4.
const patchesByDefault = true

// setDefaults fills in the options left zero.
func (o *Options) setDefaults() {
	// Patches only where the format allows them: a filesystem of an
	// older descriptor format keeps whole extents (a build that knows
	// only that format would read a patched value as corrupt).
	o.patchesWanted = (o.patchWrites || patchesByDefault) && !o.wholeWrites && o.Keys.Patches
	o.patchWrites = o.patchesWanted && !o.ReadOnly
	if o.patchLimit <= 0 || o.patchLimit > segment.MaxPatches {
		o.patchLimit = patchLimit
	}
	if o.mergePatches <= 0 {
		o.mergePatches = mergePatches
	}
	if o.mergeEighths <= 0 {
		o.mergeEighths = mergeEighths
	}
	if o.MemoryCacheBytes <= 0 {
		o.MemoryCacheBytes = 256 << 20
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.SegmentTarget <= 0 {
		o.SegmentTarget = defaultSegmentTarget
	}
	if o.DirtyLimit <= 0 {
		o.DirtyLimit = 128 << 20
	}
	if o.DirtyLimit < 2*o.SegmentTarget {
		o.DirtyLimit = 2 * o.SegmentTarget
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Holder == "" {
		host, _ := os.Hostname()
		o.Holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if o.PinManifest != 0 {
		o.ReadOnly = true
	}
}

// openMeta opens the metadata store for o; its MakeRoom asks the reader
// (once there is one) to shrink the disk cache.
func openMeta(ctx context.Context, o Options, reader *atomic.Pointer[segread.Reader]) (*lsm.DB, error) {
	metaDir := filepath.Join(o.CacheDir, "meta")
	if o.PinManifest != 0 {
		// A pinned state is rebuilt from the store each time; keep it
		// apart from the followed one so neither wipes the other.
		metaDir = filepath.Join(o.CacheDir, "meta-pinned")
	}
	lo := lsm.Options{
		Dir:       metaDir,
		Store:     o.Store,
		Keys:      o.Keys,
		Clock:     o.Clock,
		Logger:    o.Logger,
		ReadOnly:  o.ReadOnly,
		Holder:    o.Holder,
		TakeOver:  o.TakeOver,
		StandbyID: o.StandbyID,
	}
	lo.JournalRetention = o.JournalRetention
	lo.ManifestInterval = o.ManifestInterval
	lo.MakeRoom = func(n int64) int64 {
		if rd := reader.Load(); rd != nil {
			return rd.ShrinkDiskCache(n)
		}
		return 0
	}
	if o.tuneLSM != nil {
		o.tuneLSM(&lo)
	}
	if o.PinManifest != 0 {
		return lsm.OpenAt(ctx, lo, o.PinManifest)
	}
	return lsm.Open(ctx, lo)
}

// lockCacheDir takes an exclusive lock on dir for the life of the engine:
// two processes sharing a cache directory would rebuild each other's
// metadata under them.
func lockCacheDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fs: cache dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("fs: cache directory %s is in use by another ebbfs process; give each process its own [cache] dir", dir)
		}
		return nil, fmt.Errorf("fs: cache dir lock: %w", err)
	}
	return f, nil
}

// StartBackground starts the periodic flusher (writers only). Open calls it unless Options.DeferBackground is set; a
// second call does nothing.
func (e *Engine) StartBackground() {
	if e.ro.Load() || e.started.Swap(true) {
		return
	}
	e.flushW.Store(worker.Start("flusher", e.clk, e.flusher))
	if e.opts.patchWrites {
		e.mergeW.Store(worker.Start("merger", e.clk, e.merger))
	}
	if e.dirtyBytes.Load() >= e.opts.SegmentTarget {
		e.kick() // a write passed the target before the flusher started
	}
}

// load reads the engine's system records and, for a writer, creates the root
// directory of a new filesystem and finishes deletions a crash interrupted.
func (e *Engine) load(ctx context.Context) error {
	if err := e.loadRangeTombs(); err != nil {
		return err
	}
	v, ok, err := e.get(schema.NextInoKey)
	if err != nil {
		return err
	}
	e.ns.nextIno = RootIno + 1
	if ok {
		if e.ns.nextIno, err = schema.ParseU64(v); err != nil {
			return fmt.Errorf("fs: next inode record: %w", err)
		}
	}
	_, ok, err = e.get(schema.InodeKey(RootIno))
	if err != nil {
		return err
	}
	if !ok {
		if e.ro.Load() {
			return errors.New("fs: the filesystem has no root directory yet (no writer has run)")
		}
		now := e.now()
		root := schema.Inode{Mode: ModeDir | 0o755, Nlink: 2, Atime: now, Mtime: now, Ctime: now, Gen: 1, Parent: RootIno}
		b := e.db.NewBatch()
		b.Set(schema.InodeKey(RootIno), root.Marshal())
		b.Set(schema.NextInoKey, schema.U64(e.ns.nextIno))
		if err := e.db.Commit(b); err != nil {
			return err
		}
		// A new filesystem's root is durable before anything else runs.
		if err := e.db.Barrier(ctx); err != nil {
			return err
		}
	}
	if e.ro.Load() {
		return nil
	}
	return e.loadWriter()
}

// loadWriter is the writer's part of load (and of a standby's promotion,
// standby.go): the next inode number, the reservations, and the orphans
// left by a crash.
func (e *Engine) loadWriter() error {
	v, ok, err := e.get(schema.NextInoKey)
	if err != nil {
		return err
	}
	if ok {
		next, err := schema.ParseU64(v)
		if err != nil {
			return fmt.Errorf("fs: next inode record: %w", err)
		}
		e.ns.Lock()
		e.ns.nextIno = max(e.ns.nextIno, next)
		e.ns.Unlock()
	}
	if err := e.loadReserved(); err != nil {
		return err
	}
	// Orphans left by a crash: nothing has them open any more.
	var orphans []uint64
	olo, ohi := schema.PrefixRange(schema.POrphan)
	if err := e.scan(olo, ohi, func(k, _ []byte) error {
		ino, err := schema.ParseU64Key(k, schema.POrphan)
		if err == nil {
			orphans = append(orphans, ino)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, ino := range orphans {
		e.ns.Lock()
		if n := e.ns.inodes[ino]; n != nil && n.open > 0 {
			// A promoted standby has it open itself: its last close
			// decides (file.go).
			e.ns.Unlock()
			continue
		}
		e.ptrMu.Lock()
		b := e.db.NewBatch()
		b.Delete(schema.OrphanKey(ino))
		err := e.deleteInodeLocked(b, ino, nil)
		if err == nil {
			err = e.commit(b)
		}
		b.Close()
		e.ptrMu.Unlock()
		e.ns.Unlock()
		if err != nil {
			return fmt.Errorf("fs: finishing orphan %d: %w", ino, err)
		}
		failpoint.Hit("orphan-startup")
	}
	return nil
}

func (e *Engine) now() int64 { return e.clk.Now().UnixNano() }

// scan calls f for every key in [lower, upper).
// A callback that returns errStopScan ends the scan early; scan then
// returns errStopScan.
func (e *Engine) scan(lower, upper []byte, f func(k, v []byte) error) error {
	return e.mapErr(e.db.Scan(lower, upper, f))
}

func (e *Engine) commit(b *lsm.Batch) error {
	if f := e.commitFault; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	return e.mapErr(e.db.Commit(b))
}

// Close runs a final barrier (writer) and releases everything.
func (e *Engine) Close(ctx context.Context) error {
	if e.closed.Swap(true) {
		return nil
	}
	// Stop the flusher and read-aheads, and wait for a tombstone cleaner
	// transaction under way, before the final barrier: a cleaner
	// transaction committed after it would be in no journal, accepted but
	// lost.
	e.cancel()
	if w := e.flushW.Load(); w != nil {
		w.Close()
	}
	if w := e.mergeW.Load(); w != nil {
		w.Close()
	}
	e.raGroup.Wait()
	// Wait for a cleaner transaction under way (CleanTombstones); one that
	// starts later finds the engine closed.
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	var err error
	if !e.ro.Load() {
		err = e.finalBarrier(ctx)
	}
	if cerr := e.rd.Close(); err == nil {
		err = cerr
	}
	if cerr := e.db.Close(); err == nil {
		err = cerr
	}
	e.cacheLock.Close()
	return err
}

// finalBarrier makes everything accepted before Close durable. Operations
// are refused once closed is set and the background workers have stopped,
// but one that passed its check just before may still be committing: the
// barrier is repeated while batches remain outside any journal.
func (e *Engine) finalBarrier(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		if err := e.Barrier(ctx); err != nil {
			e.log.Error("final barrier failed; data written since the last barrier is not durable", "err", err)
			return err
		}
		if e.db.Pending() == 0 || attempt == 3 {
			return nil
		}
	}
}

// ReadOnly reports whether the engine refuses writes.
func (e *Engine) ReadOnly() bool { return e.ro.Load() }

// DB exposes the metadata store to the reclamation stages and fsck.
func (e *Engine) DB() *lsm.DB { return e.db }

// Reader exposes the segment reader to the reclamation stages.
func (e *Engine) Reader() *segread.Reader { return e.rd }

func (e *Engine) writable() error {
	if e.ro.Load() {
		return ErrReadOnly
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if err := e.db.Fenced(); err != nil {
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	if err := e.db.Failed(); err != nil {
		return err // EIO (cachedisk.go)
	}
	return e.metadataRoom()
}

// acquire loads ino (from Pebble if needed) and pins it until release.
func (e *Engine) acquire(ino uint64) (*inode, error) {
	e.ns.Lock()
	defer e.ns.Unlock()
	return e.acquireLocked(ino)
}

func (e *Engine) acquireLocked(ino uint64) (*inode, error) {
	if n := e.ns.inodes[ino]; n != nil {
		if n.stale {
			return nil, ErrStale
		}
		if n.deleted {
			return nil, ErrNotExist
		}
		n.refs++
		return n, nil
	}
	v, ok, err := e.get(schema.InodeKey(ino))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotExist
	}
	rec, err := schema.UnmarshalInode(v)
	if err != nil {
		return nil, fmt.Errorf("fs: inode %d: %w", ino, err)
	}
	n := &inode{ino: ino, parent: rec.Parent, refs: 1, attr: attrOf(ino, rec), psize: rec.Size, res: rec.Reserved,
		resPut: reservedOf(rec.Reserved, rec.Shift()), shift: rec.Shift(), dirty: map[uint64][]byte{}, flushing: map[uint64]*flushEntry{}}
	e.ns.inodes[ino] = n
	return n, nil
}

func (e *Engine) release(n *inode) {
	e.ns.Lock()
	defer e.ns.Unlock()
	e.releaseLocked(n)
}

func (e *Engine) releaseLocked(n *inode) {
	n.refs--
	e.maybeEvictLocked(n)
}

func (e *Engine) maybeEvictLocked(n *inode) {
	if n.refs > 0 || n.open > 0 {
		return
	}
	n.mu.RLock()
	idle := len(n.dirty) == 0 && len(n.flushing) == 0 && !n.attrDirty && n.psize == n.attr.Size
	n.mu.RUnlock()
	if idle || n.deleted {
		if e.ns.inodes[n.ino] == n {
			delete(e.ns.inodes, n.ino)
		}
	}
}

func attrOf(ino uint64, r schema.Inode) Attr {
	return Attr{Ino: ino, Mode: r.Mode, Uid: r.Uid, Gid: r.Gid, Nlink: r.Nlink, Rdev: r.Rdev,
		Size: r.Size, Blocks: r.Blocks, Atime: r.Atime, Mtime: r.Mtime, Ctime: r.Ctime, Gen: r.Gen}
}

// record is the persisted form of n: the size is the part backed by
// committed data, so a crash never exposes a size whose bytes were lost.
// Caller holds n.mu.
func (n *inode) record(parent uint64) schema.Inode {
	a := n.attr
	return schema.Inode{Mode: a.Mode, Uid: a.Uid, Gid: a.Gid, Nlink: a.Nlink, Rdev: a.Rdev,
		Size: n.psize, Blocks: a.Blocks, Atime: a.Atime, Mtime: a.Mtime, Ctime: a.Ctime, Gen: a.Gen, Parent: parent,
		Reserved: n.res, ExtentShift: n.shift}
}

// es is the file's extent size: extent i covers [i*es, (i+1)*es). Caller
// holds n.mu (a regular file's only changes while it holds no data).
func (n *inode) es() uint64 { return uint64(1) << n.shift }

// settle brings psize up to the size once no unflushed data is left, and
// otherwise keeps the inode marked dirty: an inode is only evicted (and
// later reloaded from its record) when its record says everything.
// Caller holds n.mu for writing.
func (n *inode) settle() {
	if len(n.dirty) == 0 && len(n.flushing) == 0 {
		n.psize = n.attr.Size
	}
	if n.psize != n.attr.Size {
		n.attrDirty = true
	}
}

// coveredSize is how far a flush whose snapshot saw size snap may raise
// the persisted size: not past the size now (a truncation meanwhile), nor
// past the first extent whose data is still unflushed (dirty, or in
// flight in a later segment of the same flush): a truncation and an
// append while the flush uploads leave the size above data that no
// commit holds yet, and a replica or a crash would read zeroes there.
// Caller holds n.mu.
func (n *inode) coveredSize(snap uint64) uint64 {
	p := min(snap, n.attr.Size)
	for idx := range n.dirty {
		p = min(p, idx*n.es())
	}
	for idx := range n.flushing {
		p = min(p, idx*n.es())
	}
	return p
}

// getRecord reads the stored inode record.
func (e *Engine) getRecord(ino uint64) (schema.Inode, error) {
	v, ok, err := e.get(schema.InodeKey(ino))
	if err != nil {
		return schema.Inode{}, err
	}
	if !ok {
		return schema.Inode{}, ErrNotExist
	}
	r, err := schema.UnmarshalInode(v)
	if err != nil {
		return schema.Inode{}, fmt.Errorf("fs: inode %d: %w", ino, err)
	}
	return r, nil
}

// putInode writes n's record into b. Caller holds n.mu.
func (e *Engine) putInode(b *lsm.Batch, n *inode) {
	rec := n.record(n.parent)
	b.Set(schema.InodeKey(n.ino), rec.Marshal())
	e.noteReserved(n)
}

// GetAttr returns the attributes of ino.
func (e *Engine) GetAttr(ctx context.Context, ino uint64) (Attr, error) {
	e.ns.Lock()
	n := e.ns.inodes[ino]
	if n == nil {
		e.ns.Unlock()
		r, err := e.getRecord(ino)
		if err != nil {
			return Attr{}, err
		}
		a := attrOf(ino, r)
		a.Blocks += reservedBlocks(r.Reserved, r.Shift())
		return a, nil
	}
	n.refs++
	e.ns.Unlock()
	defer e.release(n)
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.attrNow(), nil
}

// attrNow is the attribute view callers see: the committed blocks plus
// those of every extent written but not committed yet, dirty or in
// flight (a flush commits an extent's blocks as it takes it out of
// flushing, under n.mu, so st_blocks does not dip while it uploads).
// Caller holds n.mu.
func (n *inode) attrNow() Attr {
	a := n.attr
	pending := len(n.dirty)
	for idx := range n.flushing {
		if _, again := n.dirty[idx]; !again {
			pending++
		}
	}
	a.Blocks += uint64(pending)*(n.es()/512) + reservedBlocks(n.res, n.shift)
	return a
}

// lockFlush takes the flush lock, giving up when ctx ends (a barrier stuck
// behind an upload that waits out a store outage can still be abandoned).
func (e *Engine) lockFlush(ctx context.Context) error {
	select {
	case e.flushMu <- struct{}{}:
		e.group.flushes.Add(1) // odd: a flush holds the lock
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) unlockFlush() {
	e.group.flushes.Add(1)
	<-e.flushMu
}

// get reads a metadata key; after Close it fails with ErrClosed.
func (e *Engine) get(key []byte) ([]byte, bool, error) {
	v, ok, err := e.db.Get(key)
	return v, ok, e.mapErr(err)
}

func (e *Engine) newIter(lower, upper []byte) (*pebble.Iterator, error) {
	it, err := e.db.NewIter(lower, upper)
	return it, e.mapErr(err)
}

func (e *Engine) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lsm.ErrClosed):
		return fmt.Errorf("%w: %v", ErrClosed, err)
	case errors.Is(err, lsm.ErrFenced):
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	return err
}
