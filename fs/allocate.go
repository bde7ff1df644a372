package fs

import (
	"context"
	"sort"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// Reservations. ebbfs stores no zeroes, so fallocate has nothing to write;
// what it keeps is the promise. The inode record lists the extent ranges
// fallocate reserved that held no data then and have not been written
// since (schema.Inode.Reserved, docs/FORMAT.md). Each reserved extent
// counts a whole extent in st_blocks, next to the extents that hold data,
// so a file reports the space it was given, as on a local filesystem. A
// write that puts data into a reserved extent takes it off the list (the
// data is counted instead); a punch or a truncate over it drops it.
// Writing zeroes into a reserved extent turns it into an ordinary hole.
//
// Reservations count as used space (statfs, the quota; reserved.go,
// space.go): fallocate fails with ErrNoSpace when the extents it newly
// reserves do not fit in the free space then, against [filesystem]
// max_size or, without one, the nominal capacity statfs reports; writes
// into reserved extents need no more room, and other writes see the
// reserved space as taken.
//
// The list is bounded (schema.MaxReservedRanges runs): a fallocate whose
// holes would need more runs reserves the first ones only, and a write
// that would split the list past the bound drops the shortest run.

// reservedExtents is the number of extents res reserves.
func reservedExtents(res []schema.ExtentSpan) uint64 {
	var n uint64
	for _, r := range res {
		n += r.To - r.From
	}
	return n
}

// reservedBlocks is the 512-byte blocks the reservations res of a file
// with extent shift shift count.
func reservedBlocks(res []schema.ExtentSpan, shift uint8) uint64 {
	return reservedExtents(res) << shift / 512
}

// unreserve removes extents [from, to) from res and returns the result
// (res itself may be modified).
func unreserve(res []schema.ExtentSpan, from, to uint64) []schema.ExtentSpan {
	if len(res) == 0 || from >= to {
		return res
	}
	var out []schema.ExtentSpan
	for _, r := range res {
		if r.To <= from || r.From >= to {
			out = append(out, r)
			continue
		}
		if r.From < from {
			out = append(out, schema.ExtentSpan{From: r.From, To: from})
		}
		if r.To > to {
			out = append(out, schema.ExtentSpan{From: to, To: r.To})
		}
	}
	for len(out) > schema.MaxReservedRanges {
		shortest := 0
		for i, r := range out {
			if r.To-r.From < out[shortest].To-out[shortest].From {
				shortest = i
			}
		}
		out = append(out[:shortest], out[shortest+1:]...)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// reserve adds the runs in add (sorted, disjoint) to res, merging touching
// runs, up to the bound, and returns the result and the extents it added.
func reserve(res, add []schema.ExtentSpan) ([]schema.ExtentSpan, uint64) {
	before := reservedExtents(res)
	all := append(append([]schema.ExtentSpan(nil), res...), add...)
	sort.Slice(all, func(i, j int) bool { return all[i].From < all[j].From })
	var out []schema.ExtentSpan
	for _, r := range all {
		if k := len(out) - 1; k >= 0 && r.From <= out[k].To {
			out[k].To = max(out[k].To, r.To)
			continue
		}
		if len(out) == schema.MaxReservedRanges {
			break
		}
		out = append(out, r)
	}
	return out, reservedExtents(out) - min(before, reservedExtents(out))
}

// holes returns the runs of extents in [from, to) of n that hold no data:
// no committed pointer, nothing dirty or being flushed. Caller holds n.mu.
func (e *Engine) holes(n *inode, from, to uint64) ([]schema.ExtentSpan, error) {
	ptrs, err := e.pointersIn(n.ino, from, to)
	if err != nil {
		return nil, err
	}
	used := make([]uint64, 0, len(ptrs)+len(n.dirty)+len(n.flushing))
	for _, p := range ptrs {
		used = append(used, p.idx)
	}
	for idx := range n.dirty {
		if idx >= from && idx < to {
			used = append(used, idx)
		}
	}
	for idx := range n.flushing {
		if idx >= from && idx < to {
			used = append(used, idx)
		}
	}
	sort.Slice(used, func(i, j int) bool { return used[i] < used[j] })
	var out []schema.ExtentSpan
	at := from
	for _, idx := range used {
		if idx > at {
			out = append(out, schema.ExtentSpan{From: at, To: idx})
		}
		at = max(at, idx+1)
	}
	if at < to {
		out = append(out, schema.ExtentSpan{From: at, To: to})
	}
	return out, nil
}

// Allocate reserves [off, off+length) (fallocate mode 0, or
// FALLOC_FL_KEEP_SIZE with keepSize): the extents of the range that hold no
// data are recorded as reserved (see above), and without keepSize the size
// grows to cover the range.
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
	n, err := e.acquire(ino)
	if err != nil {
		return err
	}
	defer e.release(n)
	if !keepSize {
		// Growing: bytes a crash left past the end must not show (grow.go).
		if err := e.zeroPastEnd(ctx, n, off+length); err != nil {
			return err
		}
	}
	// Under the inode lock throughout: no write or flush commit can turn
	// a hole into data between the look and the record.
	n.mu.Lock()
	defer n.mu.Unlock()
	es := n.es()
	from := uint64(off) / es
	to := (uint64(off+length) + es - 1) / es
	if !n.attr.IsRegular() {
		if n.attr.IsDir() {
			return ErrIsDir
		}
		return ErrInvalid
	}
	holes, err := e.holes(n, from, to)
	if err != nil {
		return err
	}
	res, added := reserve(n.res, holes)
	if err := e.reserveAlloc(int64(added * es)); err != nil {
		return err
	}
	grow := !keepSize && uint64(off+length) > n.attr.Size
	if added == 0 && !grow {
		return nil
	}
	now := e.now()
	n.res = res
	if grow {
		n.attr.Size = uint64(off + length)
		n.attr.Mtime = now
	}
	n.attr.Ctime = now
	n.settle()
	b := e.db.NewBatch()
	defer b.Close()
	e.putInode(b, n)
	return e.commit(b)
}
