package segread

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

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

	AheadHits  uint64 // frames read from sealed spans read ahead (ahead.go)
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
		flight map[corruptSite]*fetchCall // concurrent misses of one frame share a GET
		closed bool
	}

	bufs  runBufs    // run buffers to reuse (runbuf.go)
	ahead aheadTable // sealed spans read ahead (ahead.go)

	memHits, diskHits, misses, aheadHits atomic.Uint64
	gets, fetched, corrupt, diskCorrupt  atomic.Uint64
}

type corruptSite struct {
	seg uint64
	off int64
}

// fetchCall is one GET of a frame that concurrent readers wait on.
type fetchCall struct {
	done  chan struct{}
	frame []byte
	err   error
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
		d, err := openDiskCache(o.DiskDir, o.DiskBytes, o.Logger)
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
	r.gets.Add(1)
	b, err := r.store.GetRange(ctx, key, off, n)
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

// readFrame returns the plaintext of the frame p points at, sealed for
// id. len(result) == p.PlainLen. The slice may be shared with the memory
// cache and other readers: it must not be modified.
func (r *Reader) readFrame(ctx context.Context, id segment.FrameID, p segment.Pointer) ([]byte, error) {
	if err := r.checkPointer(p); err != nil {
		return nil, err
	}
	if out, ok, err := r.cached(id, p); ok || err != nil {
		return out, err
	}
	frame, err := r.fetchShared(ctx, p)
	if err != nil {
		return nil, err
	}
	return r.accept(id, p, frame)
}

// readPart returns plaintext bytes [from, to) of the frame p points at
// (0 <= from < to <= p.PlainLen), as readFrame would but reading less: a
// pieced frame that the memory cache does not hold is read piece-wise,
// only the pieces holding [from, to), from the disk cache when it holds
// the frame, or from the store when there is no disk cache (a local
// store, whose reads cost no request, or a cache turned off). Those
// pieces are not cached; a
// frame to fetch from a store behind a disk cache is read whole and cached
// as by readFrame, since that GET costs the same and its neighbours are
// likely next. The result must not be modified.
//
// With dst (to-from bytes), the bytes are written there and dst is
// returned. Pieces whose plaintext is exactly [from, to) are decrypted
// straight into dst: a cold 4 KiB random read then allocates nothing,
// where a plaintext buffer of its own per read was most of what such
// reads allocated (76 of 95 MB over 20,000 reads), and the heap growing
// under them cost a page fault every read or so.
func (r *Reader) readPart(ctx context.Context, id segment.FrameID, p segment.Pointer, from, to int, dst []byte) ([]byte, error) {
	if err := r.checkPointer(p); err != nil {
		return nil, err
	}
	if from < 0 || to > int(p.PlainLen) || from >= to {
		return nil, fmt.Errorf("segment %s: read [%d,%d) of a frame of %d bytes", segment.Key(p.Segment), from, to, p.PlainLen)
	}
	// deliver returns b, the bytes [from, to), or copies them into dst.
	deliver := func(b []byte) []byte {
		if dst == nil {
			return b
		}
		clear(dst[copy(dst, b):])
		return dst
	}
	whole := func() ([]byte, error) {
		b, err := r.readFrame(ctx, id, p)
		if err != nil {
			return nil, err
		}
		return deliver(part(b, from, to)), nil
	}
	if !p.IsPieced() {
		return whole()
	}
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, errClosed
	}
	if r.mu.mem != nil {
		if e := r.mu.mem.entry(p.Segment, p.Offset, id); e != nil {
			r.hold(e.run, nil)
			r.mu.Unlock()
			r.memHits.Add(1)
			return deliver(part(e.data, from, to)), nil
		}
	}
	r.mu.Unlock()
	first, a, b := segment.PieceSpan(int(p.PlainLen), from, to)
	skip := from - first*segment.PieceSize
	end := min((to+segment.PieceSize-1)/segment.PieceSize*segment.PieceSize, int(p.PlainLen))
	// direct: the pieces' plaintext is [from, to), dst's bytes exactly.
	direct := dst != nil && skip == 0 && to == end
	// The sealed pieces are read into a pooled buffer, past the page
	// cache where it does not hold them, and opened out of it: into dst,
	// or over the pooled buffer when the bytes are copied out of it into
	// dst, or into a new buffer of the plaintext's size that is returned.
	var buf []byte
	if b-a+objstore.SpanSlack <= pieceBufLen {
		pb := pieceBufs.Get().(*[pieceBufLen]byte)
		defer pieceBufs.Put(pb)
		buf = pb[:]
	}
	open := func(span []byte) ([]byte, error) {
		switch {
		case direct:
			// Capped at dst's length: the pieces' plaintext is exactly
			// that long, and never spills into the caller's bytes past it.
			out, err := segment.OpenPiecesTo(dst[:0:len(dst)], false, r.k, nil, id, int(p.PlainLen), first, span)
			if err == nil && (len(out) != len(dst) || &out[0] != &dst[0]) {
				err = fmt.Errorf("frame (ino %d, extent %d, gen %d): %d bytes of plaintext for [%d,%d): %w", id.Ino, id.Extent, id.Gen, len(out), from, to, segment.ErrCorrupt)
			}
			return out, err
		case buf == nil || dst != nil:
			return segment.OpenPiecesTo(span[:0], true, r.k, nil, id, int(p.PlainLen), first, span)
		}
		return segment.OpenPiecesTo(make([]byte, 0, end-first*segment.PieceSize), false, r.k, nil, id, int(p.PlainLen), first, span)
	}
	// got returns the bytes [from, to) out of the pieces' plaintext.
	got := func(plain []byte) []byte {
		if direct {
			return dst
		}
		return deliver(part(plain, skip, skip+to-from))
	}
	if r.disk != nil {
		if len(r.disk.present([]segment.Pointer{p}, []int{0})) == 0 {
			return whole()
		}
		span, err := r.disk.readSpan(p.Segment, int64(p.Offset)+int64(a), b-a, buf)
		if err == nil && len(span) != b-a {
			err = fmt.Errorf("%d bytes, want %d", len(span), b-a)
		}
		if err == nil {
			var plain []byte
			plain, err = open(span)
			if err == nil {
				r.diskHits.Add(1)
				return got(plain), nil
			}
			r.diskDamaged(p, "piece read: "+err.Error())
		} else if !errors.Is(err, errNotCached) {
			r.disk.drop(p, "piece read: "+err.Error())
		}
		return whole()
	}
	var span []byte
	var err error
	if buf != nil {
		span, err = r.readSpan(ctx, segment.Key(p.Segment), int64(p.Offset)+int64(a), b-a, buf)
	} else {
		span, err = r.getRange(ctx, segment.Key(p.Segment), int64(p.Offset)+int64(a), int64(b-a))
	}
	if err != nil {
		return nil, err
	}
	plain, err := open(span)
	if err != nil {
		return nil, r.reportCorrupt(p, "", err)
	}
	r.misses.Add(1)
	return got(plain), nil
}

// pieceBufLen is the size of the pooled buffers a random read's pieces
// are read into (pieceBufs): up to 16 KiB of them, and the room a read
// past the page cache needs (objstore.SpanSlack).
const pieceBufLen = 16<<10 + objstore.SpanSlack

// pieceBufs are the buffers of readPart's sealed pieces, kept for the
// next read once the pieces are opened out of them: a buffer of each
// read's own, aligned for O_DIRECT, was 5 us of a cold 4 KiB random
// read's CPU in allocation.
var pieceBufs = sync.Pool{New: func() any { return new([pieceBufLen]byte) }}

// readSpan is getRange into buf (at least n+objstore.SpanSlack bytes),
// past the page cache where the store can (objstore.ReadSpan).
func (r *Reader) readSpan(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error) {
	r.gets.Add(1)
	b, err := objstore.ReadSpan(ctx, r.store, key, off, n, buf)
	if err != nil {
		return nil, fmt.Errorf("segment %s: get [%d,+%d): %w", key, off, n, err)
	}
	if len(b) != n {
		return nil, fmt.Errorf("segment %s: get [%d,+%d) returned %d bytes", key, off, n, len(b))
	}
	r.fetched.Add(uint64(n))
	return b, nil
}

// part returns b[from:to], cut short where b is (callers read the rest as
// zeroes; a plaintext is always PlainLen long, but a slice bound does not
// get to panic on it).
func part(b []byte, from, to int) []byte {
	to = min(to, len(b))
	from = min(from, to)
	return b[from:to:to]
}

// fetchShared GETs one frame; concurrent callers for the same frame share
// one request. A waiter whose context ends stops waiting; the request goes
// on for the others.
func (r *Reader) fetchShared(ctx context.Context, p segment.Pointer) ([]byte, error) {
	site := corruptSite{p.Segment, int64(p.Offset)}
	r.mu.Lock()
	if c, ok := r.mu.flight[site]; ok {
		r.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if c.err != nil || len(c.frame) != int(p.Length) {
			// The leader failed (perhaps only its context) or fetched a
			// different length: try on our own.
			return r.getRange(ctx, segment.Key(p.Segment), int64(p.Offset), int64(p.Length))
		}
		return c.frame, nil
	}
	c := &fetchCall{done: make(chan struct{})}
	r.mu.flight[site] = c
	r.mu.Unlock()
	c.frame, c.err = r.getRange(ctx, segment.Key(p.Segment), int64(p.Offset), int64(p.Length))
	r.mu.Lock()
	delete(r.mu.flight, site)
	r.mu.Unlock()
	close(c.done)
	return c.frame, c.err
}

// runGroups splits the indices of ps (sorted by offset, one segment) into
// groups each fetched with one GET: a new group starts where the gap to
// the previous wanted frame exceeds MaxRunGap.
func runGroups(ps []segment.Pointer, want []int) [][]int {
	var groups [][]int
	for _, i := range want {
		if n := len(groups); n > 0 {
			last := groups[n-1]
			prevEnd := ps[last[len(last)-1]].End()
			if uint64(ps[i].Offset)-prevEnd <= MaxRunGap {
				groups[n-1] = append(last, i)
				continue
			}
		}
		groups = append(groups, []int{i})
	}
	return groups
}

func (r *Reader) checkRun(ps []segment.Pointer) error {
	for i, p := range ps {
		if err := r.checkPointer(p); err != nil {
			return err
		}
		if p.Segment != ps[0].Segment {
			return fmt.Errorf("segment run: pointer %d is in segment %016x, not %016x", i, p.Segment, ps[0].Segment)
		}
		if i > 0 && uint64(p.Offset) < ps[i-1].End() {
			return fmt.Errorf("segment %s run: pointer %d at %d is not after the previous frame ending at %d", segment.Key(p.Segment), i, p.Offset, ps[i-1].End())
		}
	}
	return nil
}

// fetchGroup GETs the span of one group and returns the buffer, each
// frame's bytes within it, and whether the buffer is a pooled one to give
// back once they are opened: only when pool is set, for a caller that
// does not keep the frames (as a disk cache does).
func (r *Reader) fetchGroup(ctx context.Context, ps []segment.Pointer, g []int, pool bool) ([]byte, [][]byte, bool, error) {
	start, end := uint64(ps[g[0]].Offset), ps[g[len(g)-1]].End()
	key, n := segment.Key(ps[g[0]].Segment), int64(end-start)
	buf, data, pooled, err := r.readSealed(ctx, key, int64(start), int(n), pool)
	if err != nil {
		return nil, nil, false, fmt.Errorf("segment %s: get [%d,+%d): %w", key, start, n, err)
	}
	return buf, frameSlices(ps, g, start, data), pooled, nil
}

// frameSlices returns the bytes of each frame ps[i], i in g, within data,
// the sealed span of the group from offset start on.
func frameSlices(ps []segment.Pointer, g []int, start uint64, data []byte) [][]byte {
	out := make([][]byte, len(g))
	for j, i := range g {
		a, b := uint64(ps[i].Offset)-start, ps[i].End()-start
		out[j] = data[a:b:b]
	}
	return out
}

// openTo authenticates and decrypts frame, sealed for id, into d (its
// PlainLen bytes), as readRunTo does.
func (r *Reader) openTo(o *keys.Opener, id segment.FrameID, frame, d []byte) error {
	out, err := segment.DecodeFrameWith(d[:0:len(d)], r.k, o, id, frame, len(d))
	if err == nil && len(out) > 0 && &out[0] != &d[0] {
		copy(d, out) // decoded elsewhere (cannot happen with PlainLen bytes of room)
	}
	return err
}

// readSealed reads the n bytes of key at off. With scratch set, it reads
// them into a scratch buffer (a pooled one where they fit, for its caller
// to give back) wherever in it suits the store (objstore.ReadSpan: past
// the page cache); otherwise into a buffer of n bytes its caller may keep.
// It returns the buffer and the slice of it that holds the bytes.
func (r *Reader) readSealed(ctx context.Context, key string, off int64, n int, scratch bool) (buf, data []byte, pooled bool, err error) {
	r.gets.Add(1)
	if scratch {
		buf, pooled = r.bufs.scratch(n + objstore.SpanSlack)
		data, err = objstore.ReadSpan(ctx, r.store, key, off, n, buf)
	} else {
		buf = make([]byte, n)
		data, err = buf, objstore.ReadRange(ctx, r.store, key, off, buf)
	}
	if err != nil {
		if pooled {
			r.bufs.putScratch(buf)
		}
		return nil, nil, false, err
	}
	r.fetched.Add(uint64(n))
	return buf, data, pooled, nil
}

// openRun authenticates and decrypts the frames ps[i], i in g, whose
// sealed bytes are frames (in the order of g), on every core, laying
// their plaintexts end to end in one run buffer (a pooled one when they
// fit). It returns the run to cache (not yet cached or held), each
// frame's plaintext (nil where it failed), the memory they hold, and each
// frame's error. frames are left as they were.
func (r *Reader) openRun(ids []segment.FrameID, ps []segment.Pointer, g []int, frames [][]byte) (*memRun, [][]byte, int64, []error) {
	at := make([]int, len(g)+1)
	for j, i := range g {
		at[j+1] = at[j] + int(ps[i].PlainLen)
	}
	buf, pooled := r.bufs.get(at[len(g)])
	run := &memRun{}
	if pooled {
		run.buf = buf
	}
	plains := make([][]byte, len(g))
	errs := make([]error, len(g))
	r.decodeEach(len(g), runtime.GOMAXPROCS(0), func(o *keys.Opener, j int) {
		i := g[j]
		plains[j], errs[j] = segment.DecodeFrameWith(buf[at[j]:at[j]:at[j+1]], r.k, o, ids[i], frames[j], int(ps[i].PlainLen))
	})
	held := int64(cap(buf))
	for j := range g {
		if errs[j] != nil {
			plains[j] = nil
			continue
		}
		if p := plains[j]; len(p) > 0 && &p[0] != &buf[at[j]] {
			held += int64(cap(p)) // decoded outside the buffer: a frame longer than its pointer said
		}
	}
	return run, plains, held, errs
}

// decodeEach calls f(o, j) for j in [0, n) on up to workers goroutines,
// each calling it for consecutive js with one keys.Opener: the frames of
// one nonce prefix (sealed together, Builder.AddFrames) then cost one key
// derivation. With more than one worker, each takes up to sealGroup js at
// a time (segment.SealGroupSize).
func (r *Reader) decodeEach(n, workers int, f func(o *keys.Opener, j int)) {
	chunk := max(n, 1)
	if workers > 1 {
		chunk = segment.SealGroupSize(n, workers)
	}
	segment.ForEachGroup(n, chunk, workers, func(lo, hi int) {
		o := r.k.Data.NewOpener()
		for j := lo; j < hi; j++ {
			f(&o, j)
		}
	})
}

// hold records a caller reading frames of run: until loan is released,
// or for good when loan is nil. Caller holds r.mu.
func (r *Reader) hold(run *memRun, loan *Loan) {
	if loan == nil {
		run.escaped = true
		return
	}
	if k := len(loan.runs); k > 0 && loan.runs[k-1] == run {
		return
	}
	run.refs++
	loan.runs = append(loan.runs, run)
}

// cacheRun caches the frames ps[i], i in g (those with a plaintext), as
// run, held for the caller by loan. Caller holds r.mu.
func (r *Reader) cacheRun(run *memRun, ids []segment.FrameID, ps []segment.Pointer, g []int, plains [][]byte, held int64, loan *Loan) {
	r.hold(run, loan)
	if r.mu.mem == nil {
		return
	}
	var offs []uint32
	var runIDs []segment.FrameID
	var datas [][]byte
	for j, i := range g {
		if plains[j] != nil {
			offs, runIDs, datas = append(offs, ps[i].Offset), append(runIDs, ids[i]), append(datas, plains[j])
		}
	}
	if len(offs) > 0 {
		r.mu.mem.add(ps[g[0]].Segment, run, offs, runIDs, datas, held)
	}
}

// runLeft is the memory cache's note that run has left it: its buffer is
// reused if nothing reads it. Caller holds r.mu.
func (r *Reader) runLeft(run *memRun) {
	if run.reusable() {
		r.bufs.put(run.buf)
		run.buf = nil
	}
}

// acceptRun authenticates and decrypts the frames of one coalesced GET
// (openRun), hands them to the disk cache, and caches them in memory as
// one run. It returns the plaintexts in the order of g.
func (r *Reader) acceptRun(ids []segment.FrameID, ps []segment.Pointer, g []int, frames [][]byte, loan *Loan) ([][]byte, error) {
	run, plains, held, errs := r.openRun(ids, ps, g, frames)
	for j, i := range g {
		if errs[j] != nil {
			errs[j] = r.reportCorrupt(ps[i], "", errs[j])
		} else if r.disk != nil { // only authenticated frames are cached
			r.disk.putOwned(ps[i], frames[j])
		}
	}
	if err := errors.Join(errs...); err != nil {
		if run.buf != nil {
			r.bufs.put(run.buf)
		}
		return nil, err
	}
	r.misses.Add(uint64(len(g)))
	r.mu.Lock()
	r.cacheRun(run, ids, ps, g, plains, held, loan)
	r.mu.Unlock()
	return plains, nil
}

// runPlain reads several frames of one segment, given in offset order.
// Frames found in a cache are served from it; the rest are fetched with one
// coalesced ranged GET (gaps up to MaxRunGap are read through; a larger gap
// starts another GET) and authenticated on every core. Results are in the
// order of ps and, as with readFrame, must not be modified. With loan,
// they are lent (readRunLent).

// Loan is the plaintexts a Request with Lend was handed. They may be read until
// Release, and not after: their memory is then used again.
type Loan struct {
	r    *Reader
	runs []*memRun
}

// Release ends the loan. Releasing a nil or released Loan does nothing.
func (l *Loan) Release() {
	if l == nil || l.r == nil {
		return
	}
	r := l.r
	r.mu.Lock()
	for _, run := range l.runs {
		run.refs--
		r.runLeft(run) // reused now if it has left the cache
	}
	r.mu.Unlock()
	l.r, l.runs = nil, nil
}

// readRunLent is readRun for a caller that reads the plaintexts only
// until it releases the loan (as the file system copies them into a
// reply): their buffers can then be used again for other runs, which
// spares a sequential reader clearing new memory for every run.
func (r *Reader) readRunLent(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) ([][]byte, *Loan, error) {
	loan := &Loan{r: r}
	out, err := r.readRun(ctx, ids, ps, loan)
	if err != nil {
		loan.Release()
		return nil, nil, err
	}
	return out, loan, nil
}

// fetch reads the frames as readRun does, into the caches only.
func (r *Reader) fetch(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) error {
	_, loan, err := r.readRunLent(ctx, ids, ps)
	loan.Release()
	return err
}

// readRun: see runPlain above.
func (r *Reader) readRun(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, loan *Loan) ([][]byte, error) {
	if len(ids) != len(ps) {
		return nil, fmt.Errorf("segment run: %d ids for %d pointers", len(ids), len(ps))
	}
	if err := r.checkRun(ps); err != nil {
		return nil, err
	}
	out := make([][]byte, len(ps))
	var want []int
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, errClosed
	}
	for i := range ps {
		var e *memEntry
		if r.mu.mem != nil {
			e = r.mu.mem.entry(ps[i].Segment, ps[i].Offset, ids[i])
		}
		if e != nil {
			out[i] = e.data
			r.hold(e.run, loan)
			r.memHits.Add(1)
		} else {
			want = append(want, i)
		}
	}
	r.mu.Unlock()
	r.ahead.passed(ps, want, &r.bufs)
	if r.disk != nil && len(want) > 0 {
		want = r.readDiskRuns(ids, ps, want, out, loan)
	}
	for _, g := range runGroups(ps, want) {
		frames, done, err := r.sealedFrames(ctx, ps, g, r.disk == nil)
		if err != nil {
			return nil, err
		}
		plains, err := r.acceptRun(ids, ps, g, frames, loan)
		done()
		if err != nil {
			return nil, err
		}
		for j, i := range g {
			out[i] = plains[j]
		}
	}
	return out, nil
}

// readRunTo reads the frames ps (of one segment, in offset order) as
// readRun does, but decrypts each into dst[i] (PlainLen bytes) instead of
// a run buffer, and caches nothing: frames the memory cache holds are
// copied from it, the rest are read with one request per run into a
// pooled buffer and decrypted from there. It is for a sequential reader
// (of a local store, or of what a disk cache holds): its bytes go from the
// store's file to the caller's buffer with one copy and the decryption,
// both while they are in the processor's caches, and a stream larger than
// the memory cache does not push out what random readers keep there.
//
// A run of up to decryptAloneMax bytes is decrypted by the calling
// goroutine alone, so that its plaintext is in that core's cache when the
// caller sends it on (a FUSE reply: writev); a larger one on every core.
// With a disk cache, the frames it holds are read from it the same way
// (readDiskTo); the others are read as readRun reads them.
//
// With lend, for a caller that can also send plaintexts
// the reader lends (a FUSE reply from several slices): a frame the memory
// cache holds, or, with a disk cache, one that neither cache holds (read
// from the store into both), is lent as lent[i], readable until loan is
// released, instead of copied into dst[i]; lent[i] is nil for a frame
// decrypted into dst[i]. So a stream of what was fetched ahead into the
// memory cache (behind a remote store, what the disk cache does not hold
// yet) is sent without a copy. The loan it returns (nil on error) holds
// what the frames were read from.
func (r *Reader) readRunTo(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, dst [][]byte, lend bool) (lent [][]byte, loan *Loan, err error) {
	if len(ids) != len(ps) || len(dst) != len(ps) {
		return nil, nil, fmt.Errorf("segment run: %d ids and %d buffers for %d pointers", len(ids), len(dst), len(ps))
	}
	for i, p := range ps {
		if len(dst[i]) != int(p.PlainLen) {
			return nil, nil, fmt.Errorf("segment run: a buffer of %d bytes for a frame of %d", len(dst[i]), p.PlainLen)
		}
	}
	if err := r.checkRun(ps); err != nil {
		return nil, nil, err
	}
	if lend {
		lent = make([][]byte, len(ps))
	}
	loan = &Loan{r: r}
	var want []int
	var hits [][2][]byte // cached plaintext -> its buffer, copied outside the lock
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, nil, errClosed
	}
	for i := range ps {
		var e *memEntry
		if r.mu.mem != nil {
			e = r.mu.mem.entry(ps[i].Segment, ps[i].Offset, ids[i])
		}
		if e == nil || len(e.data) != len(dst[i]) { // a plaintext of another length: not this frame's
			want = append(want, i)
			continue
		}
		r.hold(e.run, loan)
		if lend {
			lent[i] = e.data
		} else {
			hits = append(hits, [2][]byte{e.data, dst[i]})
		}
	}
	r.mu.Unlock()
	r.ahead.passed(ps, want, &r.bufs)
	r.memHits.Add(uint64(len(ps) - len(want)))
	for _, h := range hits {
		copy(h[1], h[0])
	}
	workers := 1
	if dstLen(dst, want) > decryptAloneMax {
		workers = runtime.GOMAXPROCS(0)
	}
	if r.disk != nil {
		err = r.readDiskTo(ctx, ids, ps, want, dst, workers, lent, loan)
	} else {
		for _, g := range runGroups(ps, want) {
			if err = r.readGroupTo(ctx, ids, ps, g, dst, workers); err != nil {
				break
			}
		}
	}
	if err != nil {
		loan.Release()
		return nil, nil, err
	}
	return lent, loan, nil
}

// readDiskTo is readRunTo's reading of the frames ps[i], i in want, with
// a disk cache: those it holds are decrypted into dst[i] from it (from
// spans readAhead read out of it, or read here, one request per run),
// caching nothing; the rest, and any it held damaged (dropped from it),
// are read as readRun reads them, from the store into both caches, held
// by loan, and copied (or, with lent, lent as lent[i]). So a stream of
// what the writer uploaded, or of what was read before, costs its reads
// of the cache's files and one decryption, and does not push out of the
// memory cache what partial reads and writes keep there.
func (r *Reader) readDiskTo(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, want []int, dst [][]byte, workers int, lent [][]byte, loan *Loan) error {
	have := r.disk.present(ps, want)
	done := make([]bool, len(ps))
	// Spans are read from the cache's files, not the store: worth waiting
	// for even in a cache-only attempt, whose context is done from the
	// start.
	wait := context.WithoutCancel(ctx)
	for _, g := range runGroups(ps, have) {
		frames, release, err := r.sealedFramesFrom(wait, ps, g, true, func(g []int) ([]byte, [][]byte, bool, error) {
			start, end := ps[g[0]].Offset, ps[g[len(g)-1]].End()
			buf, data, pooled := r.readDiskSpan(ps[g[0]].Segment, int64(start), int(end-uint64(start)))
			if data == nil {
				return nil, nil, false, errNotCached
			}
			return buf, frameSlices(ps, g, uint64(start), data), pooled, nil
		})
		if err != nil {
			continue // unreadable now: from the store
		}
		ok := make([]bool, len(g))
		r.decodeEach(len(g), workers, func(o *keys.Opener, j int) {
			i := g[j]
			ok[j] = r.openTo(o, ids[i], frames[j], dst[i]) == nil
		})
		release()
		n := 0
		for j, i := range g {
			if !ok[j] {
				// A damaged cache entry (or a pointer for another id):
				// drop it; the store has the last word.
				r.diskDamaged(ps[i], "failed authentication")
				continue
			}
			done[i] = true
			n++
		}
		r.diskHits.Add(uint64(n))
	}
	var rest []int
	var restIDs []segment.FrameID
	var restPs []segment.Pointer
	for _, i := range want {
		if !done[i] {
			rest, restIDs, restPs = append(rest, i), append(restIDs, ids[i]), append(restPs, ps[i])
		}
	}
	if len(restPs) == 0 {
		return nil
	}
	datas, err := r.readRun(ctx, restIDs, restPs, loan)
	if err != nil {
		return err
	}
	for k, i := range rest {
		if lent != nil && len(datas[k]) == len(dst[i]) {
			lent[i] = datas[k]
			continue
		}
		clear(dst[i][copy(dst[i], datas[k]):])
	}
	return nil
}

// decryptAloneMax is the most plaintext readRunTo decrypts on the
// calling goroutine alone. A FUSE read (at most 1 MiB) is below it: the
// kernel keeps a sequential reader's next request in flight, which the
// other core serves meanwhile, and the reply is copied out of the cache
// of the core that decrypted it. Spreading each request over both cores
// of a 2-core machine cost 5-10% of the cold read's throughput (same-hour
// A/B, bench/README.md).
var decryptAloneMax = 2 << 20 // a variable for tests

// dstLen sums the lengths of dst[i], i in want.
func dstLen(dst [][]byte, want []int) int {
	n := 0
	for _, i := range want {
		n += len(dst[i])
	}
	return n
}

// readGroupTo reads the frames ps[i], i in g, with one request and
// decrypts each into dst[i], on up to workers goroutines, for readRunTo.
func (r *Reader) readGroupTo(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, g []int, dst [][]byte, workers int) error {
	frames, done, err := r.sealedFrames(ctx, ps, g, true)
	if err != nil {
		return err
	}
	defer done()
	errs := make([]error, len(g))
	r.decodeEach(len(g), workers, func(o *keys.Opener, j int) {
		i := g[j]
		if err := r.openTo(o, ids[i], frames[j], dst[i]); err != nil {
			errs[j] = r.reportCorrupt(ps[i], "", err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.misses.Add(uint64(len(g)))
	return nil
}

// diskDamaged drops the disk cache's entry of the frame p, which failed
// authentication, and counts it as damaged if there was one. There may be
// none: an entry evicted (or a queued frame the writer gave up on) after
// present found it was read as a hole, which is a plain miss.
func (r *Reader) diskDamaged(p segment.Pointer, why string) {
	if r.disk.drop(p, why) {
		r.diskCorrupt.Add(1)
	}
}

// readDiskRuns reads the frames ps[i], i in want, that the disk cache
// holds: each run of them with one read of its span, authenticated and
// decrypted on every core (openRun), then cached in memory as one run (as
// acceptRun does with a GET). It fills out and returns the indexes still
// wanted: frames the cache lacks, could not read, or held damaged (those
// are dropped from it).
func (r *Reader) readDiskRuns(ids []segment.FrameID, ps []segment.Pointer, want []int, out [][]byte, loan *Loan) []int {
	have := r.disk.present(ps, want)
	if len(have) == 0 {
		return want
	}
	done := make([]bool, len(ps))
	for _, g := range runGroups(ps, have) {
		start, end := int64(ps[g[0]].Offset), int64(ps[g[len(g)-1]].End())
		// The sealed span goes into a scratch buffer (read past the page
		// cache), given back once its frames are opened into the run's
		// own buffer.
		scratch, pooled := r.bufs.scratch(int(end-start) + objstore.SpanSlack)
		buf, err := r.disk.readSpan(ps[g[0]].Segment, start, int(end-start), scratch)
		if err != nil {
			if pooled {
				r.bufs.putScratch(scratch)
			}
			if !errors.Is(err, errNotCached) {
				for _, i := range g {
					r.disk.drop(ps[i], "unreadable: "+err.Error())
				}
			}
			continue
		}
		// Frames past a short read are damaged: cut them short, so that
		// openRun finds them so.
		frames := make([][]byte, len(g))
		for j, i := range g {
			a, b := min(int64(ps[i].Offset)-start, int64(len(buf))), min(int64(ps[i].End())-start, int64(len(buf)))
			frames[j] = buf[a:b:b]
		}
		run, plains, held, errs := r.openRun(ids, ps, g, frames)
		if pooled {
			r.bufs.putScratch(scratch)
		}
		n := 0
		for j, i := range g {
			if errs[j] != nil {
				// A damaged cache entry (or a pointer for another id):
				// drop it; the store has the last word.
				r.diskDamaged(ps[i], errs[j].Error())
				continue
			}
			out[i], done[i] = plains[j], true
			n++
		}
		r.diskHits.Add(uint64(n))
		if n == 0 {
			if run.buf != nil {
				r.bufs.put(run.buf)
			}
			continue
		}
		r.mu.Lock()
		r.cacheRun(run, ids, ps, g, plains, held, loan)
		r.mu.Unlock()
	}
	rest := want[:0:0]
	for _, i := range want {
		if !done[i] {
			rest = append(rest, i)
		}
	}
	return rest
}

// readSealedRun returns the raw (still sealed) frames ps point at, for
// repack to copy verbatim, with one coalesced ranged GET per run (as
// readRun). The caches are neither consulted nor filled, and the frames
// are not authenticated.
func (r *Reader) readSealedRun(ctx context.Context, ps []segment.Pointer) ([][]byte, error) {
	if err := r.checkRun(ps); err != nil {
		return nil, err
	}
	r.mu.Lock()
	closed := r.mu.closed
	r.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	out := make([][]byte, len(ps))
	all := make([]int, len(ps))
	for i := range all {
		all[i] = i
	}
	for _, g := range runGroups(ps, all) {
		_, frames, _, err := r.fetchGroup(ctx, ps, g, false)
		if err != nil {
			return nil, err
		}
		for j, i := range g {
			out[i] = frames[j]
		}
	}
	return out, nil
}

// readVerifiedRun is readSealedRun that also authenticates every frame
// for its id (without decompressing), so repack never copies a damaged
// frame. Failures wrap ErrCorrupt and are logged.
func (r *Reader) readVerifiedRun(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) ([][]byte, error) {
	if len(ids) != len(ps) {
		return nil, fmt.Errorf("segment run: %d ids for %d pointers", len(ids), len(ps))
	}
	out, err := r.readSealedRun(ctx, ps)
	if err != nil {
		return nil, err
	}
	for i, f := range out {
		if err := segment.VerifyFrame(r.k, ids[i], f, int(ps[i].PlainLen)); err != nil {
			return nil, r.reportCorrupt(ps[i], "", err)
		}
	}
	return out, nil
}
