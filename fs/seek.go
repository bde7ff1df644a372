package fs

import (
	"context"
	"errors"

	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// hasData reports whether extent idx holds data (dirty, in flight or committed).
func (e *Engine) hasDataLocked(n *inode, idx uint64) (bool, error) {
	if n.dirty[idx] != nil || n.flushing[idx] != nil {
		return true, nil
	}
	_, ok, err := e.visibleExtent(n.ino, idx)
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
	masked := e.ranges.has(n.ino)
	err := e.scan(lo, hi, func(k, v []byte) error {
		_, i, err := schema.ParseExtentKey(k)
		if err != nil {
			return err
		}
		if found && i >= best {
			return errStopScan
		}
		if masked {
			x, err := segment.UnmarshalExtent(v)
			if err != nil {
				return err
			}
			if e.ranges.dead(n.ino, i, x.NewestGen()) {
				return nil // dropped by a truncate; the cleaner removes it
			}
		}
		best, found = i, true
		return errStopScan
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return 0, false, err
	}
	return best, found, nil
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
		es := int64(n.es())
		idx, ok, err := e.nextDataLocked(n, uint64(off/es))
		if err != nil {
			return 0, err
		}
		if !ok || int64(idx)*es >= size {
			return 0, ErrNoData
		}
		return max(off, int64(idx)*es), nil
	})
}

// SeekHole returns the first offset >= off inside a hole (the end of the
// file counts as one).
func (e *Engine) SeekHole(ctx context.Context, ino uint64, off int64) (int64, error) {
	return e.seek(ino, off, func(n *inode, size int64) (int64, error) {
		es := int64(n.es())
		for idx := uint64(off / es); int64(idx)*es < size; idx++ {
			ok, err := e.hasDataLocked(n, idx)
			if err != nil {
				return 0, err
			}
			if !ok {
				return max(off, int64(idx)*es), nil
			}
		}
		return size, nil
	})
}
