package segread

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"ebbfs.dev/ebbfs/internal/diskspace"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// Defaults for ReaderOptions.
const (
	DefaultMemoryBytes = 64 << 20
	DefaultDiskBytes   = 1 << 30
	// MaxRunGap is the largest gap between two wanted frames that readRun
	// and readSealedRun read through rather than split into two GETs.
	MaxRunGap = 64 << 10
)

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	Store objstore.Store // required
	Keys  *keys.Keys     // required
	// MemoryBytes bounds the plaintext memory cache. 0 means
	// DefaultMemoryBytes; negative disables the memory cache.
	MemoryBytes int64
	// DiskDir holds the disk cache of encrypted frames; "" disables it.
	DiskDir string
	// DiskBytes bounds the disk cache. 0 means DefaultDiskBytes.
	DiskBytes int64
	// Logger receives corruption reports; nil means slog.Default().
	Logger *slog.Logger
	// Space, if set, has the disk cache look at its filesystem's free
	// space periodically (shared with the metadata store); otherwise the
	// disk cache starts a watcher of its own.
	Space *diskspace.Watcher
}

// EnsureDefaults fills in the documented defaults.
func (o *ReaderOptions) EnsureDefaults() {
	if o.MemoryBytes == 0 {
		o.MemoryBytes = DefaultMemoryBytes
	}
	if o.DiskBytes == 0 {
		o.DiskBytes = DefaultDiskBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports missing or invalid options.
func (o *ReaderOptions) Validate() error {
	switch {
	case o.Store == nil:
		return errors.New("segment reader: no store")
	case o.Keys == nil || o.Keys.Data == nil:
		return errors.New("segment reader: no keys")
	case o.DiskDir != "" && o.DiskBytes < 0:
		return fmt.Errorf("segment reader: negative disk cache size %d", o.DiskBytes)
	}
	return nil
}

// ReaderStats are cumulative counters plus current cache sizes.
type ReaderStats struct {
	MemHits      uint64 // frames served from the memory cache
	DiskHits     uint64 // frames served from the disk cache
	Misses       uint64 // frames fetched from the store
	Gets         uint64 // ranged GETs sent
	BytesFetched uint64 // bytes those GETs returned
	Corrupt      uint64 // corruption found in store objects
	DiskCorrupt  uint64 // disk cache entries dropped as damaged
	DiskSkipped  uint64 // frame bytes the disk cache left out: its write queue was full

	MemBytes    int64 // memory cache usage (plaintext + bookkeeping)
	MemEntries  int
	DiskBytes   int64 // disk cache usage
	DiskEntries int

	PieceHits  uint64 // reads served from pieces fetched on their own (piececache.go)
	AheadHits  uint64 // frames read from sealed spans read ahead (ahead.go)
	Waits      uint64 // frames a read waited for another read's fetch of, rather than fetching them again (flight.go)
	AheadSpans int    // spans waiting for their readers
	AheadBytes int64  // their bytes
}

// Reader serves frames: memory cache of plaintext (byte-bounded LRU) ->
// disk cache of encrypted frames -> ranged GET -> authenticate ->
// decompress. It is safe for concurrent use.
type Reader struct {
	store objstore.Store
	k     *keys.Keys
	log   *slog.Logger
	disk  *diskCache // nil if disabled

	mu struct {
		sync.Mutex
		mem    *memCache // nil if disabled
		logged map[corruptSite]struct{}
		flight map[corruptSite]*fetchCall // frames being fetched: reads of them wait (flight.go)
		pieces pieceCache                 // pieces fetched on their own (piececache.go)
		closed bool
	}

	bufs  runBufs    // run buffers to reuse (runbuf.go)
	ahead aheadTable // sealed spans read ahead (ahead.go)

	memHits, diskHits, misses, aheadHits atomic.Uint64
	gets, fetched, corrupt, diskCorrupt  atomic.Uint64
	waits, pieceHits                     atomic.Uint64
}

type corruptSite struct {
	seg uint64
	off int64
}

// NewReader opens a reader, rebuilding the disk cache index from DiskDir.
func NewReader(o ReaderOptions) (*Reader, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	r := &Reader{store: o.Store, k: o.Keys, log: o.Logger}
	if o.MemoryBytes > 0 {
		r.mu.mem = newMemCache(o.MemoryBytes)
		r.mu.mem.left = r.runLeft
	}
	r.mu.logged = map[corruptSite]struct{}{}
	r.mu.flight = map[corruptSite]*fetchCall{}
	if o.DiskDir != "" {
		d, err := openDiskCache(o.DiskDir, o.DiskBytes, o.Logger, o.Space)
		if err != nil {
			return nil, err
		}
		r.disk = d
	}
	return r, nil
}

var errClosed = errors.New("segment reader: closed")

// Close releases the reader. The disk cache stays on disk for the next
// NewReader.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.closed = true
	r.mu.mem = nil
	if r.disk != nil {
		r.disk.close()
	}
	return nil
}

// HasDiskCache reports whether the reader keeps a disk cache of frames.
func (r *Reader) HasDiskCache() bool { return r.disk != nil }

// Admit offers the frames of a segment object this process has just
// uploaded to the disk cache, so that reading them back (after the
// memory cache let them go, or after a restart) costs no store request.
// It never waits: frames the cache's queue has no room for are left out.
// obj is the whole object; ps point into it. The cache may read obj
// until it calls release (if not nil), exactly once; the caller must not
// change obj before then.
func (r *Reader) Admit(obj []byte, ps []segment.Pointer, release func()) {
	if r.disk != nil {
		r.disk.admit(obj, ps, release)
	} else if release != nil {
		release()
	}
}

// Relocated carries the cache entries of frames that repack copied into
// obj (the whole object, as uploaded) over to their new places, moves:
// a frame the memory cache held is found at its New pointer from now on,
// and one the disk cache held is admitted there. Frames neither cache
// held stay uncached: repack moves cold data too, which should not push
// out what is being read. Without this, a repack made cached data
// uncached: reads of it went back to the store (and hung while the store
// was away). The cache keeps obj until the frames are written; the caller
// must not change it.
func (r *Reader) Relocated(obj []byte, moves []segment.Move) {
	r.mu.Lock()
	if r.mu.mem != nil {
		for _, m := range moves {
			r.mu.mem.rename(m.Old.Segment, m.Old.Offset, m.New.Segment, m.New.Offset)
		}
	}
	r.mu.Unlock()
	if r.disk == nil || len(moves) == 0 {
		return
	}
	olds := make([]segment.Pointer, len(moves))
	idx := make([]int, len(moves))
	for i, m := range moves {
		olds[i], idx[i] = m.Old, i
	}
	have := r.disk.present(olds, idx)
	if len(have) == 0 {
		return
	}
	ps := make([]segment.Pointer, len(have))
	for j, i := range have {
		ps[j] = moves[i].New
	}
	r.disk.admit(obj, ps, nil)
}

// Remember puts the plaintext of a frame this process has just written
// into the memory cache, so that the next partial write of the same
// extent (a random overwrite) finds the rest of its bytes there instead of
// reading and opening the frame again. The cache then owns plain: the
// caller must neither change nor reuse it. It is charged for cap(plain).
func (r *Reader) Remember(id segment.FrameID, p segment.Pointer, plain []byte) {
	if len(plain) != int(p.PlainLen) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.mem != nil {
		r.mu.mem.putRun(p.Segment, []uint32{p.Offset}, []segment.FrameID{id}, [][]byte{plain}, int64(cap(plain)))
	}
}

// Drop removes the frame p points at from the memory cache: for a caller
// that has just superseded it. A frame that shares its buffer with others
// read in the same request stops being found, but its memory is given
// back only with theirs.
func (r *Reader) Drop(p segment.Pointer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.mem != nil {
		r.mu.mem.drop(p.Segment, p.Offset)
	}
}

// Forget drops every cached frame of a deleted segment.
func (r *Reader) Forget(segID uint64) {
	r.mu.Lock()
	if r.mu.mem != nil {
		r.mu.mem.forget(segID)
	}
	r.mu.Unlock()
	if r.disk != nil {
		r.disk.forget(segID)
	}
}

// Stats returns the counters and cache sizes.
func (r *Reader) Stats() ReaderStats {
	s := ReaderStats{
		MemHits:      r.memHits.Load(),
		DiskHits:     r.diskHits.Load(),
		Misses:       r.misses.Load(),
		Gets:         r.gets.Load(),
		AheadHits:    r.aheadHits.Load(),
		PieceHits:    r.pieceHits.Load(),
		Waits:        r.waits.Load(),
		BytesFetched: r.fetched.Load(),
		Corrupt:      r.corrupt.Load(),
		DiskCorrupt:  r.diskCorrupt.Load(),
	}
	r.mu.Lock()
	if r.mu.mem != nil {
		s.MemBytes, s.MemEntries = r.mu.mem.used, r.mu.mem.len()
	}
	r.mu.Unlock()
	r.ahead.mu.Lock()
	for _, sp := range r.ahead.spans {
		s.AheadSpans++
		s.AheadBytes += int64(sp.end - sp.start)
	}
	r.ahead.mu.Unlock()
	if r.disk != nil {
		s.DiskBytes, s.DiskEntries = r.disk.stats()
		s.DiskSkipped = uint64(r.disk.skipped.Load())
	}
	return s
}

// ReadDirectory is ReadDirectory with the reader's store, keys and logger.
func (r *Reader) ReadDirectory(ctx context.Context, segID uint64, size int64) (segment.Footer, []segment.DirEntry, error) {
	return segment.ReadDirectoryVia(ctx, r.getRange, r.k, segID, size, r.log)
}

// reportCorrupt counts and logs (once per site) a corruption found in a
// store object, and returns the error to hand out.
func (r *Reader) reportCorrupt(p segment.Pointer, reason string, cause error) error {
	ce := &segment.CorruptError{Key: segment.Key(p.Segment), Offset: int64(p.Offset), Reason: reason, Err: cause}
	r.corrupt.Add(1)
	site := corruptSite{p.Segment, int64(p.Offset)}
	r.mu.Lock()
	_, seen := r.mu.logged[site]
	if !seen {
		if len(r.mu.logged) > 4096 {
			clear(r.mu.logged)
		}
		r.mu.logged[site] = struct{}{}
	}
	r.mu.Unlock()
	if !seen {
		segment.LogCorrupt(r.log, ce)
	}
	return ce
}

func (r *Reader) checkPointer(p segment.Pointer) error {
	if err := p.Validate(); err != nil {
		return &segment.CorruptError{Key: segment.Key(p.Segment), Offset: int64(p.Offset), Reason: "invalid extent pointer", Err: err}
	}
	return nil
}

// cached looks in the memory cache and the disk cache.
// It returns the plaintext (shared: read-only) or ok=false.
func (r *Reader) cached(id segment.FrameID, p segment.Pointer) ([]byte, bool, error) {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, false, errClosed
	}
	if r.mu.mem != nil {
		if e := r.mu.mem.entry(p.Segment, p.Offset, id); e != nil {
			r.hold(e.run, nil)
			r.mu.Unlock()
			r.memHits.Add(1)
			return e.data, true, nil
		}
	}
	r.mu.Unlock()
	if r.disk != nil {
		if f, ok := r.disk.get(p); ok {
			out, err := segment.DecodeFrame(r.k, id, f, int(p.PlainLen))
			if err == nil {
				r.diskHits.Add(1)
				r.memPut(id, p, out)
				return out, true, nil
			}
			// A damaged cache file (or a pointer for another id): drop it
			// and fetch from the store, which has the last word.
			r.diskDamaged(p, err.Error())
		}
	}
	return nil, false, nil
}

func (r *Reader) memPut(id segment.FrameID, p segment.Pointer, plain []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.mem != nil {
		r.mu.mem.put(p.Segment, p.Offset, id, plain)
	}
}

func (r *Reader) getRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil { // a cache-only attempt: not the store
		return nil, fmt.Errorf("segment %s: get [%d,+%d): %w", key, off, n, err)
	}
	r.gets.Add(1)
	b, err := r.store.GetRange(objstore.DefaultIfTracing(ctx, objstore.PurposeReadMiss), key, off, n)
	if err != nil {
		return nil, fmt.Errorf("segment %s: get [%d,+%d): %w", key, off, n, err)
	}
	if int64(len(b)) != n {
		return nil, fmt.Errorf("segment %s: get [%d,+%d) returned %d bytes", key, off, n, len(b))
	}
	r.fetched.Add(uint64(n))
	return b, nil
}

// accept authenticates a frame fetched from the store, caches it, and
// returns its plaintext.
func (r *Reader) accept(id segment.FrameID, p segment.Pointer, frame []byte) ([]byte, error) {
	out, err := segment.DecodeFrame(r.k, id, frame, int(p.PlainLen))
	if err != nil {
		return nil, r.reportCorrupt(p, "", err)
	}
	r.misses.Add(1)
	if r.disk != nil {
		r.disk.put(p, frame)
	}
	r.memPut(id, p, out)
	return out, nil
}

// runPlain reads several frames of one segment, given in offset order.
// Frames found in a cache are served from it; frames another read is
// fetching are waited for (flight.go); the rest are fetched with one
// coalesced ranged GET per group (storeGroups: gaps up to MaxRunGap that
// hold no frame of the run are read through) and authenticated on every
// core. Results are in the order of ps and, as with readFrame, must not
// be modified. With loan, they are lent (readRunLent).
