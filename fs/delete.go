package fs

import (
	"context"
	"errors"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// InlineDeleteExtents is the largest file (in extents) whose pointers an
// unlink deletes in its own transaction; larger files get a tombstone.
const InlineDeleteExtents = 10

// CleanerBatch is the most tombstones, and the most pointers, one cleaner
// transaction handles.
const CleanerBatch = 10000

// deleteInodeLocked removes inode ino (last link gone, not open) in batch b:
// a small file's pointers go now, a larger file's wait for the cleaner
// under a tombstone (reclaim's tombstone cleaner, woken through
// Events.Tombstoned, removes them with CleanTombstones). n is the loaded inode, if any. Caller holds e.ns and
// e.ptrMu.
func (e *Engine) deleteInodeLocked(b *lsm.Batch, ino uint64, n *inode) error {
	if n != nil {
		n.mu.Lock()
		n.deleted = true
		freed := int64(len(n.dirty)) * int64(n.es())
		n.dirty = map[uint64][]byte{}
		n.spans = nil
		n.flushing = map[uint64]*flushEntry{}
		n.attrDirty = false
		n.mu.Unlock()
		if freed > 0 {
			e.dirtyDone(freed)
		}
	}
	type ext struct {
		key []byte
		x   segment.Extent
	}
	var exts []ext
	lo, hi := schema.ExtentRange(ino, 0, 0)
	err := e.scan(lo, hi, func(k, v []byte) error {
		if len(exts) > InlineDeleteExtents {
			return errStopScan
		}
		x, err := segment.UnmarshalExtent(v)
		if err != nil {
			return err
		}
		exts = append(exts, ext{append([]byte(nil), k...), x})
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	if len(exts) > InlineDeleteExtents {
		b.Set(schema.TombstoneKey(ino), nil)
		e.opts.Stats.tombstoned()
		failpoint.Hit("unlink-tombstone-written")
		if e.opts.Events != nil {
			e.opts.Events.Tombstoned()
		}
	} else {
		for _, x := range exts {
			b.Delete(x.key)
			debit(b, x.x)
		}
		if len(exts) > 0 {
			defer e.deadBytes()
		}
		failpoint.Hit("unlink-inline-delete")
	}
	e.dropReserved(ino, n)
	b.Delete(schema.InodeKey(ino))
	b.Delete(schema.SymlinkKey(ino))
	b.Delete(schema.OrphanKey(ino))
	xlo, xhi := schema.XattrPrefix(ino)
	return e.scan(xlo, xhi, func(k, _ []byte) error {
		b.Delete(append([]byte(nil), k...))
		return nil
	})
}

// CleanTombstones runs one transaction of the tombstone cleaner (stage 1
// of reclamation, whose loop is reclaim's): up to CleanerBatch tombstones
// and CleanerBatch pointers, newest extent first, debiting counters in the
// same transaction. It returns the tombstones finished (their files now
// empty), the pointers removed and their frame bytes (with an error, what
// was committed before it). After Close it fails
// with ErrClosed; Close waits for a transaction in progress, so that its
// final barrier journals it.
func (e *Engine) CleanTombstones(ctx context.Context) (tombs, extents int, bytes int64, err error) {
	e.hostMu.RLock()
	defer e.hostMu.RUnlock()
	if e.closed.Load() {
		return 0, 0, 0, ErrClosed
	}
	if e.ro.Load() || e.db.ReserveReleased() || e.db.Failed() != nil {
		// With the metadata store's reserve in use, the cleaner waits
		// (cachedisk.go).
		return 0, 0, 0, nil
	}
	return e.cleanTombstones()
}

// cleanTombstones is CleanTombstones once it may write.
func (e *Engine) cleanTombstones() (int, int, int64, error) {
	var tombs []uint64
	lo, hi := schema.PrefixRange(schema.PTombstone)
	if err := e.scan(lo, hi, func(k, _ []byte) error {
		if len(tombs) >= CleanerBatch {
			return errStopScan
		}
		if ino, err := schema.ParseU64Key(k, schema.PTombstone); err == nil {
			tombs = append(tombs, ino)
		}
		return nil
	}); err != nil && !errors.Is(err, errStopScan) {
		return 0, 0, 0, err
	}
	if len(tombs) == 0 {
		// What an error leaves counted was committed before it.
		removed, dropped, freed, err := e.cleanRanges(CleanerBatch)
		return dropped, removed, freed, err
	}
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	removed, dropped, freed := 0, 0, int64(0)
	for _, ino := range tombs {
		if removed >= CleanerBatch {
			break
		}
		elo, ehi := schema.ExtentRange(ino, 0, 0)
		it, err := e.newIter(elo, ehi)
		if err != nil {
			return 0, 0, 0, err
		}
		empty := true
		for ok := it.Last(); ok; ok = it.Prev() {
			if removed >= CleanerBatch {
				empty = false
				break
			}
			x, err := segment.UnmarshalExtent(it.Value())
			if err != nil {
				it.Close()
				return 0, 0, 0, err
			}
			b.Delete(append([]byte(nil), it.Key()...))
			removed++
			freed += debit(b, x)
			if removed%1000 == 0 {
				failpoint.Hit("cleaner-mid-batch")
			}
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return 0, 0, 0, err
		}
		if empty {
			b.Delete(schema.TombstoneKey(ino))
			dropped++
		}
	}
	failpoint.Hit("cleaner-before-commit")
	if e.cleanerHook != nil {
		e.cleanerHook()
	}
	if err := e.commit(b); err != nil {
		return 0, 0, 0, err
	}
	failpoint.Hit("cleaner-after-commit")
	if removed > 0 {
		e.deadBytes()
	}
	return dropped, removed, freed, nil
}
