package fs

import (
	"context"
	"errors"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm/schema"
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

// truncate sets the size of ino. Shrinking drops the extents past the end
// (pointers deleted and counters debited) and zeroes the tail of the last one.
func (e *Engine) truncate(ctx context.Context, ino uint64, size uint64) error {
	n, err := e.acquire(ino)
	if err != nil {
		return err
	}
	defer e.release(n)
	n.mu.Lock()
	if n.attr.IsDir() {
		n.mu.Unlock()
		return ErrIsDir
	}
	if !n.attr.IsRegular() {
		n.mu.Unlock()
		return ErrInvalid
	}
	old := n.attr.Size
	n.mu.Unlock()
	if err := e.lockFlush(ctx); err != nil {
		return err
	}
	defer e.unlockFlush()
	if size < old {
		if err := e.zeroRange(ctx, n, int64(size), int64(old-size), true); err != nil {
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := e.now()
	n.attr.Size, n.attr.Mtime, n.attr.Ctime = size, now, now
	// Growing the size is persisted at once only if no unflushed data lies
	// below it (settle); otherwise the flush that commits that data also
	// raises the persisted size, so a crash never shows a size whose bytes
	// were lost.
	if size < n.psize {
		n.psize = size
	}
	n.settle()
	b := e.db.NewBatch()
	defer b.Close()
	e.putInode(b, n)
	if err := e.commit(b); err != nil {
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
	regular, size := n.attr.IsRegular(), int64(n.attr.Size)
	n.mu.RUnlock()
	if !regular {
		return ErrInvalid
	}
	if off >= size || length == 0 {
		return nil
	}
	length = min(length, size-off)
	if err := e.lockFlush(ctx); err != nil {
		return err
	}
	defer e.unlockFlush()
	if err := e.zeroRange(ctx, n, off, length, false); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.attr.Mtime = e.now()
	n.attr.Ctime = n.attr.Mtime
	n.attrDirty = true
	return nil
}

// zeroBatch is the most pointers one zeroing transaction deletes.
const zeroBatch = 10000

// zeroRange zeroes [off, off+length): extents it fully covers lose their
// pointers (counters debited in the same transaction), partly covered ones
// are zeroed in memory and rewritten at the next flush. Caller holds flushMu. toEnd means the
// range runs to the end of the file (truncate): every extent from the first
// fully covered one on is dropped, whatever the recorded size.
func (e *Engine) zeroRange(ctx context.Context, n *inode, off, length int64, toEnd bool) error {
	end := off + length
	firstFull := (uint64(off) + extentSize - 1) / extentSize
	endFull := uint64(end) / extentSize // exclusive
	// Partial extents at either edge.
	n.mu.Lock()
	for _, idx := range partialEdges(off, end, toEnd) {
		start := int64(idx) * extentSize
		lo, hi := max(off, start)-start, min(end, start+extentSize)-start
		if toEnd {
			hi = extentSize
		}
		buf := n.dirty[idx]
		if buf == nil {
			base, err := e.extentLocked(ctx, n, idx)
			if err != nil {
				n.mu.Unlock()
				return err
			}
			if base == nil {
				continue
			}
			buf = getExtentBuf()
			clear(buf[copy(buf, base):])
			n.dirty[idx] = buf
			e.dirtyBytes.Add(extentSize)
		}
		clear(buf[lo:hi])
	}
	// In-memory data of fully covered extents goes away now.
	var freed int64
	for idx := range n.dirty {
		if idx >= firstFull && (toEnd || idx < endFull) {
			delete(n.dirty, idx)
			freed += extentSize
		}
	}
	for idx := range n.flushing {
		if idx >= firstFull && (toEnd || idx < endFull) {
			delete(n.flushing, idx)
		}
	}
	n.mu.Unlock()
	if freed > 0 {
		e.dirtyDone(freed)
	}
	if !toEnd && firstFull >= endFull {
		return nil
	}
	var to uint64
	if !toEnd {
		to = endFull
	}
	return e.dropPointers(n, firstFull, to)
}

// partialEdges lists the extents [off,end) covers only in part.
func partialEdges(off, end int64, toEnd bool) []uint64 {
	var out []uint64
	if off%extentSize != 0 {
		out = append(out, uint64(off)/extentSize)
	}
	if !toEnd && end%extentSize != 0 {
		last := uint64(end) / extentSize
		if len(out) == 0 || out[0] != last {
			out = append(out, last)
		}
	}
	return out
}

// dropPointers deletes the committed pointers of extents [from, to) of n
// (to == 0: to the end), debiting counters, in transactions of at most
// zeroBatch pointers. Callers hold flushMu so that no barrier can make a
// partial drop durable on its own: a crash loses all of it or none.
func (e *Engine) dropPointers(n *inode, from, to uint64) error {
	for {
		count, err := e.dropPointerBatch(n, from, to)
		if err != nil {
			return err
		}
		failpoint.Hit("truncate-after-drop-batch")
		if count < zeroBatch {
			return nil
		}
	}
}

func (e *Engine) dropPointerBatch(n *inode, from, to uint64) (int, error) {
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	lo, hi := schema.ExtentRange(n.ino, from, to)
	count := 0
	var blocks uint64
	err := e.scan(lo, hi, func(k, v []byte) error {
		if count >= zeroBatch {
			return errStopScan
		}
		p, err := segment.UnmarshalPointer(v)
		if err != nil {
			return err
		}
		b.Delete(append([]byte(nil), k...))
		b.Merge(schema.CounterKey(p.Segment), countDelta(-int64(p.Length), 0, 0))
		blocks += blocksOf(p)
		count++
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return 0, err
	}
	if count == 0 {
		return 0, nil
	}
	n.attr.Blocks -= min(n.attr.Blocks, blocks)
	e.putInode(b, n)
	if err := e.commit(b); err != nil {
		return 0, err
	}
	e.deadBytes()
	return count, nil
}

var errStopScan = errors.New("stop scan")

func blocksOf(p segment.Pointer) uint64 { return (uint64(p.PlainLen) + 511) / 512 }
