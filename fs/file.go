package fs

import (
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// extentSize is the default (and largest) extent size; a file's own is
// inode.es().
const extentSize = segment.ExtentSize

// Open records an open handle on ino, so that unlinking its last name
// defers deletion to the last Release.
func (e *Engine) Open(ctx context.Context, ino uint64) error {
	e.ns.Lock()
	defer e.ns.Unlock()
	n, err := e.acquireLocked(ino)
	if err != nil {
		return err
	}
	n.open++
	n.refs--
	return nil
}

// IsOpen reports whether ino has open handles.
func (e *Engine) IsOpen(ino uint64) bool {
	e.ns.Lock()
	defer e.ns.Unlock()
	n := e.ns.inodes[ino]
	return n != nil && n.open > 0
}

// Release drops an open handle; the last one of an unlinked inode deletes it.
func (e *Engine) Release(ctx context.Context, ino uint64) error {
	e.ns.Lock()
	defer e.ns.Unlock()
	n := e.ns.inodes[ino]
	if n == nil || n.open == 0 {
		return nil
	}
	n.open--
	if n.open > 0 {
		return nil
	}
	n.mu.RLock()
	orphan := n.attr.Nlink == 0 && !n.deleted
	n.mu.RUnlock()
	if orphan && !e.opts.ReadOnly && !e.closed.Load() {
		e.ptrMu.Lock()
		b := e.db.NewBatch()
		b.Delete(schema.OrphanKey(ino))
		err := e.deleteInodeLocked(b, ino, n)
		if err == nil {
			err = e.commit(b)
		}
		b.Close()
		e.ptrMu.Unlock()
		if err != nil {
			e.log.Error("deleting unlinked file at last close", "ino", ino, "err", err)
		}
		failpoint.Hit("orphan-last-close")
	}
	e.maybeEvictLocked(n)
	return nil
}

// pointer returns the committed pointer of an extent, if any.
func (e *Engine) pointer(ino, idx uint64) (segment.Pointer, bool, error) {
	v, ok, err := e.get(schema.ExtentKey(ino, idx))
	if err != nil || !ok {
		return segment.Pointer{}, false, err
	}
	p, err := segment.UnmarshalPointer(v)
	if err != nil {
		return segment.Pointer{}, false, fmt.Errorf("fs: extent %d/%d: %w", ino, idx, err)
	}
	return p, true, nil
}

// extentPointer is the committed pointer of one extent.
type extentPointer struct {
	idx uint64
	p   segment.Pointer
}

// pointersIn returns the visible committed pointers (visiblePointer) of
// extents [from, to) of ino in index order, read in one scan rather than a
// lookup per extent.
func (e *Engine) pointersIn(ino, from, to uint64) ([]extentPointer, error) {
	masked := e.ranges.has(ino)
	if to == from+1 {
		// One extent (a small random read): a point lookup costs less
		// than setting up an iterator.
		p, ok, err := e.pointer(ino, from)
		if err != nil || !ok || masked && e.ranges.dead(ino, from, p) {
			return nil, err
		}
		return []extentPointer{{from, p}}, nil
	}
	lo, hi := schema.ExtentRange(ino, from, to)
	var out []extentPointer
	err := e.scan(lo, hi, func(k, v []byte) error {
		_, idx, err := schema.ParseExtentKey(k)
		if err != nil {
			return fmt.Errorf("fs: extent key %x: %w", k, err)
		}
		p, err := segment.UnmarshalPointer(v)
		if err != nil {
			return fmt.Errorf("fs: extent %d/%d: %w", ino, idx, err)
		}
		if !masked || !e.ranges.dead(ino, idx, p) {
			out = append(out, extentPointer{idx, p})
		}
		return nil
	})
	return out, err
}
