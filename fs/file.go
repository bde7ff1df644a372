package fs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

const extentSize = segment.ExtentSize

// Open records an open handle on ino, so that unlinking its last name
// defers deletion to the last Release.
func (e *Engine) Open(ctx context.Context, ino uint64) error {
	e.ns.Lock()
	defer e.ns.Unlock()
	n, err := e.acquireLocked(ino)
	if err != nil {
		return err
	}
	n.open++
	n.refs--
	return nil
}

// Release drops an open handle; the last one of an unlinked inode deletes it.
func (e *Engine) Release(ctx context.Context, ino uint64) error {
	e.ns.Lock()
	defer e.ns.Unlock()
	n := e.ns.inodes[ino]
	if n == nil || n.open == 0 {
		return nil
	}
	n.open--
	if n.open > 0 {
		return nil
	}
	n.mu.RLock()
	orphan := n.attr.Nlink == 0 && !n.deleted
	n.mu.RUnlock()
	if orphan && !e.opts.ReadOnly && !e.closed.Load() {
		e.ptrMu.Lock()
		b := e.db.NewBatch()
		b.Delete(schema.OrphanKey(ino))
		err := e.deleteInodeLocked(b, ino, n)
		if err == nil {
			err = e.commit(b)
		}
		b.Close()
		e.ptrMu.Unlock()
		if err != nil {
			e.log.Error("deleting unlinked file at last close", "ino", ino, "err", err)
		}
		failpoint.Hit("orphan-last-close")
	}
	e.maybeEvictLocked(n)
	return nil
}

// pointer returns the committed pointer of an extent, if any.
func (e *Engine) pointer(ino, idx uint64) (segment.Pointer, bool, error) {
	v, ok, err := e.get(schema.ExtentKey(ino, idx))
	if err != nil || !ok {
		return segment.Pointer{}, false, err
	}
	p, err := segment.UnmarshalPointer(v)
	if err != nil {
		return segment.Pointer{}, false, fmt.Errorf("fs: extent %d/%d: %w", ino, idx, err)
	}
	return p, true, nil
}

// extentPointer is the committed pointer of one extent.
type extentPointer struct {
	idx uint64
	p   segment.Pointer
}

// pointersIn returns the committed pointers of extents [from, to) of ino in
// index order, read in one pass of an iterator rather than a lookup per
// extent.
func (e *Engine) pointersIn(ino, from, to uint64) ([]extentPointer, error) {
	lo, hi := schema.ExtentRange(ino, from, to)
	it, err := e.newIter(lo, hi)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []extentPointer
	for ok := it.First(); ok; ok = it.Next() {
		_, idx, err := schema.ParseExtentKey(it.Key())
		if err != nil {
			return nil, fmt.Errorf("fs: extent key %x: %w", it.Key(), err)
		}
		p, err := segment.UnmarshalPointer(it.Value())
		if err != nil {
			return nil, fmt.Errorf("fs: extent %d/%d: %w", ino, idx, err)
		}
		out = append(out, extentPointer{idx, p})
	}
	return out, e.mapErr(it.Error())
}

// readCommitted reads an extent from its segment; nil means a hole.
func (e *Engine) readCommitted(ctx context.Context, ino, idx uint64) ([]byte, error) {
	p, ok, err := e.pointer(ino, idx)
	if err != nil || !ok {
		return nil, err
	}
	return e.rd.Read(ctx, segment.FrameID{Ino: ino, Extent: idx, Gen: p.Gen}, p)
}

// extentLocked returns the current bytes of extent idx (nil: zeroes).
// Caller holds n.mu (read or write).
func (e *Engine) extentLocked(ctx context.Context, n *inode, idx uint64) ([]byte, error) {
	if b := n.dirty[idx]; b != nil {
		return b, nil
	}
	if f := n.flushing[idx]; f != nil {
		return f.data, nil
	}
	return e.readCommitted(ctx, n.ino, idx)
}

// Read reads up to len(p) bytes at off. It returns 0 at or past the end.
func (e *Engine) Read(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	n, err := e.acquire(ino)
	if err != nil {
		return 0, err
	}
	defer e.release(n)
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
	if ra := n.ra.Load(); ra != nil && off < ra.to && end > ra.from {
		select {
		case <-ra.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if err := e.readRangeLocked(ctx, n, p, off); err != nil {
		return 0, err
	}
	if prev := n.seqEnd.Swap(end); prev == off {
		e.readAhead(n.ino, end, size, n)
	}
	return len(p), nil
}

// Read-ahead: a read that starts where the previous one ended fetches the
// committed extents from readAheadSkip to readAheadWindow past it into the
// frame cache in the background, in runs of at least readAheadMin, so that
// decryption of what comes next overlaps with the kernel copying out what
// came before. The first readAheadSkip is left to the kernel's own
// readahead (1 MiB), whose request is usually already on its way; fetching
// it here too would read it twice.
const (
	readAheadSkip   = 1 << 20
	readAheadWindow = 32 << 20
	readAheadMin    = 4 << 20
)

func (e *Engine) readAhead(ino uint64, end, size int64, n *inode) {
	from := max(end+readAheadSkip, n.raEnd.Load())
	to := min(end+readAheadWindow, size)
	if to-from < readAheadMin && to < size || to <= from || e.closed.Load() {
		return
	}
	select {
	case e.raSem <- struct{}{}:
	default:
		return // enough read-ahead in flight
	}
	n.raEnd.Store(to)
	run := &readAheadRun{from: from, to: to, done: make(chan struct{})}
	n.ra.Store(run)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() { <-e.raSem }()
		defer close(run.done)
		e.prefetch(e.bg, ino, from, to)
	}()
}

// prefetch reads the committed extents covering [from, to) into the cache.
// Its runs (frames adjacent in one segment, one GET each) are fetched
// concurrently, so that one run's GET overlaps another's decryption.
func (e *Engine) prefetch(ctx context.Context, ino uint64, from, to int64) {
	all, err := e.pointersIn(ino, uint64(from)/extentSize, uint64(to-1)/extentSize+1)
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for len(all) > 0 && ctx.Err() == nil {
		k := 1
		for k < len(all) && k < 64 && all[k].p.Segment == all[k-1].p.Segment && all[k-1].p.End() == uint64(all[k].p.Offset) {
			k++
		}
		ids := make([]segment.FrameID, k)
		ptrs := make([]segment.Pointer, k)
		for i, x := range all[:k] {
			ids[i], ptrs[i] = segment.FrameID{Ino: ino, Extent: x.idx, Gen: x.p.Gen}, x.p
		}
		all = all[k:]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.rd.ReadRun(ctx, ids, ptrs); err != nil {
				e.log.Debug("read-ahead", "ino", ino, "err", err)
			}
		}()
	}
	wg.Wait()
}

// readRangeLocked fills p from off, fetching runs of committed extents that
// sit next to each other in one segment with one request.
func (e *Engine) readRangeLocked(ctx context.Context, n *inode, p []byte, off int64) error {
	first := uint64(off) / extentSize
	last := uint64(off+int64(len(p))-1) / extentSize
	var runIdx []uint64
	var runIDs []segment.FrameID
	var runPtrs []segment.Pointer
	place := func(idx uint64, data []byte) {
		start := int64(idx) * extentSize
		lo, hi := max(start, off), min(start+extentSize, off+int64(len(p)))
		dst := p[lo-off : hi-off]
		var src []byte
		if a := lo - start; a < int64(len(data)) {
			src = data[a:min(int64(len(data)), hi-start)]
		}
		k := copy(dst, src)
		clear(dst[k:])
	}
	flush := func() error {
		if len(runIdx) == 0 {
			return nil
		}
		datas, err := e.rd.ReadRun(ctx, runIDs, runPtrs)
		if err != nil {
			return err
		}
		for i, idx := range runIdx {
			place(idx, datas[i])
		}
		runIdx, runIDs, runPtrs = runIdx[:0], runIDs[:0], runPtrs[:0]
		return nil
	}
	committed, err := e.pointersIn(n.ino, first, last+1)
	if err != nil {
		return err
	}
	for idx := first; idx <= last; idx++ {
		for len(committed) > 0 && committed[0].idx < idx {
			committed = committed[1:]
		}
		if b := n.dirty[idx]; b != nil {
			place(idx, b)
			continue
		}
		if f := n.flushing[idx]; f != nil {
			place(idx, f.data)
			continue
		}
		if len(committed) == 0 || committed[0].idx != idx {
			place(idx, nil)
			continue
		}
		ptr := committed[0].p
		if k := len(runPtrs); k > 0 {
			prev := runPtrs[k-1]
			if prev.Segment != ptr.Segment || prev.End() != uint64(ptr.Offset) || k >= 64 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		runIdx = append(runIdx, idx)
		runIDs = append(runIDs, segment.FrameID{Ino: n.ino, Extent: idx, Gen: ptr.Gen})
		runPtrs = append(runPtrs, ptr)
	}
	return flush()
}

// Extent buffers of dirty data are recycled: a sequential writer would
// otherwise allocate (and the runtime zero) every byte it writes once more.
// A buffer goes back to the pool only once the commit that made its data
// durable has removed it from the inode, so no reader can still see it.
var extentBufs = sync.Pool{New: func() any { return new([extentSize]byte) }}

// getExtentBuf returns an extent buffer with undefined contents.
func getExtentBuf() []byte { return extentBufs.Get().(*[extentSize]byte)[:] }

// putExtentBuf recycles a buffer from getExtentBuf that nothing references.
func putExtentBuf(b []byte) {
	if len(b) == extentSize {
		extentBufs.Put((*[extentSize]byte)(b))
	}
}

// waitDirty blocks while dirty data is over the limit, nudging the flusher.
func (e *Engine) waitDirty(ctx context.Context) error {
	for e.dirtyBytes.Load() > e.opts.DirtyLimit {
		e.waitMu.Lock()
		ch := e.dirtyWait
		e.waitMu.Unlock()
		e.kick()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		if e.closed.Load() {
			return ErrClosed
		}
	}
	return nil
}

func (e *Engine) dirtyDone(delta int64) {
	e.dirtyBytes.Add(-delta)
	e.waitMu.Lock()
	close(e.dirtyWait)
	e.dirtyWait = make(chan struct{})
	e.waitMu.Unlock()
}

func (e *Engine) kick() {
	select {
	case e.kickFlush <- struct{}{}:
	default:
	}
}

// Write writes p at off. Data is in memory when Write returns; Barrier
// makes it durable.
func (e *Engine) Write(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	if err := e.writable(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, ErrInvalid
	}
	if off+int64(len(p)) > MaxFileSize {
		return 0, ErrFileTooBig
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := e.waitDirty(ctx); err != nil {
		return 0, err
	}
	n, err := e.acquire(ino)
	if err != nil {
		return 0, err
	}
	defer e.release(n)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.attr.IsRegular() {
		if n.attr.IsDir() {
			return 0, ErrIsDir
		}
		return 0, ErrInvalid
	}
	end := off + int64(len(p))
	for pos := off; pos < end; {
		idx := uint64(pos) / extentSize
		start := int64(idx) * extentSize
		lo, hi := pos-start, min(end-start, extentSize)
		buf := n.dirty[idx]
		if buf == nil {
			buf = getExtentBuf()
			if lo > 0 || hi < extentSize { // the rest of the extent keeps its bytes
				var base []byte
				if start < int64(n.attr.Size) {
					var err error
					if base, err = e.extentLocked(ctx, n, idx); err != nil {
						putExtentBuf(buf)
						return int(pos - off), err
					}
				}
				clear(buf[copy(buf, base):])
			}
			n.dirty[idx] = buf
			e.dirtyBytes.Add(extentSize)
		}
		copy(buf[lo:hi], p[pos-off:])
		pos = start + hi
	}
	if uint64(end) > n.attr.Size {
		n.attr.Size = uint64(end)
	}
	n.attr.Mtime = e.now()
	n.attr.Ctime = n.attr.Mtime
	n.attrDirty = true
	if e.dirtyBytes.Load() >= e.opts.SegmentTarget {
		e.kick()
	}
	return len(p), nil
}

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

// Allocate reserves [off, off+length). ebbfs stores no zeroes, so this only
// extends the size unless keepSize is set.
func (e *Engine) Allocate(ctx context.Context, ino uint64, off, length int64, keepSize bool) error {
	if err := e.writable(); err != nil {
		return err
	}
	if off < 0 || length <= 0 {
		return ErrInvalid
	}
	if off+length > MaxFileSize {
		return ErrFileTooBig
	}
	a, err := e.GetAttr(ctx, ino)
	if err != nil {
		return err
	}
	if !a.IsRegular() {
		return ErrInvalid
	}
	if keepSize || uint64(off+length) <= a.Size {
		return nil
	}
	_, err = e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: uint64(off + length)})
	return err
}

// hasData reports whether extent idx holds data (dirty, in flight or committed).
func (e *Engine) hasDataLocked(n *inode, idx uint64) (bool, error) {
	if n.dirty[idx] != nil || n.flushing[idx] != nil {
		return true, nil
	}
	_, ok, err := e.pointer(n.ino, idx)
	return ok, err
}

// nextDataLocked finds the first extent >= idx with data, or false.
func (e *Engine) nextDataLocked(n *inode, idx uint64) (uint64, bool, error) {
	best, found := uint64(0), false
	for i := range n.dirty {
		if i >= idx && (!found || i < best) {
			best, found = i, true
		}
	}
	for i := range n.flushing {
		if i >= idx && (!found || i < best) {
			best, found = i, true
		}
	}
	lo, hi := schema.ExtentRange(n.ino, idx, 0)
	it, err := e.newIter(lo, hi)
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	if it.First() {
		_, i, err := schema.ParseExtentKey(it.Key())
		if err != nil {
			return 0, false, err
		}
		if !found || i < best {
			best, found = i, true
		}
	}
	return best, found, it.Error()
}

// seek runs f on ino's loaded inode with its size, after the checks
// SEEK_DATA and SEEK_HOLE share: an offset at or past the end is ErrNoData.
func (e *Engine) seek(ino uint64, off int64, f func(n *inode, size int64) (int64, error)) (int64, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	n, err := e.acquire(ino)
	if err != nil {
		return 0, err
	}
	defer e.release(n)
	n.mu.RLock()
	defer n.mu.RUnlock()
	size := int64(n.attr.Size)
	if off >= size {
		return 0, ErrNoData
	}
	return f(n, size)
}

// SeekData returns the first offset >= off that holds data.
func (e *Engine) SeekData(ctx context.Context, ino uint64, off int64) (int64, error) {
	return e.seek(ino, off, func(n *inode, size int64) (int64, error) {
		idx, ok, err := e.nextDataLocked(n, uint64(off)/extentSize)
		if err != nil {
			return 0, err
		}
		if !ok || int64(idx)*extentSize >= size {
			return 0, ErrNoData
		}
		return max(off, int64(idx)*extentSize), nil
	})
}

// SeekHole returns the first offset >= off inside a hole (the end of the
// file counts as one).
func (e *Engine) SeekHole(ctx context.Context, ino uint64, off int64) (int64, error) {
	return e.seek(ino, off, func(n *inode, size int64) (int64, error) {
		for idx := uint64(off) / extentSize; int64(idx)*extentSize < size; idx++ {
			ok, err := e.hasDataLocked(n, idx)
			if err != nil {
				return 0, err
			}
			if !ok {
				return max(off, int64(idx)*extentSize), nil
			}
		}
		return size, nil
	})
}
