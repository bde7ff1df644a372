package fs

import "context"

// DataRange is a byte range of a file that holds data.
type DataRange struct {
	Off, Len int64
}

// dataRangeWindow is how many extents DataRanges asks holes about at a
// time: it bounds the pointers held at once for a long, full range.
const dataRangeWindow = 1 << 16

// DataRanges lists the ranges of ino within [off, off+length) that hold
// data (dirty, being flushed, or committed extents), in order, adjacent
// extents merged, clipped to the range and to the file's size. Everything
// else in [off, end) is a hole that reads as zeroes. It reads the extent
// map only (as SEEK_DATA and fallocate do), never a frame, so it costs no
// store request.
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
	end = off + min(length, size-off)
	es := int64(n.es())
	add := func(from, to uint64) { // extents [from, to) hold data
		lo, hi := max(off, int64(from)*es), min(end, int64(to)*es)
		if k := len(ranges) - 1; k >= 0 && ranges[k].Off+ranges[k].Len == lo {
			ranges[k].Len += hi - lo
			return
		}
		ranges = append(ranges, DataRange{Off: lo, Len: hi - lo})
	}
	last := uint64((end-1)/es) + 1
	for w := uint64(off / es); w < last; w += dataRangeWindow {
		wEnd := min(last, w+dataRangeWindow)
		hs, err := e.holes(n, w, wEnd)
		if err != nil {
			return nil, 0, err
		}
		at := w
		for _, h := range hs {
			if h.From > at {
				add(at, h.From)
			}
			at = h.To
		}
		if at < wEnd {
			add(at, wEnd)
		}
		if len(ranges) > maxRanges {
			end = ranges[maxRanges].Off
			ranges = ranges[:maxRanges]
			break
		}
	}
	return ranges, end, nil
}
