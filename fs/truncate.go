package fs

import (
	"context"
	"errors"
	"math"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/segment"
)

// SetAttr changes attributes; SetSize truncates or extends.
func (e *Engine) SetAttr(ctx context.Context, ino uint64, in SetAttr) (Attr, error) {
	if err := e.writable(); err != nil {
		return Attr{}, err
	}
	if in.Valid&SetSize != 0 {
		if in.Size > MaxFileSize {
			return Attr{}, ErrFileTooBig
		}
		if err := e.truncate(ctx, ino, in.Size); err != nil {
			return Attr{}, err
		}
	}
	e.ns.Lock()
	defer e.ns.Unlock()
	t := e.begin()
	n, err := t.inode(ino)
	if err != nil {
		return Attr{}, t.finish(err)
	}
	t.modify(n, func(a *Attr) {
		if in.Valid&SetMode != 0 {
			a.Mode = a.Mode&ModeType | in.Mode&^ModeType
		}
		if in.Valid&SetUid != 0 {
			a.Uid = in.Uid
		}
		if in.Valid&SetGid != 0 {
			a.Gid = in.Gid
		}
		if in.Valid&SetAtime != 0 {
			a.Atime = in.Atime
		}
		if in.Valid&SetAtimeNow != 0 {
			a.Atime = t.now
		}
		if in.Valid&SetMtime != 0 {
			a.Mtime = in.Mtime
		}
		if in.Valid&SetMtimeNow != 0 {
			a.Mtime = t.now
		}
		a.Ctime = t.now
	})
	n.mu.RLock()
	a := n.attrNow()
	n.mu.RUnlock()
	return a, t.finish(nil)
}

// truncate sets the size of ino. Shrinking zeroes the tail of the last
// extent and drops the extents past the end (dropRangeLocked), in the
// transaction that records the new size.
func (e *Engine) truncate(ctx context.Context, ino uint64, size uint64) error {
	n, err := e.acquire(ino)
	if err != nil {
		return err
	}
	defer e.release(n)
	n.mu.RLock()
	isDir, regular := n.attr.IsDir(), n.attr.IsRegular()
	n.mu.RUnlock()
	if isDir {
		return ErrIsDir
	}
	if !regular {
		return ErrInvalid
	}
	// Growing: bytes a crash left past the end must not show (grow.go).
	if err := e.zeroPastEnd(ctx, n, int64(size)); err != nil {
		return err
	}
	err = e.zeroRange(ctx, n, int64(size), 0, true, func(b *lsm.Batch) {
		now := e.now()
		n.attr.Size, n.attr.Mtime, n.attr.Ctime = size, now, now
		// Growing the size is persisted at once only if no unflushed data
		// lies below it (settle); otherwise the flush that commits that
		// data also raises the persisted size, so a crash never shows a
		// size whose bytes were lost.
		if size < n.psize {
			n.psize = size
		}
		// Reservations past the end go with it (allocate.go).
		n.res = unreserve(n.res, (size+n.es()-1)/n.es(), math.MaxUint64)
		n.settle()
		e.putInode(b, n)
	})
	if err != nil {
		return err
	}
	failpoint.Hit("truncate-after-commit")
	return nil
}

// Punch zeroes [off, off+length) and frees the extents it covers (the
// FALLOC_FL_PUNCH_HOLE, NBD TRIM and WRITE_ZEROES path). The size is kept.
func (e *Engine) Punch(ctx context.Context, ino uint64, off, length int64) error {
	if err := e.writable(); err != nil {
		return err
	}
	if off < 0 || length < 0 {
		return ErrInvalid
	}
	n, err := e.acquire(ino)
	if err != nil {
		return err
	}
	defer e.release(n)
	n.mu.RLock()
	regular := n.attr.IsRegular()
	n.mu.RUnlock()
	if !regular {
		return ErrInvalid
	}
	if length == 0 {
		return nil
	}
	return e.zeroRange(ctx, n, off, length, false, func(b *lsm.Batch) {
		// A punched extent is no longer reserved (allocate.go).
		es := n.es()
		n.res = unreserve(n.res, (uint64(off)+es-1)/es, uint64(off+length)/es)
		n.attr.Mtime = e.now()
		n.attr.Ctime = n.attr.Mtime
		n.settle()
		e.putInode(b, n)
	})
}

// edgeState is what a partly covered extent held when zeroRange looked.
type edgeState struct {
	idx    uint64
	inMem  bool // dirty or being flushed: zeroed in memory
	ptr    segment.Extent
	hasPtr bool
	data   []byte // the committed bytes, read without any lock held
	// zero: the committed value takes a patch of zeroes without a frame
	// (zeroPatchFits), so its bytes are not read.
	zero bool
}

// zeroRange zeroes [off, off+length) of n (toEnd: from off to the end of
// the file, whatever its size then; length is ignored), and then calls
// finish, all in one transaction: extents the range covers in full lose
// their data (dropRangeLocked), partly covered ones are zeroed in memory
// and rewritten by the next flush. finish adds the inode's own change to
// the batch; it runs under n.mu.
//
// No lock is held across a store request: the committed bytes of the
// edge extents are read first, and the change is made only if nothing
// moved meanwhile (else it looks again). The flush lock is not taken at
// all: a flush already under way skips the extents removed from its
// in-flight set, and one that starts later sees the new state. A caller
// interrupted while reading the edges has changed nothing.
func (e *Engine) zeroRange(ctx context.Context, n *inode, off, length int64, toEnd bool, finish func(b *lsm.Batch)) error {
	// rangeEnd is where the zeroing ends for a given file size.
	rangeEnd := func(size int64) int64 {
		if toEnd {
			return max(size, off)
		}
		return max(min(off+length, size), off)
	}
	for {
		n.mu.RLock()
		end := rangeEnd(int64(n.attr.Size))
		n.mu.RUnlock()
		if !toEnd && end == off {
			return nil // nothing below the end of the file
		}
		edges, es, err := e.lookEdges(n, off, end, toEnd)
		if errors.Is(err, errPatchInMem) {
			// An edge's buffer holds part of its extent: commit it, then
			// look again (patch.go).
			if err := e.Seal(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		for i := range edges {
			x := &edges[i]
			if x.hasPtr && !x.zero {
				// Waits out outages: a truncate or punch never fails
				// because the store is away for a while.
				err = e.storeRead(ctx, "read extent", func() error {
					var err error
					x.data, err = e.readExtent(ctx, n.ino, x.idx, x.ptr)
					return err
				})
				if err != nil {
					return err
				}
			}
		}
		done, err := e.zeroApply(n, off, end, toEnd, es, rangeEnd, edges, finish)
		if done || err != nil {
			return err
		}
	}
}

// lookEdges notes the state of the extents [off, end) covers in part, and
// the extent size it went by.
func (e *Engine) lookEdges(n *inode, off, end int64, toEnd bool) ([]edgeState, uint64, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []edgeState
	es := int64(n.es())
	for _, idx := range partialEdges(off, end, es, toEnd) {
		x := edgeState{idx: idx}
		if n.patchInMem(idx) {
			return nil, 0, errPatchInMem
		}
		if n.dirty[idx] != nil || n.flushing[idx] != nil {
			x.inMem = true
		} else {
			p, ok, err := e.visibleExtent(n.ino, idx)
			if err != nil {
				return nil, 0, err
			}
			x.ptr, x.hasPtr = p, ok
			// A patch of zeroes below the end of the file (a punch's
			// range ends there), or from a shrinking truncate's new
			// end to the end of its edge extent (in the transaction
			// that sets the size, so no byte past it survives).
			start, size := int64(idx)*es, int64(n.attr.Size)
			hi := min(end, start+es)
			if toEnd {
				hi = start + es
			}
			x.zero = ok && start < size && (!toEnd || off < size) &&
				e.zeroPatchFits(p, max(off, start)-start, hi-start)
		}
		out = append(out, x)
	}
	return out, n.es(), nil
}

// zeroApply makes zeroRange's change if the edges still look as noted and
// the size still gives the same range; otherwise it reports !done.
func (e *Engine) zeroApply(n *inode, off, end int64, toEnd bool, ues uint64, rangeEnd func(int64) int64, edges []edgeState, finish func(b *lsm.Batch)) (done bool, err error) {
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.deleted {
		return true, ErrNotExist
	}
	if rangeEnd(int64(n.attr.Size)) != end || n.es() != ues {
		return false, nil // the size changed: look again
	}
	for _, x := range edges {
		inMem := n.dirty[x.idx] != nil || n.flushing[x.idx] != nil
		if inMem != x.inMem || n.patchInMem(x.idx) {
			return false, nil
		}
		if !inMem {
			p, ok, err := e.visibleExtent(n.ino, x.idx)
			if err != nil {
				return true, err
			}
			if ok != x.hasPtr || !p.Equal(x.ptr) {
				return false, nil
			}
		}
	}
	b := e.db.NewBatch()
	defer b.Close()
	// Partly covered extents: zeroed in memory, or by a patch.
	var added int64
	var zeroed []func()
	es := int64(ues)
	for _, x := range edges {
		start := int64(x.idx) * es
		lo, hi := max(off, start)-start, min(end, start+es)-start
		if toEnd {
			hi = es
		}
		buf := n.dirty[x.idx]
		if buf == nil && x.zero {
			zeroed = append(zeroed, e.stageZeroPatch(b, n, x.idx, x.ptr, lo, hi))
			continue
		}
		if buf == nil {
			base := x.data
			if x.inMem {
				base = n.flushing[x.idx].data
			}
			if base == nil {
				continue // a hole stays a hole
			}
			buf = getExtentBuf(ues)
			clear(buf[copy(buf, base):])
			n.dirty[x.idx] = buf
			n.setSpan(x.idx, span{})
			added += es
		}
		clear(buf[lo:hi])
	}
	e.dirtyBytes.Add(added)
	// Fully covered extents: in-memory data goes now, committed data with
	// the transaction below.
	firstFull := (uint64(off) + ues - 1) / ues
	endFull := uint64(end) / ues // exclusive
	var freed int64
	for idx := range n.dirty {
		if idx >= firstFull && (toEnd || idx < endFull) {
			putExtentBuf(n.dirty[idx])
			delete(n.dirty, idx)
			delete(n.spans, idx)
			freed += es
		}
	}
	for idx := range n.flushing {
		if idx >= firstFull && (toEnd || idx < endFull) {
			delete(n.flushing, idx)
		}
	}
	if freed > 0 {
		defer e.dirtyDone(freed)
	}
	apply := func() {}
	if toEnd || firstFull < endFull {
		to := endFull
		if toEnd {
			to = 0
		}
		if apply, err = e.dropRangeLocked(b, n, firstFull, to); err != nil {
			return true, err
		}
	}
	finish(b)
	if err := e.commit(b); err != nil {
		return true, err
	}
	apply()
	for _, f := range zeroed {
		f()
	}
	return true, nil
}

// partialEdges lists the extents [off,end) covers only in part.
func partialEdges(off, end, es int64, toEnd bool) []uint64 {
	var out []uint64
	if end <= off {
		return nil // truncate to or past the end: nothing left to zero
	}
	if off%es != 0 {
		out = append(out, uint64(off/es))
	}
	if !toEnd && end%es != 0 {
		last := uint64(end / es)
		if len(out) == 0 || out[0] != last {
			out = append(out, last)
		}
	}
	return out
}

var errStopScan = errors.New("stop scan")

func blocksOf(p segment.Pointer) uint64 { return (uint64(p.PlainLen) + 511) / 512 }
