package fs

import (
	"errors"
	"fmt"
	"sync"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// A truncate or punch over more than InlineDropExtents committed extents
// does not delete their pointers itself: it writes a range tombstone in
// the same transaction as the new size, and the tombstone cleaner works
// it off (newest extent first, counters debited in the same transaction),
// so that truncating a 1 TiB file returns at once. A smaller range
// changes pointers and counters in that one transaction.
//
// The tombstone's mark is an id above every segment id allocated when it
// was written: a pointer in the range whose generation (the id of the
// segment its frame was first written to, kept by repack) is below the
// mark holds bytes from before the truncate and is dead; data written
// into the range afterwards is flushed into newer segments and is kept.
// Until the cleaner removes them, dead pointers stay counted in their
// segments' live bytes (the counters always equal the pointers) but are
// invisible to reads and SEEK_DATA.

// InlineDropExtents is the most committed extents a truncate or punch
// drops in its own transaction.
const InlineDropExtents = 1024

// rangeTomb is one pending range tombstone of an inode.
type rangeTomb struct {
	from, to uint64 // extents [from, to); to == 0: to the end
	mark     uint64 // pointers with Gen below it are dead
}

func (r rangeTomb) covers(idx uint64) bool { return idx >= r.from && (r.to == 0 || idx < r.to) }

func (r rangeTomb) key(ino uint64) []byte { return schema.RangeTombKey(ino, r.from, r.to) }

// rangeTombs is the engine's in-memory copy of every pending range
// tombstone, by inode. It changes only under ptrMu and the inode's
// mutex, together with the transaction that writes or drops the key.
type rangeTombs struct {
	mu sync.RWMutex
	m  map[uint64][]rangeTomb
}

// dead reports whether the value of extent idx of ino whose newest
// frame has generation gen (segment.Extent.NewestGen) is covered by a
// range tombstone written after its data.
func (t *rangeTombs) dead(ino, idx, gen uint64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, r := range t.m[ino] {
		if gen < r.mark && r.covers(idx) {
			return true
		}
	}
	return false
}

func (t *rangeTombs) has(ino uint64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.m[ino]) > 0
}

// add records r for ino; a tombstone with the same range is replaced (the
// newer mark covers everything the older one did).
func (t *rangeTombs) add(ino uint64, r rangeTomb) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64][]rangeTomb{}
	}
	list := t.m[ino]
	for i := range list {
		if list[i].from == r.from && list[i].to == r.to {
			list[i].mark = max(list[i].mark, r.mark)
			return
		}
	}
	t.m[ino] = append(list, r)
}

func (t *rangeTombs) remove(ino uint64, r rangeTomb) {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.m[ino]
	for i := range list {
		if list[i] == r {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(t.m, ino)
	} else {
		t.m[ino] = list
	}
}

// all returns a copy of every pending tombstone.
func (t *rangeTombs) all() map[uint64][]rangeTomb {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[uint64][]rangeTomb, len(t.m))
	for ino, l := range t.m {
		out[ino] = append([]rangeTomb(nil), l...)
	}
	return out
}

// loadRangeTombs reads the pending range tombstones at open.
func (e *Engine) loadRangeTombs() error {
	lo, hi := schema.PrefixRange(schema.PRangeTomb)
	return e.scan(lo, hi, func(k, v []byte) error {
		ino, from, to, err := schema.ParseRangeTombKey(k)
		if err != nil {
			return fmt.Errorf("fs: range tombstone key %x: %w", k, err)
		}
		mark, err := schema.ParseU64(v)
		if err != nil {
			return fmt.Errorf("fs: range tombstone %d [%d,%d): %w", ino, from, to, err)
		}
		e.ranges.add(ino, rangeTomb{from: from, to: to, mark: mark})
		return nil
	})
}

// markNow returns an id above every segment id allocated so far.
func (e *Engine) markNow() uint64 { return e.db.Epoch()<<32 | (e.segSeq.Load() + 1) }

// dropRangeLocked removes the extents [from, to) (to == 0: to the end) of
// n in batch b: their pointers and counters when there are at most
// InlineDropExtents of them, a range tombstone otherwise. It returns a
// function that applies the change to the in-memory state once b is
// committed. Caller holds ptrMu and n.mu.
func (e *Engine) dropRangeLocked(b *lsm.Batch, n *inode, from, to uint64) (apply func(), err error) {
	lo, hi := schema.ExtentRange(n.ino, from, to)
	var keys [][]byte
	var vals []segment.Extent
	err = e.scan(lo, hi, func(k, v []byte) error {
		if len(keys) == InlineDropExtents {
			keys = append(keys, nil) // more than inline: a tombstone
			return errStopScan
		}
		x, err := segment.UnmarshalExtent(v)
		if err != nil {
			return fmt.Errorf("fs: extent %x: %w", k, err)
		}
		keys = append(keys, append([]byte(nil), k...))
		vals = append(vals, x)
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, err
	}
	if len(keys) > InlineDropExtents {
		r := rangeTomb{from: from, to: to, mark: e.markNow()}
		b.Set(r.key(n.ino), schema.U64(r.mark))
		failpoint.Hit("truncate-range-tombstone")
		return func() {
			e.ranges.add(n.ino, r)
			e.opts.Stats.tombstoned()
			if e.opts.Events != nil {
				e.opts.Events.Tombstoned() // wakes the cleaner
			}
		}, nil
	}
	var blocks uint64
	for i, k := range keys {
		b.Delete(k)
		debit(b, vals[i])
		blocks += extentBlocks(vals[i])
	}
	n.attr.Blocks -= min(n.attr.Blocks, blocks)
	if len(keys) == 0 {
		return func() {}, nil
	}
	return e.deadBytes, nil
}

// cleanRanges works off range tombstones for the cleaner: at most budget
// dead pointers, newest extent first, one transaction per inode with the
// counters and the inode's block count. A tombstone whose range holds no
// dead pointer any more is dropped. It returns the pointers removed and
// the tombstones dropped.
func (e *Engine) cleanRanges(budget int) (removed, dropped int, freed int64, err error) {
	for ino, list := range e.ranges.all() {
		if removed >= budget {
			break
		}
		n, err := e.acquire(ino)
		if err != nil && !errors.Is(err, ErrNotExist) {
			return removed, dropped, freed, err
		}
		r, d, f, err := e.cleanInodeRanges(ino, n, list, budget-removed)
		if n != nil {
			e.release(n)
		}
		removed, dropped, freed = removed+r, dropped+d, freed+f
		if err != nil {
			return removed, dropped, freed, err
		}
	}
	return removed, dropped, freed, nil
}

// cleanInodeRanges is one cleaner transaction for the range tombstones of
// ino; n is its loaded inode, nil if the file is gone.
func (e *Engine) cleanInodeRanges(ino uint64, n *inode, list []rangeTomb, budget int) (removed, dropped int, freed int64, err error) {
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	if n != nil {
		n.mu.Lock()
		defer n.mu.Unlock()
	}
	b := e.db.NewBatch()
	defer b.Close()
	var done []rangeTomb
	var blocks uint64
	for _, r := range list {
		lo, hi := schema.ExtentRange(ino, r.from, r.to)
		it, err := e.newIter(lo, hi)
		if err != nil {
			return 0, 0, 0, err
		}
		finished := true
		for ok := it.Last(); ok; ok = it.Prev() {
			x, perr := segment.UnmarshalExtent(it.Value())
			if perr != nil {
				it.Close()
				return 0, 0, 0, fmt.Errorf("fs: extent %x: %w", it.Key(), perr)
			}
			if x.NewestGen() >= r.mark {
				continue // written after the truncate
			}
			if removed == budget {
				finished = false
				break
			}
			b.Delete(append([]byte(nil), it.Key()...))
			blocks += extentBlocks(x)
			freed += debit(b, x)
			removed++
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return 0, 0, 0, err
		}
		if !finished {
			break
		}
		b.Delete(r.key(ino))
		done = append(done, r)
	}
	if removed == 0 && len(done) == 0 {
		return 0, 0, 0, nil
	}
	if n != nil && !n.deleted {
		n.attr.Blocks -= min(n.attr.Blocks, blocks)
		e.putInode(b, n)
	}
	failpoint.Hit("cleaner-range-before-commit")
	if err := e.commit(b); err != nil {
		return 0, 0, 0, err
	}
	for _, r := range done {
		e.ranges.remove(ino, r)
	}
	if removed > 0 {
		e.deadBytes()
	}
	return removed, len(done), freed, nil
}
