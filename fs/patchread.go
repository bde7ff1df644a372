package fs

import (
	"cmp"
	"slices"

	"ebbfs.dev/ebbfs/segment"
)

// assemble places extent idx's part of the request from its pieces
// (patch.go): the committed value x (has: there is one, visible) with a
// buffer in patch mode (mem, holding the bytes s of the extent) painted
// over it. Only the parts of frames the request shows are read, through
// the same caches as every frame; a cache-only attempt records each
// frame it misses (its bytes are then not placed).
func (rr *rangeRead) assemble(ino, idx uint64, x segment.Extent, has bool, mem []byte, s span) error {
	if err := rr.flush(); err != nil {
		return err
	}
	start := int64(idx) * rr.es
	lo, hi := max(start, rr.off), min(start+rr.es, rr.off+int64(len(rr.p)))
	dst := rr.p[lo-rr.off : hi-rr.off]
	from := lo - start
	missed := rr.misses != nil && len(*rr.misses) > 0
	if has {
		if err := x.Assemble(dst, uint32(from), rr.e.pieceReader(rr.ctx, ino, idx, rr.misses)); err != nil {
			return err
		}
	} else {
		clear(dst)
	}
	if rr.misses != nil && len(*rr.misses) > 0 && !missed {
		return nil // incomplete: the caller fetches and reads again
	}
	if s.patch() {
		a, b := max(int64(s.lo), from), min(int64(s.hi), from+int64(len(dst)))
		if a < b {
			copy(dst[a-from:b-from], mem[a:b])
		}
	}
	rr.placeFrom(idx, dst, from, false) // copies dst onto itself, and lists it for a vectored reply
	return nil
}

// committedAt returns the committed value of extent idx from committed
// (values from idx on, in index order), if it has one.
func committedAt(committed []extentPointer, idx uint64) (segment.Extent, bool) {
	if len(committed) == 0 || committed[0].idx != idx {
		return segment.Extent{}, false
	}
	return committed[0].value(), true
}

// coalescePieces joins the one-frame misses of a cache-only attempt (the
// pieces of patched extents, each recorded on its own) into runs of their
// segments in offset order, at most maxMissRun frames each, so that the
// patches one flush wrote next to each other are fetched with one ranged
// GET (the reader reads small gaps through and splits at large ones).
// Misses of several frames, runs already, are left as they are.
func coalescePieces(misses []storeMiss) []storeMiss {
	type piece struct {
		id segment.FrameID
		p  segment.Pointer
	}
	var single []piece
	out := misses[:0:0]
	for _, m := range misses {
		if len(m.ptrs) == 1 {
			single = append(single, piece{m.ids[0], m.ptrs[0]})
		} else {
			out = append(out, m)
		}
	}
	if len(single) < 2 {
		return misses
	}
	slices.SortFunc(single, func(a, b piece) int {
		return cmp.Or(cmp.Compare(a.p.Segment, b.p.Segment), cmp.Compare(a.p.Offset, b.p.Offset))
	})
	var run *storeMiss
	for i, x := range single {
		if i > 0 && x.p == single[i-1].p {
			continue // the same frame, missed twice
		}
		if run != nil && len(run.ptrs) < maxMissRun && run.ptrs[0].Segment == x.p.Segment &&
			uint64(x.p.Offset) >= run.ptrs[len(run.ptrs)-1].End() {
			run.ids = append(run.ids, x.id)
			run.ptrs = append(run.ptrs, x.p)
			continue
		}
		if run != nil {
			out = append(out, *run)
		}
		run = &storeMiss{ids: []segment.FrameID{x.id}, ptrs: []segment.Pointer{x.p}}
	}
	return append(out, *run)
}

// maxMissRun bounds the frames of a run coalescePieces makes, as a read's
// runs are bounded.
const maxMissRun = 64
