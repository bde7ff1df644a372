package fs

import (
	"context"
	"errors"
	"slices"

	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// DataRange is a byte range of a file that holds data.
type DataRange struct {
	Off, Len int64
}

// DataRanges lists the ranges of ino within [off, off+length) that hold
// data (dirty, being flushed, or committed extents), in order, adjacent
// extents merged, clipped to the range and to the file's size. Everything
// else in [off, end) is a hole that reads as zeroes. It reads the extent
// map only, never a frame, so it costs no store request.
//
// At most maxRanges ranges are returned; end is how far the answer is
// complete: min(off+length, size), or less when maxRanges cut it short
// (never less than the end of the first range, so a caller that continues
// from end always makes progress). An offset at or past the end of the
// file is ErrNoData.
func (e *Engine) DataRanges(ctx context.Context, ino uint64, off, length int64, maxRanges int) (ranges []DataRange, end int64, err error) {
	if off < 0 || length <= 0 || maxRanges <= 0 {
		return nil, 0, ErrInvalid
	}
	n, err := e.acquire(ino)
	if err != nil {
		return nil, 0, err
	}
	defer e.release(n)
	n.mu.RLock()
	defer n.mu.RUnlock()
	size := int64(n.attr.Size)
	if off >= size {
		return nil, 0, ErrNoData
	}
	end = min(size, off+min(length, size-off))
	es := int64(n.es())
	first, last := uint64(off/es), uint64((end-1)/es) // extent indexes, inclusive
	idx, stop, err := e.dataExtentsLocked(n, first, last, maxRanges)
	if err != nil {
		return nil, 0, err
	}
	if stop <= last {
		end = int64(stop) * es
	}
	for _, i := range idx {
		lo, hi := max(off, int64(i)*es), min(end, int64(i+1)*es)
		if lo >= hi {
			continue
		}
		if k := len(ranges) - 1; k >= 0 && ranges[k].Off+ranges[k].Len == lo {
			ranges[k].Len += hi - lo
			continue
		}
		ranges = append(ranges, DataRange{Off: lo, Len: hi - lo})
	}
	if len(ranges) > maxRanges {
		// Dirty extents split the committed runs further.
		end = ranges[maxRanges].Off
		ranges = ranges[:maxRanges]
	}
	return ranges, end, nil
}

// dataExtentsLocked returns, sorted, the indexes in [first, last] of n's
// extents that hold data, and stop: the answer covers [first, stop), which
// is last+1 unless more than maxRanges runs of committed extents were
// found. Caller holds n.mu.
func (e *Engine) dataExtentsLocked(n *inode, first, last uint64, maxRanges int) ([]uint64, uint64, error) {
	var idx []uint64
	runs := 0
	stop := last + 1
	lo, hi := schema.ExtentRange(n.ino, first, last+1)
	masked := e.ranges.has(n.ino)
	err := e.scan(lo, hi, func(k, v []byte) error {
		_, i, err := schema.ParseExtentKey(k)
		if err != nil {
			return err
		}
		if masked {
			p, err := segment.UnmarshalPointer(v)
			if err != nil {
				return err
			}
			if e.ranges.dead(n.ino, i, p) {
				return nil // dropped by a truncate; the cleaner removes it
			}
		}
		if len(idx) == 0 || idx[len(idx)-1]+1 != i {
			runs++
			if runs > maxRanges {
				stop = i
				return errStopScan
			}
		}
		idx = append(idx, i)
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, 0, err
	}
	for i := range n.dirty {
		if i >= first && i < stop {
			idx = append(idx, i)
		}
	}
	for i := range n.flushing {
		if i >= first && i < stop {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return slices.Compact(idx), stop, nil
}
