package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/hugemem"
	"ebbfs.dev/ebbfs/internal/retry"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

func countDelta(live, total, size int64) []byte { return lsm.CounterDelta(live, total, size) }

func (e *Engine) deadBytes() {
	if e.opts.Events != nil {
		e.opts.Events.DeadBytes()
	}
}

// Barrier makes everything written before it durable: it seals and uploads
// the dirty data, commits its pointers, and appends the metadata batches
// since the last barrier to the journal. It succeeds only if all of that did.
// Calls that overlap share barriers (groupcommit.go).
func (e *Engine) Barrier(ctx context.Context) error {
	if e.ro.Load() {
		return nil
	}
	return e.groupBarrier(ctx)
}

// barrierLocked is Barrier; the caller holds flushMu.
func (e *Engine) barrierLocked(ctx context.Context) error {
	if err := e.flushLocked(ctx); err != nil {
		return err
	}
	failpoint.Hit("barrier-before-journal")
	if err := e.db.Barrier(ctx); err != nil {
		if errors.Is(err, lsm.ErrFenced) {
			return fmt.Errorf("%w: %v", ErrFenced, err)
		}
		return err
	}
	failpoint.Hit("barrier-after-journal")
	return nil
}

// BarrierCutoff runs the barrier and, before it releases the flush lock
// (the publication barrier), captures the reclamation cutoff: an id below
// which every segment is sealed, committed and in the journal. Taking the
// cutoff under the lock means no flush can seal a segment between the
// barrier and the capture; counting ids still in flight (a repack output
// not yet repointed, an upload whose commit is running) keeps a segment
// whose counter is only partly committed out of the cycle's view.
func (e *Engine) BarrierCutoff(ctx context.Context) (uint64, error) {
	if e.ro.Load() {
		return 0, ErrReadOnly
	}
	if err := e.lockFlush(ctx); err != nil {
		return 0, err
	}
	defer e.unlockFlush()
	if err := e.barrierLocked(ctx); err != nil {
		return 0, err
	}
	failpoint.Hit("barrier-before-cutoff")
	return e.SweepHorizon(), nil
}

// Seal uploads and commits the dirty data without a journal write.
func (e *Engine) Seal(ctx context.Context) error {
	if e.ro.Load() {
		return nil
	}
	if err := e.lockFlush(ctx); err != nil {
		return err
	}
	defer e.unlockFlush()
	return e.flushLocked(ctx)
}

type flushItem struct {
	n    *inode
	idx  uint64
	fe   *flushEntry
	ptr  segment.Pointer
	hole bool
	// zero: a patch-mode buffer whose span is all zeroes (a write of
	// zeroes into part of an extent, as NBD WRITE_ZEROES with NO_HOLE
	// makes): committed as a patch without a frame, as a punch's.
	zero bool
	snap uint64 // the inode's size when its dirty data was taken
	size int64  // the extent's size: the dirty bytes it counts
}

// framed reports whether the item's data goes into a frame (not a hole,
// not a patch of zeroes).
func (it *flushItem) framed() bool { return !it.hole && !it.zero }

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool { return len(bytes.TrimRight(b, "\x00")) == 0 }

// flushLocked moves every dirty extent into segments. Caller holds flushMu.
func (e *Engine) flushLocked(ctx context.Context) error {
	e.ns.Lock()
	var loaded []*inode
	for _, n := range e.ns.inodes {
		n.refs++
		loaded = append(loaded, n)
	}
	e.ns.Unlock()
	defer func() {
		e.ns.Lock()
		for _, n := range loaded {
			e.releaseLocked(n)
		}
		e.ns.Unlock()
	}()
	sort.Slice(loaded, func(i, j int) bool { return loaded[i].ino < loaded[j].ino })

	var items []flushItem
	var attrOnly []*inode
	for _, n := range loaded {
		n.mu.Lock()
		if len(n.dirty) == 0 {
			if n.attrDirty && !n.deleted {
				attrOnly = append(attrOnly, n)
			}
			n.mu.Unlock()
			continue
		}
		start := len(items)
		for idx, buf := range n.dirty {
			fe := &flushEntry{data: buf, remember: n.rmw[idx], span: n.spans[idx]}
			n.flushing[idx] = fe
			items = append(items, flushItem{n: n, idx: idx, fe: fe, snap: n.attr.Size, size: int64(len(buf))})
		}
		n.dirty = map[uint64][]byte{}
		n.spans = nil
		n.rmw = nil
		n.mu.Unlock()
		part := items[start:]
		sort.Slice(part, func(i, j int) bool { return part[i].idx < part[j].idx })
	}
	if len(items) > 0 {
		failpoint.Hit("flush-after-snapshot")
		done, err := e.writeSegments(ctx, items)
		if err != nil {
			rest := items[done:]
			e.dirtyDone(dirtyBytesOf(rest))
			e.requeue(rest)
			return err
		}
	}
	if len(attrOnly) > 0 {
		b := e.db.NewBatch()
		defer b.Close()
		for _, n := range attrOnly {
			n.mu.Lock()
			if !n.deleted {
				n.attrDirty = false
				n.settle()
				e.putInode(b, n)
			}
			n.mu.Unlock()
		}
		if err := e.commit(b); err != nil {
			return err
		}
	}
	return nil
}

// dirtyBytesOf is the dirty bytes items hold: an extent buffer each.
func dirtyBytesOf(items []flushItem) int64 {
	var n int64
	for _, it := range items {
		n += it.size
	}
	return n
}

// requeue puts the data of a failed flush back into the dirty maps unless
// something newer replaced it.
func (e *Engine) requeue(items []flushItem) {
	var back int64
	for _, it := range items {
		n := it.n
		n.mu.Lock()
		if n.flushing[it.idx] == it.fe {
			delete(n.flushing, it.idx)
			if n.dirty[it.idx] == nil && !n.deleted {
				n.dirty[it.idx] = it.fe.data
				n.setSpan(it.idx, it.fe.span)
				back += int64(len(it.fe.data))
			}
		}
		n.mu.Unlock()
	}
	e.dirtyBytes.Add(back)
}

// newSegID allocates a segment id and records it as in flight until
// uploadDone: the orphan sweep must never judge an object whose upload or
// commit has not finished.
func (e *Engine) newSegID() uint64 {
	e.inflightMu.Lock()
	defer e.inflightMu.Unlock()
	id := e.db.Epoch()<<32 | e.segSeq.Add(1)
	e.inflight[id] = true
	return id
}

func (e *Engine) uploadDone(id uint64) {
	e.inflightMu.Lock()
	delete(e.inflight, id)
	e.inflightMu.Unlock()
}

// SegmentDone ends the in-flight state of an id from NewSegmentID (repack
// outputs, once repointed or abandoned).
func (e *Engine) SegmentDone(id uint64) { e.uploadDone(id) }

// SweepHorizon returns the id below which no segment of this process is
// still being uploaded or committed: the orphan sweep judges only those,
// and the reclamation cycle's cutoff is this value taken under the flush
// lock (BarrierCutoff).
func (e *Engine) SweepHorizon() uint64 {
	e.inflightMu.Lock()
	defer e.inflightMu.Unlock()
	h := e.db.Epoch()<<32 | (e.segSeq.Load() + 1)
	for id := range e.inflight {
		h = min(h, id)
	}
	return h
}

// uploadsInFlight is how many segments a flush uploads at once. Their
// pointers are committed in order all the same: a segment's commit waits
// for the one before it. Two overlap one upload's last round trip (or the
// local store's fsync) with the next one's transfer.
const uploadsInFlight = 2

// segJob is one segment of a flush: uploaded, then committed after the
// segment before it.
type segJob struct {
	items int
	err   error         // final once done is closed
	done  chan struct{} // closed after the commit (or the failure)
}

// Segments are built in buffers of a hugemem.Pool, kept outside the Go
// heap and on huge pages, and reused: a buffer of SegmentTarget bytes
// allocated anew cost clearing it, and the page faults of fresh memory
// once the runtime had given it back (on this VM they took more CPU than
// sealing the bytes, most of the cipher's loop being faults on its
// output; the profile: bench/README.md, "Figures behind the code's
// constants"). On huge pages the local store's O_DIRECT writes of a
// segment also go to the disk in a few large requests (hugemem).
//
// A buffer comes back once its upload has returned (a Store keeps nothing
// of what it was given) and the disk cache, which may hold the frames of
// an uploaded segment until it has written them (Reader.Admit), has let
// go of it: segBuf counts the two.
//
// The pools are the process's, one per buffer size (an engine's is fixed
// by its SegmentTarget): a pool never unmaps its buffers, and tests open
// many engines.
var segPools struct {
	sync.Mutex
	m map[int]*hugemem.Pool
}

const (
	// segBufsMax is how many buffers a pool maps: enough for a steady
	// stream of flushes (uploadsInFlight, the one being built, one the
	// disk cache is writing). Past it (the disk cache's queue and
	// overflow holding several), buffers come from the Go heap.
	segBufsMax = uploadsInFlight + 2
	// segBufsWarm is how many free ones keep their memory, so that the
	// next flushes do not fault them in again.
	segBufsWarm = uploadsInFlight + 1
)

// segPool returns the process's pool of segment buffers of size bytes.
func segPool(size int) *hugemem.Pool {
	segPools.Lock()
	defer segPools.Unlock()
	p := segPools.m[size]
	if p == nil {
		if segPools.m == nil {
			segPools.m = make(map[int]*hugemem.Pool)
		}
		p = hugemem.NewPool(size, segBufsWarm, segBufsMax)
		segPools.m[size] = p
	}
	return p
}

// segBufsReused counts the segments built in a buffer that a pool had
// free (for tests; approximate where engines share a pool).
var segBufsReused atomic.Int64

// segBufSize is the size of an engine's segment buffers: room for the
// largest segment a flush builds (writeSegments: SegmentTarget of
// plaintext and at most one extent more, sealed, with its directory),
// rounded up to whole huge pages. A sixteenth covers the overhead of the
// frames and the directory (a 4 KiB frame's is under 2%).
func segBufSize(target int64) int {
	n := int(target) + int(target)/16 + segment.MaxFrameLen(segment.MaxPlainLen)
	const huge = 2 << 20
	return (n + huge - 1) &^ (huge - 1)
}

// newSegBuf takes a buffer from the engine's pool for a segment to be
// built in.
func (e *Engine) newSegBuf() *segBuf {
	if _, warm, cold := e.segBufs.Stats(); warm+cold > 0 {
		segBufsReused.Add(1)
	}
	sb := &segBuf{pool: e.segBufs, b: e.segBufs.Get()}
	sb.refs.Store(1)
	return sb
}

// segBuf is the buffer a segment is built in, shared by the flush and,
// once uploaded, the disk cache; the last of them to release it gives it
// back to its pool. Finish's object aliases b unless the segment outgrew
// it (then b is only given back).
type segBuf struct {
	pool *hugemem.Pool
	b    []byte
	refs atomic.Int32
}

// share counts one more holder, which must call release.
func (sb *segBuf) share() func() {
	sb.refs.Add(1)
	return sb.release
}

func (sb *segBuf) release() {
	switch n := sb.refs.Add(-1); {
	case n == 0:
		b := sb.b
		sb.b = nil
		sb.pool.Put(b)
	case n < 0:
		panic("fs: a segment buffer released more often than it was shared")
	}
}

// errEarlierSegment fails a segment whose predecessor in the same flush
// failed: committing it would leave a gap of unflushed extents below
// committed ones.
var errEarlierSegment = errors.New("fs: an earlier segment of this flush failed")

// writeSegments encodes items into segments of about SegmentTarget bytes,
// uploads each, and only then commits its pointers. Frames are encoded on
// every core, and the next segment is encoded while earlier ones upload
// (up to uploadsInFlight at once); commits keep the segments' order. It
// returns how many items (a prefix) were committed; their dirty bytes are
// released segment by segment so that writers blocked on the dirty limit
// go on early.
func (e *Engine) writeSegments(ctx context.Context, all []flushItem) (int, error) {
	committed := 0
	var firstErr error
	var uploads worker.Group // every upload returns before this does
	defer uploads.Wait()
	var jobs []*segJob // in flight, oldest first
	reap := func() {
		j := jobs[0]
		jobs = jobs[1:]
		<-j.done
		if j.err == nil && firstErr == nil {
			committed += j.items
		} else if firstErr == nil {
			firstErr = j.err
		}
	}
	var prev *segJob
	for start := 0; start < len(all); {
		end, plain := start, int64(0)
		for end < len(all) && plain < e.opts.SegmentTarget {
			plain += all[end].size
			end++
		}
		batch := all[start:end]
		start = end
		segID := e.newSegID()
		sb := e.newSegBuf()
		b := e.encodeSegment(segID, batch, sb.b)
		var obj []byte
		if b.Frames() > 0 {
			obj = b.Finish()
		}
		for len(jobs) >= uploadsInFlight || (len(jobs) > 0 && firstErr != nil) {
			reap()
		}
		if firstErr != nil {
			sb.release()
			e.uploadDone(segID)
			break
		}
		j := &segJob{items: len(batch), done: make(chan struct{})}
		frameBytes, after := int64(b.Size()), prev
		uploads.Go(func() {
			defer close(j.done)
			j.err = e.uploadAndCommit(ctx, segID, frameBytes, obj, sb, batch, after)
			sb.release()
		})
		jobs = append(jobs, j)
		prev = j
	}
	for len(jobs) > 0 {
		reap()
	}
	return committed, firstErr
}

// encodeSegment seals the frames of batch into a new segment builder,
// spreading the compression and encryption over the cores.
func (e *Engine) encodeSegment(segID uint64, batch []flushItem, buf []byte) *segment.Builder {
	ids := make([]segment.FrameID, 0, len(batch))
	datas := make([][]byte, 0, len(batch))
	for i := range batch {
		var d []byte
		if s := batch[i].fe.span; s.patch() {
			d = batch[i].fe.data[s.lo:s.hi] // a patch: its zeroes are data
			batch[i].zero = allZero(d)
		} else {
			d = bytes.TrimRight(batch[i].fe.data, "\x00")
			batch[i].hole = len(d) == 0
		}
		if batch[i].framed() {
			ids = append(ids, segment.FrameID{Ino: batch[i].n.ino, Extent: batch[i].idx, Gen: segID})
			datas = append(datas, d)
		}
	}
	b := segment.NewBuilderIn(e.opts.Keys, segID, e.codec, buf)
	ptrs := b.AddFrames(ids, datas, runtime.GOMAXPROCS(0))
	for i := range batch {
		if batch[i].framed() {
			batch[i].ptr, ptrs = ptrs[0], ptrs[1:]
		}
	}
	return b
}

// uploadAndCommit uploads one segment (waiting out store outages) and then,
// once prev (the flush's segment before it, if any) is committed, commits
// its pointers. obj is the segment, built in sb's buffer.
func (e *Engine) uploadAndCommit(ctx context.Context, segID uint64, frameBytes int64, obj []byte, sb *segBuf, batch []flushItem, prev *segJob) error {
	defer e.uploadDone(segID)
	if len(obj) > 0 {
		failpoint.Hit("segment-before-upload")
		if err := e.retry(ctx, "upload "+segment.Key(segID), func() error {
			return segment.Upload(ctx, e.opts.Store, segID, obj)
		}); err != nil {
			return err
		}
		failpoint.Hit("segment-after-upload")
		// What was just written is the likeliest to be read next (a VM
		// or database reading back its own writes): keep its frames in
		// the disk cache rather than fetching them again.
		ptrs := make([]segment.Pointer, 0, len(batch))
		for _, it := range batch {
			if it.framed() {
				ptrs = append(ptrs, it.ptr)
			}
		}
		e.rd.Admit(obj, ptrs, sb.share())
	}
	if prev != nil {
		<-prev.done
		if prev.err != nil {
			return errEarlierSegment
		}
	}
	if err := e.commitSegment(segID, frameBytes, int64(len(obj)), batch); err != nil {
		return err
	}
	e.dirtyDone(dirtyBytesOf(batch))
	failpoint.Hit("segment-after-commit")
	if len(obj) > 0 && e.opts.Events != nil {
		e.opts.Events.Sealed(segID, int64(len(obj)))
	}
	return nil
}

// commitSegment points the extents of batch at their frames in segID and
// debits the segments they leave, one transaction per inode. An extent
// that was truncated, punched or deleted meanwhile is skipped: its frame is
// dead on arrival.
func (e *Engine) commitSegment(segID uint64, frameBytes, objSize int64, batch []flushItem) error {
	first := true
	dead := false
	for i := 0; i < len(batch); {
		n := batch[i].n
		j := i
		for j < len(batch) && batch[j].n == n {
			j++
		}
		b := e.db.NewBatch()
		if first && objSize > 0 {
			b.Merge(schema.CounterKey(segID), countDelta(0, frameBytes, objSize))
			first = false
		}
		e.ptrMu.Lock()
		n.mu.Lock()
		st, err := e.stageInode(b, n, batch[i:j])
		dead = dead || st.dead
		taken := st.taken
		if err == nil {
			// Apply the commit to the inode, and take it back if the
			// commit fails: the data then stays in flight for requeue.
			saved, savedPsize, savedDirty := n.attr, n.psize, n.attrDirty
			for _, it := range taken {
				delete(n.flushing, it.idx)
			}
			if !n.deleted {
				n.attr.Blocks = st.blocks
				if p := n.coveredSize(batch[i].snap); p > n.psize {
					n.psize = p
				}
				n.attrDirty = false
				n.settle()
				e.putInode(b, n)
			}
			if st.live > 0 {
				b.Merge(schema.CounterKey(segID), countDelta(st.live, 0, 0))
			}
			st.hitBefore()
			if err = e.commit(b); err != nil {
				n.attr, n.psize, n.attrDirty = saved, savedPsize, savedDirty
				for _, it := range taken {
					n.flushing[it.idx] = it.fe
				}
			} else {
				st.hitAfter()
				e.opts.Stats.patched(st.patches, st.patchBytes)
				for _, it := range taken {
					if it.fe.remember && !it.hole && !it.fe.span.patch() && !n.deleted {
						e.rd.Remember(segment.FrameID{Ino: n.ino, Extent: it.idx, Gen: it.ptr.Gen}, it.ptr, it.fe.data[:it.ptr.PlainLen])
					} else {
						putExtentBuf(it.fe.data)
					}
					it.fe.data = nil
				}
			}
		}
		n.mu.Unlock()
		e.ptrMu.Unlock()
		b.Close()
		if err != nil {
			return err
		}
		e.queueMerges(st.merge)
		e.queueIdle(st.idle)
		failpoint.Hit("segment-after-inode-commit")
		i = j
	}
	if first && objSize > 0 {
		b := e.db.NewBatch()
		b.Merge(schema.CounterKey(segID), countDelta(0, frameBytes, objSize))
		err := e.commit(b)
		b.Close()
		if err != nil {
			return err
		}
	}
	if dead {
		e.deadBytes()
	}
	return nil
}

// retry runs op until it succeeds, ctx ends, or the error is permanent.
// Store outages are waited out: a barrier blocks rather than fails.
func (e *Engine) retry(ctx context.Context, what string, op func() error) error {
	return retry.Do(ctx, retry.Policy{Clock: e.clk, Logger: e.log, Permanent: objstore.IsPreconditionFailed}, what, op)
}

// kick wakes the flusher to seal: dirty data passed the segment target.
func (e *Engine) kick() {
	if w := e.flushW.Load(); w != nil {
		w.Notify()
	}
}

// flusher runs the periodic barrier and seals when dirty data passes the
// segment target (kick). An idle filesystem does nothing. A kick does not
// move the next periodic barrier.
func (e *Engine) flusher(w *worker.Worker) {
	ctx := w.Context()
	tick := w.After(e.opts.FlushInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Woken():
			if err := e.Seal(ctx); err != nil && ctx.Err() == nil {
				e.log.Error("sealing dirty data", "err", err)
			}
		case <-tick:
			tick = w.After(e.opts.FlushInterval)
			if !e.needsBarrier() || e.db.Failed() != nil {
				// A failed metadata store was logged once; no barrier
				// can succeed again (cachedisk.go).
				continue
			}
			if err := e.Barrier(ctx); err != nil && ctx.Err() == nil {
				e.log.Error("periodic barrier", "err", err)
			}
		}
	}
}

// needsBarrier reports whether anything is dirty or unjournaled.
func (e *Engine) needsBarrier() bool {
	if e.dirtyBytes.Load() > 0 || e.db.Pending() > 0 {
		return true
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	for _, n := range e.ns.inodes {
		n.mu.RLock()
		d := n.attrDirty || len(n.flushing) > 0
		n.mu.RUnlock()
		if d {
			return true
		}
	}
	return false
}

func decodeCounter(b []byte) (live, total, size int64, err error) { return lsm.DecodeCounter(b) }
