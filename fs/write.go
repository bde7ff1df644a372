package fs

import (
	"context"
	"errors"
	"math/bits"
	"sync"

	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// Extent buffers of dirty data are recycled: a sequential writer would
// otherwise allocate (and the runtime zero) every byte it writes once more.
// A buffer goes back to the pool only once the commit that made its data
// durable has removed it from the inode, so no reader can still see it.
// There is a pool per extent size.
var extentBufs [schema.MaxExtentShift + 1]sync.Pool

func init() {
	for sh := schema.MinExtentShift; sh <= schema.MaxExtentShift; sh++ {
		extentBufs[sh].New = func() any { b := make([]byte, 1<<sh); return &b }
	}
}

// getExtentBuf returns a buffer of es bytes (an extent size) with undefined
// contents.
func getExtentBuf(es uint64) []byte {
	return *extentBufs[bits.TrailingZeros64(es)].Get().(*[]byte)
}

// putExtentBuf recycles a buffer from getExtentBuf that nothing references.
func putExtentBuf(b []byte) {
	sh := bits.TrailingZeros64(uint64(len(b)))
	if len(b) == cap(b) && len(b) == 1<<sh && sh >= schema.MinExtentShift && sh <= schema.MaxExtentShift {
		extentBufs[sh].Put(&b)
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

// Write writes p at off. Data is in memory when Write returns; Barrier
// makes it durable.
func (e *Engine) Write(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	return e.write(ctx, ino, p, off, false)
}

// WriteWithin writes the part of p that lies below the file's current
// size, never extending the file, and returns how many bytes that was (0
// at or past the end). The size is the one under the inode lock, so a
// concurrent truncate is never undone. The NBD server writes through it:
// an export is as large as its file.
func (e *Engine) WriteWithin(ctx context.Context, ino uint64, p []byte, off int64) (int, error) {
	return e.write(ctx, ino, p, off, true)
}

func (e *Engine) write(ctx context.Context, ino uint64, p []byte, off int64, within bool) (int, error) {
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
	if err := e.reserveSpace(e.writeSpace(ino, off, len(p))); err != nil {
		if !errors.Is(err, ErrNoSpace) || !e.cleanForSpace(ctx) {
			return 0, err
		}
		if err := e.reserveSpace(e.writeSpace(ino, off, len(p))); err != nil {
			return 0, err
		}
	}
	if err := e.waitDirty(ctx); err != nil {
		return 0, err
	}
	n, err := e.acquire(ino)
	if err != nil {
		return 0, err
	}
	defer e.release(n)
	if !within {
		// Bytes a crash left past the end must not show (grow.go).
		if err := e.zeroPastEnd(ctx, n, off+int64(len(p))); err != nil {
			return 0, err
		}
	}
	// A write into part of an extent keeps the rest of its bytes, which may
	// have to come from the store: that is fetched without the inode lock
	// (see read.go), and the write done again (the bytes of a partly done
	// attempt are the same). A write can start and end inside extents
	// that both miss, so this repeats; an extent the cache could not keep
	// is read under the lock in the last attempt. Every store read waits
	// out outages: a write never fails because a read of its extent did.
	for range 4 {
		var miss uint64
		missing := false
		nw, err := e.writeOnce(e.cacheOnly(ctx), n, p, off, within, &miss, &missing)
		if !missing {
			return nw, err
		}
		err = e.storeRead(ctx, "read-modify-write", func() error {
			_, err := e.readCommitted(ctx, n.ino, miss)
			return err
		})
		if err != nil {
			return nw, err
		}
	}
	var nw int
	err = e.storeRead(ctx, "read-modify-write", func() error {
		var err error
		nw, err = e.writeOnce(ctx, n, p, off, within, nil, nil)
		return err
	})
	return nw, err
}

// writeOnce is write under the inode's lock, one attempt. With missing, a
// cache-only attempt (ctx from cacheOnly) that needs an extent from the
// store sets it and miss and returns.
func (e *Engine) writeOnce(ctx context.Context, n *inode, p []byte, off int64, within bool, miss *uint64, missing *bool) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.attr.IsRegular() {
		if n.attr.IsDir() {
			return 0, ErrIsDir
		}
		return 0, ErrInvalid
	}
	if within {
		if uint64(off) >= n.attr.Size {
			return 0, nil
		}
		p = p[:min(uint64(len(p)), n.attr.Size-uint64(off))]
	}
	end := off + int64(len(p))
	es := int64(n.es())
	// fail ends the attempt at pos with err; with missing, a cache-only
	// attempt that needs extent idx from the store says so. The bytes
	// already copied are written: the size and times must say so.
	fail := func(pos int64, idx uint64, err error) (int, error) {
		if missing != nil && missed(ctx, err) {
			*miss, *missing = idx, true
		}
		if pos > off {
			e.wrote(n, pos)
		}
		return int(pos - off), err
	}
	for pos := off; pos < end; {
		idx := uint64(pos / es)
		start := int64(idx) * es
		lo, hi := pos-start, min(end-start, es)
		partial := lo > 0 || hi < es
		buf := n.dirty[idx]
		if s := n.spans[idx]; buf != nil && partial && s.patch() && !s.joins(lo, hi) {
			// A second range of a patch, apart from the first: the
			// bytes between come from the committed extent.
			if err := e.fillGap(ctx, n, idx, buf, s, lo, hi); err != nil {
				return fail(pos, idx, err)
			}
		}
		if buf == nil {
			if len(n.res) > 0 {
				n.res = unreserve(n.res, idx, idx+1) // the data takes its place
			}
			buf = getExtentBuf(uint64(es))
			patch := false
			if partial {
				var err error
				if patch, err = e.patchable(n, idx, start, es, lo, hi); err != nil {
					putExtentBuf(buf)
					return fail(pos, idx, err)
				}
			}
			switch {
			case patch:
				n.startPatch(idx, buf, lo, hi) // no read: the rest stays committed
			case partial: // the rest of the extent keeps its bytes
				if err := e.fillWhole(ctx, n, idx, start, buf); err != nil {
					putExtentBuf(buf)
					return fail(pos, idx, err)
				}
			default:
				n.setSpan(idx, span{})
			}
			n.dirty[idx] = buf
			e.dirtyBytes.Add(es)
		}
		copy(buf[lo:hi], p[pos-off:])
		if s := n.spans[idx]; s.patch() {
			n.setSpan(idx, s.widen(lo, hi, es))
		}
		pos = start + hi
	}
	e.wrote(n, end)
	if e.dirtyBytes.Load() >= e.opts.SegmentTarget {
		e.kick()
	}
	return len(p), nil
}

// fillWhole fills buf, the new dirty buffer of extent idx (at byte start
// of the file), with the extent's current bytes, for a write into part of
// it that rewrites it whole. Caller holds n.mu for writing.
func (e *Engine) fillWhole(ctx context.Context, n *inode, idx uint64, start int64, buf []byte) error {
	n.setSpan(idx, span{})
	var base []byte
	var old segment.Extent
	if start < int64(n.attr.Size) {
		var err error
		if base, old, err = e.baseLocked(ctx, n, idx); err != nil {
			return err
		}
	}
	clear(buf[copy(buf, base):])
	// This write supersedes the committed frames: their plaintext would
	// only take the memory cache's room from frames still to be read (a
	// random overwrite of a file the size of the cache found an eighth
	// of its extents there, not all of them).
	for f := range old.Frames() {
		e.rd.Drop(f)
	}
	if len(base) > 0 {
		if n.rmw == nil {
			n.rmw = map[uint64]bool{}
		}
		n.rmw[idx] = true
	}
	return nil
}

// wrote records a write that ended at end: the size grows to cover it and
// the times change. Caller holds n.mu.
func (e *Engine) wrote(n *inode, end int64) {
	if uint64(end) > n.attr.Size {
		n.attr.Size = uint64(end)
	}
	n.attr.Mtime = e.now()
	n.attr.Ctime = n.attr.Mtime
	n.attrDirty = true
	e.lastWrite.Store(n.attr.Mtime) // foldIdle waits for a pause
}
