package reclaim

import (
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

func segKey(id uint64) string { return segment.Key(id) }

func decodeCounter(v []byte) (live, total, size int64, err error) { return lsm.DecodeCounter(v) }

// readDirectory reads a segment's footer and directory: exactly two ranged
// GETs through the counting store.
func (r *Reclaimer) readDirectory(ctx context.Context, id uint64, size int64) (segment.Footer, []segment.DirEntry, error) {
	return r.rd.ReadDirectory(ctx, id, size)
}

// liveFrame is a directory entry that is exactly one of the frames of its
// extent's current value (its base, or a patch's frame), cur.
type liveFrame struct {
	e   segment.DirEntry
	cur segment.Pointer
}

// lookupResult is what the current metadata says about one segment, read
// in one consistent view.
type lookupResult struct {
	counterFound bool
	counterLive  int64
	refs         int         // frames of current extent values (bases and patches) in the segment
	refBytes     int64       // their frame bytes
	live         []liveFrame // entries that are exactly one of those frames
}

// lookup checks, for each directory entry, the current value at (ino,
// extent), all in one Pebble iterator (a consistent snapshot), together
// with the segment's counter. Any frame of a value in the segment, at any
// offset, counts as a reference; an undecodable value is an error (doubt).
func (r *Reclaimer) lookup(id uint64, entries []segment.DirEntry) (lookupResult, error) {
	r.meta <- struct{}{}
	defer func() { <-r.meta }()
	var res lookupResult
	type ext struct{ ino, idx uint64 }
	byExt := make(map[ext][]segment.DirEntry, len(entries))
	order := make([]ext, 0, len(entries))
	for _, e := range entries {
		x := ext{e.Ino, e.Extent}
		if _, ok := byExt[x]; !ok {
			order = append(order, x)
		}
		byExt[x] = append(byExt[x], e)
	}
	// Key 0 is the counter, key i+1 the pointer of order[i].
	keys := make([][]byte, 0, 1+len(order))
	keys = append(keys, schema.CounterKey(id))
	for _, x := range order {
		keys = append(keys, schema.ExtentKey(x.ino, x.idx))
	}
	err := r.host.MetaGetAll(keys, func(i int, v []byte) error {
		if i == 0 {
			live, _, _, err := decodeCounter(v)
			if err != nil {
				return err
			}
			res.counterFound, res.counterLive = true, live
			return nil
		}
		x := order[i-1]
		val, err := segment.UnmarshalExtent(v)
		if err != nil {
			return fmt.Errorf("extent %d/%d: %w", x.ino, x.idx, err)
		}
		// Each frame of the value (its base and its patches' frames)
		// is a reference of its own.
		for p := range val.Frames() {
			if p.Segment != id {
				continue
			}
			res.refs++
			res.refBytes += int64(p.Length)
			for _, f := range byExt[x] {
				if f.Offset == p.Offset && f.Length == p.Length && f.Gen == p.Gen && f.PlainLen == p.PlainLen {
					res.live = append(res.live, liveFrame{e: f, cur: p})
					break
				}
			}
		}
		return nil
	})
	return res, err
}
