package fs

import (
	"context"
	"fmt"
	"slices"

	"ebbfs.dev/ebbfs/internal/retry"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// Reads and the read half of a partial-extent write never wait for the
// store holding the inode lock: a stat of the file, and so a lookup or a
// readdir in its directory, must not wait for a store outage to end. The
// first attempt under the lock serves only what is in memory or in the
// caches (cacheOnly); what it misses is fetched without the lock, waiting
// out outages (storeRead), and the second attempt finds it cached. (That
// attempt may fetch under the lock what was evicted meanwhile, so that a
// small cache cannot make it go round for ever.) A local-directory store
// has no outages and no disk cache: its reads go straight through.

// errCacheOnly is the error of a first attempt's context, cancelled from
// the start, so that anything not cached fails at once instead of going
// to the store. It is a context.Canceled.
var errCacheOnly = fmt.Errorf("fs: cache-only attempt: %w", context.Canceled)

// cacheOnly returns the context for a first attempt: ctx, cancelled with
// errCacheOnly unless the store is a local directory.
func (e *Engine) cacheOnly(ctx context.Context) context.Context {
	if e.local {
		return ctx
	}
	return cacheOnlyCtx{ctx}
}

// cacheOnlyCtx is ctx's values and deadline, cancelled (errCacheOnly). It
// costs nothing to make: a context.WithCancelCause of the FUSE request's
// context was tied to it for nothing (a child registered, or a goroutine
// started, per read), a visible part of a cold 4 KiB random read's CPU on
// S3 (the figure: bench/README.md, "Figures behind the code's constants").
type cacheOnlyCtx struct{ context.Context }

func (cacheOnlyCtx) Done() <-chan struct{} { return closedDone }
func (cacheOnlyCtx) Err() error            { return errCacheOnly }

// closedDone is the Done channel of every cacheOnlyCtx.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// missed reports an error of a cache-only attempt: a frame to fetch
// (whatever the error: a store that does not look at the context may have
// been asked and failed; the attempt without the lock finds out).
func missed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == errCacheOnly
}

// storeMiss is a run of frames a cache-only attempt did not find; for one
// frame read in part (readPieces), to > 0 and [from, to) is the part.
type storeMiss struct {
	ids      []segment.FrameID
	ptrs     []segment.Pointer
	from, to int
}

// storeRead runs op, which reads from the store without holding an inode
// lock, until it does not fail for a store outage: data that no cache
// holds is read when the store answers again (as fsync waits for it),
// instead of failing the application with EIO. Only the caller giving up
// (an interrupted request, shutdown) or an error that is not an outage
// ends it early.
func (e *Engine) storeRead(ctx context.Context, what string, op func() error) error {
	return retry.Do(ctx, retry.Policy{Clock: e.clk, Logger: e.log,
		Permanent: func(err error) bool { return !objstore.IsUnavailable(err) }}, what, op)
}

// fetch reads the missed runs into the caches, waiting out outages.
func (e *Engine) fetch(ctx context.Context, misses []storeMiss, pieces bool) error {
	if pieces {
		var err error
		if misses, err = e.fetchPieces(ctx, misses); err != nil {
			return err
		}
	}
	for _, m := range coalescePieces(misses) {
		err := e.storeRead(ctx, "read "+segment.Key(m.ptrs[0].Segment), func() error {
			_, err := e.rd.Read(ctx, &segread.Request{IDs: m.ids, Ptrs: m.ptrs, Want: segread.Fill})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// readFrame returns the plaintext of the frame p, sealed for id, shared
// with rd's memory cache: it must not be modified.
func readFrame(ctx context.Context, rd *segread.Reader, id segment.FrameID, p segment.Pointer) ([]byte, error) {
	res, err := rd.Read(ctx, &segread.Request{ID: id, Ptr: p})
	return res.Frame, err
}

// readCommitted reads an extent's committed bytes (base and patches);
// nil means a hole.
func (e *Engine) readCommitted(ctx context.Context, ino, idx uint64) ([]byte, error) {
	x, ok, err := e.visibleExtent(ino, idx)
	if err != nil || !ok {
		return nil, err
	}
	return e.readExtent(ctx, ino, idx, x)
}

// baseLocked returns the current bytes of extent idx (nil: zeroes) for a
// partial write of it that rewrites it whole; the extent is not dirty.
// Bytes read from the committed value come with it (the zero value
// otherwise). A patch in flight is painted over the committed bytes.
// The bytes must not be modified. Caller holds n.mu.
func (e *Engine) baseLocked(ctx context.Context, n *inode, idx uint64) ([]byte, segment.Extent, error) {
	f := n.flushing[idx]
	if f != nil && !f.span.patch() {
		return f.data, segment.Extent{}, nil
	}
	x, ok, err := e.visibleExtent(n.ino, idx)
	if err != nil {
		return nil, segment.Extent{}, err
	}
	var b []byte
	if ok {
		if b, err = e.readExtent(ctx, n.ino, idx, x); err != nil {
			return nil, segment.Extent{}, err
		}
	}
	if f != nil {
		m := make([]byte, n.es())
		copy(m, b)
		copy(m[f.span.lo:f.span.hi], f.data[f.span.lo:f.span.hi])
		return m, x, nil
	}
	return b, x, nil
}

// Read reads up to len(p) bytes at off. It returns 0 at or past the end.
func (e *Engine) Read(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	nr, err := e.readAny(ctx, ino, p, off)
	return nr, e.readFailed(ino, off, len(p), err)
}

// readAny is Read on a writer, a checkpoint reader or a following replica.
func (e *Engine) readAny(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	if !e.ro.Load() || e.opts.PinManifest != 0 {
		return e.read(ctx, ino, p, off, nil)
	}
	nr, gone, err := e.replicaRead(ctx, ino, p, off)
	if gone {
		// A replica's open file that the writer deleted: its extents may
		// have read as zeroes, which are not its bytes (fs/follow.go).
		return 0, ErrStale
	}
	if err == nil || !objstore.IsNotFound(err) {
		return nr, err
	}
	// A replica read a pointer into a segment the writer has since
	// reclaimed (repacked or deleted). Take the writer's newer state and
	// read again: the new location, or a hole.
	if _, ferr := e.Follow(ctx); ferr != nil {
		e.log.Error("replica: a segment is gone and the newer state cannot be read", "ino", ino, "off", off, "err", err, "follow_err", ferr)
		return nr, err
	}
	nr, gone, err = e.replicaRead(ctx, ino, p, off)
	if gone {
		return 0, ErrStale
	}
	if err != nil && objstore.IsNotFound(err) {
		e.log.Error("replica: a segment is gone and the newest state still points into it", "ino", ino, "off", off, "err", err)
	} else if err == nil {
		e.log.Debug("replica: a segment was gone; read again from the newer state", "ino", ino, "off", off)
	}
	return nr, err
}

// replicaRead is read on a following replica, as one step against the
// journals it applies (fs/follow.go); gone reports bytes read from a file
// the writer has deleted.
func (e *Engine) replicaRead(ctx context.Context, ino uint64, p []byte, off int64) (int, bool, error) {
	e.follow.view.RLock()
	defer e.follow.view.RUnlock()
	nr, err := e.read(ctx, ino, p, off, nil)
	return nr, err == nil && nr > 0 && e.goneOnWriter(ino), err
}

// ReadVec is Read for a reply that can be sent from several slices
// without copying them into one (FUSE's vectored replies). It returns
// the bytes read as slices, in order, n in all: slices of p, and
// plaintexts the segment reader lends until release is called, which the
// caller must do once the reply is sent (release may be nil; the bytes of
// p under a lent slice are then not written). Only the writer lends; a
// replica's read is Read's.
func (e *Engine) ReadVec(ctx context.Context, ino uint64, p []byte, off int64) (vecs [][]byte, release func(), n int, err error) {
	if e.ro.Load() {
		n, err = e.Read(ctx, ino, p, off)
		return [][]byte{p[:max(n, 0)]}, nil, n, err
	}
	v := &readVec{}
	n, err = e.read(ctx, ino, p, off, v)
	err = e.readFailed(ino, off, len(p), err)
	if err != nil || n == 0 {
		v.release()
		return [][]byte{p[:0]}, nil, n, err
	}
	if len(v.loans) == 0 {
		return v.vecs, nil, n, nil
	}
	return v.vecs, v.release, n, nil
}

// readVec collects the bytes of one read as slices, for ReadVec: ranges
// of the caller's buffer, and plaintexts of frames on loan from the
// segment reader.
type readVec struct {
	vecs  [][]byte
	loans []*segread.Loan
}

// release releases the loans and forgets the slices.
func (v *readVec) release() {
	for _, l := range v.loans {
		l.Release()
	}
	v.vecs, v.loans = nil, nil
}

func (e *Engine) read(ctx context.Context, ino uint64, p []byte, off int64, vec *readVec) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	n, err := e.acquire(ino)
	if err != nil {
		return 0, err
	}
	defer e.release(n)
	// A read-ahead under way over this range fetches it: wait for it (not
	// holding the inode lock, as it may wait for the store). On a local
	// store, the segment reader waits for the one span a read needs.
	if ra := n.ra.Load(); ra != nil && !e.local && off < ra.to && off+int64(len(p)) > ra.from {
		select {
		case <-ra.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	var misses []storeMiss
	nr, err := e.readOnce(e.cacheOnly(ctx), n, p, off, &misses, vec)
	if len(misses) == 0 {
		return nr, err
	}
	if vec != nil {
		vec.release() // an incomplete attempt
	}
	pieces := e.fetchAround(ctx, n, off)
	if err := e.fetch(ctx, misses, pieces); err != nil {
		return 0, err
	}
	return e.readOnce(ctx, n, p, off, nil, vec)
}

// readOnce is read under the inode's lock, one attempt. With misses, what
// a cache-only attempt (ctx from cacheOnly) did not find is appended to it
// (the result is then incomplete). With vec, the bytes are collected
// there (readRangeLocked).
func (e *Engine) readOnce(ctx context.Context, n *inode, p []byte, off int64, misses *[]storeMiss, vec *readVec) (int, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.attr.IsDir() {
		return 0, ErrIsDir
	}
	size := int64(n.attr.Size)
	if off >= size {
		return 0, nil
	}
	if int64(len(p)) > size-off {
		p = p[:size-off]
	}
	end := off + int64(len(p))
	random := n.seq.random(off)
	if err := e.readRangeLocked(ctx, n, p, off, random, misses, vec); err != nil {
		return 0, err
	}
	if misses != nil && len(*misses) > 0 {
		return 0, nil
	}
	if stream, ok := n.seq.advance(off, end); ok {
		e.readAhead(n.ino, end, size, stream, n)
	}
	return len(p), nil
}

// Read-ahead: a read that continues a stream (read_stream.go) fetches the
// committed extents from readAheadSkip to the stream's window past it
// into the frame cache in the background, in runs of at least the least
// readAheadSpan gives, so that decryption of what comes next overlaps
// with the kernel copying out what came before. The window starts at
// readAheadFirst and grows with the stream up to readAheadWindow. The
// first readAheadSkip is left to the kernel's own readahead (1 MiB),
// whose request is usually already on its way; were it fetched here too,
// the segment reader would have the later of the two wait for the
// other's GET (segread, flight.go) rather than fetch it twice.
//
// On a local store, reads of whole frames are decrypted straight into the
// request's buffer instead (readRangeLocked), from sealed bytes read past
// the page cache (objstore.ReadSpan). Read-ahead there reads only those
// sealed bytes (segread.Reader.ReadAhead), up to readAheadLocalWindow
// past the request's end: the segment reader holds few spans, and the
// kernel no longer reads the files ahead. Decrypting ahead into the
// frame cache moved every byte through memory three more times (into a
// run buffer, decrypted into another, copied into the reply), and on a
// 2-core machine that left the cold read well behind the go-fuse
// passthrough. At half the local window ahead, requests still waited for
// the disk noticeably more often (a virtio disk's latency comes in
// bursts). The figures: bench/README.md, "Figures behind the code's
// constants".
const (
	readAheadSkip   = 1 << 20
	readAheadFirst  = 4 << 20  // the window of a new stream behind a remote store (read_stream.go)
	readAheadWindow = 32 << 20 // the most it grows to
	readAheadMin    = 4 << 20

	readAheadLocalWindow = 24 << 20
	readAheadLocalMin    = 4 << 20
)

func (e *Engine) readAhead(ino uint64, end, size, stream int64, n *inode) {
	window, least := e.readAheadSpan(stream)
	from := max(end+readAheadSkip, n.raEnd.Load())
	to := min(end+window, size)
	if to-from < least && to < size || to <= from || e.closed.Load() {
		return
	}
	select {
	case e.raSem <- struct{}{}:
	default:
		return // enough read-ahead in flight
	}
	n.raEnd.Store(to)
	es := n.es() // caller holds n.mu
	run := &readAheadRun{from: from, to: to, done: make(chan struct{})}
	n.ra.Store(run)
	e.raGroup.Go(func() {
		defer func() { <-e.raSem }()
		defer close(run.done)
		e.prefetch(e.bg, ino, es, from, to)
	})
}

// prefetchRun bounds the bytes one read-ahead GET fetches.
const prefetchRun = 2 << 20

// prefetch reads the committed extents covering [from, to) into the cache.
// Its runs (frames adjacent in one segment, one GET each) are fetched
// concurrently, so that one run's GET overlaps another's decryption. On a
// local store, and for runs the disk cache holds, whose sequential reads
// are decrypted straight into the reader's buffer (readRangeLocked), it
// only reads the runs' sealed bytes for those reads to decrypt
// (segread.Reader.ReadAhead).
func (e *Engine) prefetch(ctx context.Context, ino, es uint64, from, to int64) {
	ctx = objstore.TagIfTracing(ctx, objstore.PurposeReadAhead)
	all, err := e.pointersIn(ino, uint64(from)/es, uint64(to-1)/es+1)
	if err != nil {
		return
	}
	// Patched extents are read piece by piece when asked for (patchread.go).
	all = slices.DeleteFunc(all, func(x extentPointer) bool { return x.x != nil })
	var runs worker.Group
	for len(all) > 0 && ctx.Err() == nil {
		k, span := 1, all[0].p.Length
		for k < len(all) && span < prefetchRun && all[k].p.Segment == all[k-1].p.Segment && all[k-1].p.End() == uint64(all[k].p.Offset) {
			span += all[k].p.Length
			k++
		}
		ids := make([]segment.FrameID, k)
		ptrs := make([]segment.Pointer, k)
		for i, x := range all[:k] {
			ids[i], ptrs[i] = segment.FrameID{Ino: ino, Extent: x.idx, Gen: x.p.Gen}, x.p
		}
		all = all[k:]
		runs.Go(func() {
			if res, _ := e.rd.Read(ctx, &segread.Request{Ptrs: ptrs, Want: segread.Ahead}); res.Started {
				return // sealed bytes, from a local store or the disk cache
			}
			if _, err := e.rd.Read(ctx, &segread.Request{IDs: ids, Ptrs: ptrs, Want: segread.Fill}); err != nil {
				e.log.Debug("read-ahead", "ino", ino, "err", err)
			}
		})
	}
	runs.Wait()
}

// readPieces reads bytes [from, to) of extent idx, whose frame ptr has
// pieces, into dst (to-from bytes), and places them with place; with
// misses, a cache-only attempt that did not find them records the extent
// there instead.
func (e *Engine) readPieces(ctx context.Context, ino, idx uint64, ptr segment.Pointer, from, to int64, dst []byte,
	place func(idx uint64, data []byte, base int64, lent bool), misses *[]storeMiss) error {
	if from >= to { // only the zeroes past the stored bytes
		place(idx, nil, 0, false)
		return nil
	}
	id := segment.FrameID{Ino: ino, Extent: idx, Gen: ptr.Gen}
	_, err := e.rd.Read(ctx, &segread.Request{ID: id, Ptr: ptr, From: int(from), To: int(to), Buf: dst})
	if misses != nil && missed(ctx, err) {
		*misses = append(*misses, storeMiss{[]segment.FrameID{id}, []segment.Pointer{ptr}, int(from), int(to)})
		return nil
	}
	if err != nil {
		return err
	}
	place(idx, dst, from, false) // copies dst onto itself (at most an extent), and lists it for a vectored reply
	return nil
}

// uncommitted returns the bytes of extent idx that are not read from a
// committed frame, with ok: the write buffers' (dirty, or being flushed),
// or nil for a hole; committed holds the committed extents from idx on.
func uncommitted(n *inode, idx uint64, committed []extentPointer) (data []byte, ok bool) {
	if b := n.dirty[idx]; b != nil {
		return b, true
	}
	if f := n.flushing[idx]; f != nil {
		return f.data, true
	}
	return nil, len(committed) == 0 || committed[0].idx != idx
}

// readRangeLocked fills p from off, fetching runs of committed extents that
// sit next to each other in one segment with one request. With misses, the
// runs a cache-only attempt did not find are appended to it instead. With
// vec, the bytes are also listed there in order: the plaintexts of those
// runs on loan, not copied into p, and p's ranges holding the rest.
func (e *Engine) readRangeLocked(ctx context.Context, n *inode, p []byte, off int64, random bool, misses *[]storeMiss, vec *readVec) error {
	es := int64(n.es())
	first := uint64(off / es)
	last := uint64((off + int64(len(p)) - 1) / es)
	runCap := min(last-first+1, 64) // a run is at most 64 frames
	rr := &rangeRead{e: e, ctx: ctx, p: p, off: off, es: es, misses: misses, vec: vec,
		runIDs:  make([]segment.FrameID, 0, runCap),
		runPtrs: make([]segment.Pointer, 0, runCap),
		// A read of a local store has a run's frames decrypted straight
		// into p (a Request with Bufs) when each of them lies in
		// [off, off+len(p)) whole: no run buffer, no copy out of it,
		// nothing cached that a stream would push out again. (The
		// kernel handles a sequential reader's requests concurrently,
		// so they do not all look sequential here; a random read of
		// whole extents loses nothing by it either: the store's reads
		// cost no request, and the kernel keeps the small ones in its
		// page cache.) Behind a remote store, the same goes for frames
		// the disk cache holds; the others are fetched into the caches
		// (ahead, by the cache-only attempt's misses, or by the reader)
		// and lent to a vectored reply (copied into p for any other).
		stream: e.local || e.rd.HasDiskCache(),
	}
	committed, err := e.committedIn(n, first, last+1, !random)
	if err != nil {
		return err
	}
	for idx := first; idx <= last; idx++ {
		for len(committed) > 0 && committed[0].idx < idx {
			committed = committed[1:]
		}
		// A buffer holding part of the extent (a patch), or a patched
		// value: the extent is assembled from its pieces.
		if mem, s, ok := n.memPatch(idx); ok {
			x, has := committedAt(committed, idx)
			if err := rr.assemble(n.ino, idx, x, has, mem, s); err != nil {
				return err
			}
			continue
		}
		// Bytes not from a committed frame: the write buffers', or
		// zeroes. The run before them is placed first (vec lists the
		// bytes in order).
		if data, ok := uncommitted(n, idx, committed); ok {
			if err := rr.flush(); err != nil {
				return err
			}
			rr.placeFrom(idx, data, 0, false)
			continue
		}
		if x := committed[0].x; x != nil {
			if err := rr.assemble(n.ino, idx, *x, true, nil, span{}); err != nil {
				return err
			}
			continue
		}
		ptr := committed[0].p
		if random && (idx == first || idx == last) && (first == last || e.local) {
			done, err := rr.pieces(n.ino, idx, ptr)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		if err := rr.add(n.ino, idx, ptr); err != nil {
			return err
		}
	}
	return rr.flush()
}

// rangeRead is one readRangeLocked: the request's buffer p from off, and
// the run of committed frames it collects.
type rangeRead struct {
	e      *Engine
	ctx    context.Context
	p      []byte
	off    int64
	es     int64
	misses *[]storeMiss
	vec    *readVec
	stream bool

	runIDs  []segment.FrameID // a run's frames: extent runIDs[i].Extent's in runPtrs[i]
	runPtrs []segment.Pointer
}

// placeFrom copies extent idx's part of [off, off+len(p)) into p from data,
// which holds the extent's bytes from base on (zeroes after it). With
// vec, data that is lent is listed there instead of copied.
func (rr *rangeRead) placeFrom(idx uint64, data []byte, base int64, lent bool) {
	p, off, es, vec := rr.p, rr.off, rr.es, rr.vec
	start := int64(idx) * es
	lo, hi := max(start, off), min(start+es, off+int64(len(p)))
	dst := p[lo-off : hi-off]
	var src []byte
	if a := lo - start - base; a < int64(len(data)) {
		src = data[a:min(int64(len(data)), hi-start-base)]
	}
	if vec != nil && lent && len(src) > 0 {
		vec.vecs = append(vec.vecs, src)
		dst = dst[len(src):]
		src = nil
	}
	k := copy(dst, src)
	clear(dst[k:])
	if vec != nil && len(dst) > 0 {
		vec.vecs = append(vec.vecs, dst)
	}
}

// pieces reads extent idx, the first or last of a random read, on its
// own if the read covers only part of it and its frame has pieces: then
// only the pieces it needs are read, and done is true. (Behind a remote
// store, a read of several extents is left to one GET of their run when
// they are not cached.)
func (rr *rangeRead) pieces(ino, idx uint64, ptr segment.Pointer) (done bool, err error) {
	start := int64(idx) * rr.es
	end := rr.off + int64(len(rr.p))
	from := max(start, rr.off) - start
	to := min(start+rr.es, end, start+int64(ptr.PlainLen)) - start
	if !ptr.IsPieced() || (from == 0 && to >= int64(ptr.PlainLen)) {
		return false, nil
	}
	if err := rr.flush(); err != nil {
		return true, err
	}
	at := start + from - rr.off // where the bytes go in p
	return true, rr.e.readPieces(rr.ctx, ino, idx, ptr, from, to, rr.p[at:at+max(to-from, 0)], rr.placeFrom, rr.misses)
}

// add appends extent idx's frame to the run, reading the run first if the
// frame does not continue it in its segment or the run is full.
func (rr *rangeRead) add(ino, idx uint64, ptr segment.Pointer) error {
	if k := len(rr.runPtrs); k > 0 {
		prev := rr.runPtrs[k-1]
		if prev.Segment != ptr.Segment || prev.End() != uint64(ptr.Offset) || k >= 64 {
			if err := rr.flush(); err != nil {
				return err
			}
		}
	}
	rr.runIDs = append(rr.runIDs, segment.FrameID{Ino: ino, Extent: idx, Gen: ptr.Gen})
	rr.runPtrs = append(rr.runPtrs, ptr)
	return nil
}

// missed records the run as missed by a cache-only attempt, if it was.
func (rr *rangeRead) missed(err error) bool {
	if rr.misses == nil || !missed(rr.ctx, err) {
		return false
	}
	*rr.misses = append(*rr.misses, storeMiss{ids: slices.Clone(rr.runIDs), ptrs: slices.Clone(rr.runPtrs)})
	return true
}

// flush reads the run collected so far into p (or vec) and starts a new
// one.
func (rr *rangeRead) flush() error {
	defer func() { rr.runIDs, rr.runPtrs = rr.runIDs[:0], rr.runPtrs[:0] }()
	if len(rr.runIDs) == 0 {
		return nil
	}
	if rr.stream && rr.streamable() {
		return rr.streamRun()
	}
	// The plaintexts are lent until copied into p: their buffers then
	// serve other runs.
	res, err := rr.e.rd.Read(rr.ctx, &segread.Request{IDs: rr.runIDs, Ptrs: rr.runPtrs, Lend: true})
	if rr.missed(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for i, id := range rr.runIDs {
		rr.placeFrom(id.Extent, res.Frames[i], 0, rr.vec != nil)
	}
	if rr.vec != nil {
		rr.vec.loans = append(rr.vec.loans, res.Loan) // until the reply is sent
	} else {
		res.Loan.Release()
	}
	return nil
}

// streamable reports whether every frame of the run lies whole in
// [off, off+len(p)).
func (rr *rangeRead) streamable() bool {
	for i, id := range rr.runIDs {
		start := int64(id.Extent) * rr.es
		if pl := int64(rr.runPtrs[i].PlainLen); start < rr.off || start+pl > rr.off+int64(len(rr.p)) || pl > rr.es {
			return false
		}
	}
	return true
}

// streamRun has the run's frames decrypted straight into p. With vec,
// what the memory cache holds (fetched ahead behind a remote store) is
// lent to the reply rather than copied.
func (rr *rangeRead) streamRun() error {
	p, off, es, vec := rr.p, rr.off, rr.es, rr.vec
	dsts := make([][]byte, len(rr.runIDs))
	for i, id := range rr.runIDs {
		at := int64(id.Extent)*es - off
		dsts[i] = p[at : at+int64(rr.runPtrs[i].PlainLen)]
	}
	res, err := rr.e.rd.Read(rr.ctx, &segread.Request{IDs: rr.runIDs, Ptrs: rr.runPtrs, Bufs: dsts, Lend: vec != nil})
	if rr.missed(err) {
		return nil
	}
	if err != nil {
		return err
	}
	borrowed := false
	for i, id := range rr.runIDs {
		start := int64(id.Extent) * es
		region := p[start-off : min(start+es, off+int64(len(p)))-off]
		clear(region[rr.runPtrs[i].PlainLen:]) // zeroes past the stored bytes
		switch {
		case vec == nil:
		case res.Frames[i] != nil:
			borrowed = true
			vec.vecs = append(vec.vecs, res.Frames[i])
			if tail := region[rr.runPtrs[i].PlainLen:]; len(tail) > 0 {
				vec.vecs = append(vec.vecs, tail)
			}
		default:
			vec.vecs = append(vec.vecs, region)
		}
	}
	if borrowed {
		vec.loans = append(vec.loans, res.Loan) // until the reply is sent
	} else {
		res.Loan.Release()
	}
	return nil
}
