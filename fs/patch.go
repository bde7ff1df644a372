package fs

import (
	"context"
	"errors"
	"fmt"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// Patched extents (docs/PATCHES.md). An extent's committed value may be a
// base frame and patches (segment.Extent). With Options.patchWrites (on
// by default on a filesystem of descriptor format 4), a write into part
// of an extent that is not in memory keeps only the bytes it wrote, in a
// dirty buffer in patch mode (inode.spans), and the flush stores them as
// a patch of the extent instead of the whole extent read, modified and
// sealed again.

// patchLimit is the most patches the writer lets a value hold: a write
// that would leave more rewrites the extent whole instead. Below
// segment.MaxPatches, which the codec accepts.
const patchLimit = 8

// span is the bytes [lo, hi) of an extent that a buffer in patch mode
// holds; the rest of the extent is the committed value's. The zero span
// means the buffer holds the whole extent.
type span struct{ lo, hi uint32 }

func (s span) patch() bool { return s.hi > 0 }

// joins reports whether [lo, hi) overlaps or touches s, so that one
// span covers both.
func (s span) joins(lo, hi int64) bool { return lo <= int64(s.hi) && hi >= int64(s.lo) }

// widen is s grown to cover [lo, hi) too (s must join it); the zero span
// when that is the whole extent of es bytes.
func (s span) widen(lo, hi, es int64) span {
	w := span{min(s.lo, uint32(lo)), max(s.hi, uint32(hi))}
	if w.lo == 0 && int64(w.hi) >= es {
		return span{}
	}
	return w
}

// setSpan records the span of the dirty buffer of idx (the zero span:
// it holds the whole extent). Caller holds n.mu for writing.
func (n *inode) setSpan(idx uint64, s span) {
	if !s.patch() {
		delete(n.spans, idx)
		return
	}
	if n.spans == nil {
		n.spans = map[uint64]span{}
	}
	n.spans[idx] = s
}

// memPatch returns the in-memory buffer of extent idx if it is in patch
// mode (dirty, or in flight if nothing is dirty), with its span. Caller
// holds n.mu.
func (n *inode) memPatch(idx uint64) ([]byte, span, bool) {
	if b := n.dirty[idx]; b != nil {
		s := n.spans[idx]
		return b, s, s.patch()
	}
	if f := n.flushing[idx]; f != nil && f.span.patch() {
		return f.data, f.span, true
	}
	return nil, span{}, false
}

// patchInMem reports whether extent idx has a buffer in patch mode, dirty
// or in flight. Caller holds n.mu.
func (n *inode) patchInMem(idx uint64) bool {
	if f := n.flushing[idx]; f != nil && f.span.patch() {
		return true
	}
	return n.dirty[idx] != nil && n.spans[idx].patch()
}

// patchesBelow reports whether what memory holds of extent idx is
// patches only (dirty, in flight, or both), all below byte from of the
// extent. Caller holds n.mu.
func (n *inode) patchesBelow(idx uint64, from uint64) bool {
	if b := n.dirty[idx]; b != nil {
		if s := n.spans[idx]; !s.patch() || uint64(s.hi) > from {
			return false
		}
	}
	if f := n.flushing[idx]; f != nil && (!f.span.patch() || uint64(f.span.hi) > from) {
		return false
	}
	return true
}

// errPatchInMem stops a truncate, punch or grow whose edge extent has a
// buffer in patch mode: those paths zero whole buffers, so the caller
// seals the dirty data first and looks again.
var errPatchInMem = errors.New("fs: an edge extent has a patch in memory")

// extentValue returns the committed value of an extent, if any, whether
// or not a range tombstone made it dead.
func (e *Engine) extentValue(ino, idx uint64) (segment.Extent, bool, error) {
	v, ok, err := e.get(schema.ExtentKey(ino, idx))
	if err != nil || !ok {
		return segment.Extent{}, false, err
	}
	x, err := segment.UnmarshalExtent(v)
	if err != nil {
		return segment.Extent{}, false, fmt.Errorf("fs: extent %d/%d: %w", ino, idx, err)
	}
	return x, true, nil
}

// visibleExtent is the value a read of extent idx uses: the committed
// one, unless a range tombstone made it dead.
func (e *Engine) visibleExtent(ino, idx uint64) (segment.Extent, bool, error) {
	x, ok, err := e.extentValue(ino, idx)
	if err != nil || !ok {
		return segment.Extent{}, false, err
	}
	if e.ranges.dead(ino, idx, x.NewestGen()) {
		return segment.Extent{}, false, nil
	}
	return x, true, nil
}

// readExtent returns the bytes of extent idx that its committed value x
// holds (zeroes past the slice). A base-only value's are shared with the
// memory cache and must not be modified.
func (e *Engine) readExtent(ctx context.Context, ino, idx uint64, x segment.Extent) ([]byte, error) {
	if !x.Patched() {
		return readFrame(ctx, e.rd, segment.FrameID{Ino: ino, Extent: idx, Gen: x.Base.Gen}, x.Base)
	}
	b := make([]byte, x.End())
	return b, x.Assemble(b, 0, e.pieceReader(ctx, ino, idx, nil))
}

// pieceReader reads the parts of the frames of extent idx that
// segment.Extent.Assemble asks for. With misses, a cache-only attempt
// records a frame it did not find there and goes on (its result is then
// incomplete).
func (e *Engine) pieceReader(ctx context.Context, ino, idx uint64, misses *[]storeMiss) func(segment.Pointer, uint32, []byte) error {
	return func(p segment.Pointer, off uint32, buf []byte) error {
		id := segment.FrameID{Ino: ino, Extent: idx, Gen: p.Gen}
		_, err := e.rd.Read(ctx, &segread.Request{ID: id, Ptr: p, From: int(off), To: int(off) + len(buf), Buf: buf})
		if misses != nil && missed(ctx, err) {
			*misses = append(*misses, storeMiss{ids: []segment.FrameID{id}, ptrs: []segment.Pointer{p}})
			return nil
		}
		return err
	}
}

// extentBlocks is the 512-byte blocks the frames of x hold.
func extentBlocks(x segment.Extent) uint64 {
	var n uint64
	for p := range x.Frames() {
		n += blocksOf(p)
	}
	return n
}

// debit adds to b the counter deltas that take every frame of x out of
// its segment's live bytes, and returns their bytes.
func debit(b *lsm.Batch, x segment.Extent) int64 {
	var n int64
	for p := range x.Frames() {
		b.Merge(schema.CounterKey(p.Segment), countDelta(-int64(p.Length), 0, 0))
		n += int64(p.Length)
	}
	return n
}

// patchable reports whether a write of bytes [lo, hi) of extent idx
// (which starts at byte start of the file and is not dirty) may keep only
// the bytes it writes: patches are on, the extent starts below the end
// of the file, what is in flight of it is nothing or a patch that the
// write touches (startPatch takes it in), and its value has room for one
// more patch. In the extent that holds the end of the file the patch may
// reach past the end (an append): the committed bytes between the end and
// the patch are zeroes, as zeroPastEnd made sure before the write, and
// those past the patch stay past the new end. An extent wholly past the
// end is written whole: a value there (one a crash left) is not the
// file's. Caller holds n.mu.
func (e *Engine) patchable(n *inode, idx uint64, start, es, lo, hi int64) (bool, error) {
	if !e.opts.patchWrites || start >= int64(n.attr.Size) {
		return false, nil
	}
	w := segment.Patch{At: uint32(lo), End: uint32(hi)}
	inFlight := 0
	if f := n.flushing[idx]; f != nil {
		if !f.span.patch() || !f.span.joins(lo, hi) {
			return false, nil
		}
		w.At, w.End = min(w.At, f.span.lo), max(w.End, f.span.hi) // startPatch takes it in
		inFlight = 1
	}
	x, _, err := e.visibleExtent(n.ino, idx)
	if err != nil {
		return false, err
	}
	// The patches the value will hold once this one is committed: the
	// ones it covers go (a write's span only widens, covering more). A
	// value whose patches cover it whole keeps taking patches: each
	// drops the one it overwrites.
	after, _ := x.WithPatch(w)
	return len(after.Patches)+inFlight <= e.opts.patchLimit, nil
}

// startPatch makes buf the patch-mode buffer of extent idx for a write of
// [lo, hi), taking in the patch in flight, if any (patchable: the write
// touches it), so that the newer buffer holds everything the older one
// did: a failed flush's requeue then loses nothing by keeping the newer.
// Caller holds n.mu for writing.
func (n *inode) startPatch(idx uint64, buf []byte, lo, hi int64) {
	s := span{uint32(lo), uint32(hi)}
	if f := n.flushing[idx]; f != nil && f.span.patch() {
		copy(buf[f.span.lo:f.span.hi], f.data[f.span.lo:f.span.hi])
		s = f.span.widen(lo, hi, int64(len(buf)))
	}
	n.setSpan(idx, s)
}

// fillGap widens the patch-mode buffer buf of extent idx (span s) to
// cover [lo, hi) too, which it does not touch: the bytes between the two
// come from the committed value, so that the flush still stores one
// patch, of the span that covers both, rather than the whole extent.
// Caller holds n.mu for writing.
func (e *Engine) fillGap(ctx context.Context, n *inode, idx uint64, buf []byte, s span, lo, hi int64) error {
	x, ok, err := e.visibleExtent(n.ino, idx)
	if err != nil {
		return err
	}
	var base []byte
	if ok {
		if base, err = e.readExtent(ctx, n.ino, idx, x); err != nil {
			return err
		}
	}
	from, to := int64(s.hi), lo // the gap: [from, to)
	if hi < int64(s.lo) {
		from, to = hi, int64(s.lo)
	}
	gap := buf[from:to]
	var have []byte
	if from < int64(len(base)) {
		have = base[from:min(to, int64(len(base)))]
	}
	clear(gap[copy(gap, have):])
	n.setSpan(idx, s.widen(min(from, lo), max(to, hi), int64(len(buf))))
	return nil
}

// nextValue is the value extent idx gets when the flush item it commits,
// with old its current value (had: it has one). drop lists the frames
// the value no longer references (to be debited); keep is false when the
// extent becomes a hole.
func (e *Engine) nextValue(ino uint64, it flushItem, old segment.Extent, had bool) (nv segment.Extent, keep bool, drop []segment.Pointer, err error) {
	s := it.fe.span
	if it.hole || !s.patch() || !had || e.ranges.dead(ino, it.idx, old.NewestGen()) {
		// The whole extent, a hole, or a patch over nothing (none, or
		// dead): every frame of the old value goes.
		for p := range old.Frames() {
			drop = append(drop, p)
		}
		if it.hole {
			return segment.Extent{}, false, drop, nil
		}
		if !s.patch() {
			return segment.BaseOnly(it.ptr), true, drop, nil
		}
		old = segment.Extent{}
	}
	ptr := it.ptr
	if it.zero {
		ptr = segment.Pointer{} // zeroes without a frame
	}
	nv, more := old.WithPatch(segment.Patch{At: s.lo, End: s.hi, Ptr: ptr})
	drop = append(drop, more...)
	if !hasFrames(nv) {
		// A patch of zeroes that left no frame: the extent reads as
		// zeroes, a hole.
		return segment.Extent{}, false, drop, nil
	}
	if err := nv.Validate(); err != nil {
		// patchable keeps values at patchLimit; reaching this is a bug.
		return segment.Extent{}, false, nil, fmt.Errorf("fs: extent %d/%d: patch does not fit: %w", ino, it.idx, err)
	}
	return nv, true, drop, nil
}

// hasFrames reports whether x references a frame: a value without one
// reads as zeroes (only zero patches are left) and is not stored.
func hasFrames(x segment.Extent) bool {
	for range x.Frames() {
		return true
	}
	return false
}

// inodeStage is what one inode's part of a segment commit stages in its
// batch (stageInode).
type inodeStage struct {
	taken  []flushItem // the items committed (the rest were dropped meanwhile)
	live   int64       // frame bytes the new values take in the segment
	blocks uint64      // the inode's blocks after the commit
	merge  []extentID  // extents whose new values want a merge
	idle   []extentID  // extents that took a patch (foldIdle)
	dead   bool        // some frame was debited
	// patched: a value gains a patch; merged: a patched value becomes
	// one whole frame (a merge's flush, or a write of the whole extent).
	patched, merged bool
	patches         int   // patches appended
	patchBytes      int64 // their plain bytes (the spans written)
}

// stageInode stages in b the new values of n's extents in items (one
// inode's run of a flush batch): each item's value after its frame
// (nextValue), the debits of the frames it drops, the blocks. Caller
// holds ptrMu and n.mu.
func (e *Engine) stageInode(b *lsm.Batch, n *inode, items []flushItem) (inodeStage, error) {
	st := inodeStage{blocks: n.attr.Blocks}
	for _, it := range items {
		if n.deleted || n.flushing[it.idx] != it.fe {
			continue
		}
		old, had, err := e.extentValue(n.ino, it.idx)
		if err != nil {
			return st, err
		}
		nv, keep, drop, err := e.nextValue(n.ino, it, old, had)
		if err != nil {
			return st, err
		}
		st.taken = append(st.taken, it)
		for _, p := range drop {
			b.Merge(schema.CounterKey(p.Segment), countDelta(-int64(p.Length), 0, 0))
			st.dead = true
		}
		st.blocks -= min(st.blocks, extentBlocks(old))
		key := schema.ExtentKey(n.ino, it.idx)
		if !keep {
			if had {
				b.Delete(key)
			}
			continue
		}
		b.Set(key, nv.Marshal())
		st.live += int64(it.ptr.Length)
		st.blocks += extentBlocks(nv)
		if sp := it.fe.span; sp.patch() {
			st.patched = true
			st.patches++
			if !it.zero {
				st.patchBytes += int64(sp.hi - sp.lo)
			}
		}
		st.merged = st.merged || (old.Patched() && !nv.Patched())
		if e.wantsMerge(nv, n.es()) {
			st.merge = append(st.merge, extentID{n.ino, it.idx})
		}
		if it.fe.span.patch() {
			st.idle = append(st.idle, extentID{n.ino, it.idx})
		}
	}
	return st, nil
}

// hitBefore passes the failpoints of what st commits, before its batch
// is committed (a literal name each: the crash matrix finds them in the
// source).
func (st *inodeStage) hitBefore() {
	if st.patched {
		failpoint.Hit("patch-before-commit")
	}
	if st.merged {
		failpoint.Hit("merge-before-commit")
	}
}

// hitAfter is hitBefore once the batch is committed.
func (st *inodeStage) hitAfter() {
	if st.patched {
		failpoint.Hit("patch-after-commit")
	}
	if st.merged {
		failpoint.Hit("merge-after-commit")
	}
}

// zeroPatchFits reports whether a punch (or NBD TRIM or WRITE_ZEROES)
// of bytes [lo, hi) of a committed extent whose value is x may be a
// patch of zeroes without a frame (FORMAT.md, "Extent value"), instead
// of reading the extent and rewriting it whole: patches are on and the
// value keeps room for it (patchLimit, counting the pieces it drops).
func (e *Engine) zeroPatchFits(x segment.Extent, lo, hi int64) bool {
	if !e.opts.patchWrites || lo >= hi {
		return false
	}
	nv, _ := x.WithPatch(segment.Patch{At: uint32(lo), End: uint32(hi)})
	return len(nv.Patches) <= e.opts.patchLimit && nv.Validate() == nil
}

// stageZeroPatch stages in b the value x of extent idx of n with bytes
// [lo, hi) zeroed by a patch without a frame (zeroPatchFits said it
// fits), the debits of the frames that drops, and n's blocks; a value
// left with no frame is deleted (a hole). It returns what to do once b
// is committed. Caller holds ptrMu and n.mu.
func (e *Engine) stageZeroPatch(b *lsm.Batch, n *inode, idx uint64, x segment.Extent, lo, hi int64) func() {
	nv, drop := x.WithPatch(segment.Patch{At: uint32(lo), End: uint32(hi)})
	key := schema.ExtentKey(n.ino, idx)
	frames := hasFrames(nv)
	if frames {
		b.Set(key, nv.Marshal())
	} else {
		b.Delete(key) // every frame of x was dropped
	}
	for _, p := range drop {
		b.Merge(schema.CounterKey(p.Segment), countDelta(-int64(p.Length), 0, 0))
	}
	n.attr.Blocks -= min(n.attr.Blocks, extentBlocks(x))
	if frames {
		n.attr.Blocks += extentBlocks(nv)
	}
	merge := frames && e.wantsMerge(nv, n.es())
	return func() {
		e.opts.Stats.patched(1, 0)
		if len(drop) > 0 {
			e.deadBytes()
		}
		if merge {
			e.queueMerges([]extentID{{n.ino, idx}})
		}
		if frames {
			e.queueIdle([]extentID{{n.ino, idx}})
		}
	}
}
