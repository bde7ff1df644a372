package fs

import (
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// Repoint moves each extent frame that its value still references at Old
// (its base or one of its patches) to New, in one
// transaction that also credits the output segment (frameBytes, objSize:
// its counter's total and size) and debits the sources. A pointer that
// changed meanwhile (a concurrent overwrite, truncate or delete) is left
// alone: the newer write wins and its frame in the output is dead.
//
// A moved frame of a patched value asks the merger to fold the value into
// one whole frame once writes pause (the idle fold, docs/PATCHES.md
// "Merge"): repack keeps the pieces verbatim, and the fold is what makes
// the extent read sequentially again. Not at once: during a burst of
// random writes repack moves patches that later writes soon drop, and a
// merge for each would upload a whole extent per moved patch. The fold is
// a write like any other: it checks that the value still holds the same
// frames (a repack may only have moved them), and its commit debits every
// piece.
func (e *Engine) Repoint(outSeg uint64, frameBytes, objSize int64, moves []segment.Move) (int, error) {
	if err := e.writable(); err != nil {
		return 0, err
	}
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	b.Merge(schema.CounterKey(outSeg), countDelta(0, frameBytes, objSize))
	moved := 0
	var live int64
	var fold []extentID
	// A repack moves the base and patches of one value together when
	// they lie in its sources: each move must see the value as the
	// moves before it in this batch left it, or the last would write
	// back the others' old places (their counters moved all the same).
	staged := map[extentID]segment.Extent{}
	for _, m := range moves {
		id := extentID{m.Ino, m.Extent}
		cur, ok := staged[id]
		if !ok {
			var err error
			if cur, ok, err = e.extentValue(m.Ino, m.Extent); err != nil {
				return 0, err
			}
		}
		if !ok {
			continue
		}
		// The frame may be the base or a patch of the value.
		nv, found := cur.Replace(m.Old, m.New)
		if !found {
			continue
		}
		staged[id] = nv
		b.Set(schema.ExtentKey(m.Ino, m.Extent), nv.Marshal())
		if nv.Patched() && e.opts.patchWrites {
			fold = append(fold, extentID{m.Ino, m.Extent})
		}
		b.Merge(schema.CounterKey(m.Old.Segment), countDelta(-int64(m.Old.Length), 0, 0))
		live += int64(m.New.Length)
		moved++
	}
	if live > 0 {
		b.Merge(schema.CounterKey(outSeg), countDelta(live, 0, 0))
	}
	if err := e.commit(b); err != nil {
		return 0, err
	}
	if moved > 0 {
		e.deadBytes()
	}
	if len(fold) > 0 {
		e.queueIdle(fold)
	}
	return moved, nil
}

// NewSegmentID allocates a segment id (repack outputs); it stays in flight
// until SegmentDone.
func (e *Engine) NewSegmentID() uint64 { return e.newSegID() }

// DropCounter removes the counter of a segment whose object is gone: the
// reclamation cycle after it deleted a dead segment, or a stale counter
// it found.
func (e *Engine) DropCounter(seg uint64) error {
	return e.counterChange(func(b *lsm.Batch) { b.Delete(schema.CounterKey(seg)) })
}

// AdjustCounter adds a delta to a segment's counter (reclamation's repair
// of an under-count, or the sweep recreating a lost counter).
func (e *Engine) AdjustCounter(seg uint64, live, total, size int64) error {
	return e.counterChange(func(b *lsm.Batch) { b.Merge(schema.CounterKey(seg), countDelta(live, total, size)) })
}

// counterChange commits one change to a counter under the pointer lock,
// like every counter change.
func (e *Engine) counterChange(change func(b *lsm.Batch)) error {
	if err := e.writable(); err != nil {
		return err
	}
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	change(b)
	return e.commit(b)
}
