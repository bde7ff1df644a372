package fs

import (
	"sync"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// Open files of the state a restore replaced read ESTALE: an inode the
// restore removed is stale for every handle (inode.stale: reads and writes
// fail with ErrStale). An inode in both states keeps its number (its
// frames' AAD names it), so the engine cannot tell its old handles from
// new ones; fs/fuse takes RestoreMark at open and asks StaleSince before
// each read, write, truncate, fallocate and seek through a handle, and
// refuses one opened before a restore that changed the inode. An inode
// the restore did not change (the same record and bytes in both states)
// is a file of both states, and its handles go on. Only inodes open when
// a restore changed them are remembered.

// RestoreMarkKey is written by every restore batch (the restore's
// number): a replica that applies a journal holding it knows the inodes
// that journal changed were changed by a restore.
var RestoreMarkKey = []byte{schema.PFsSystem, 'r', 's', 't'}

type restoreMarks struct {
	mu sync.Mutex
	n  uint64            // restores applied by this process
	at map[uint64]uint64 // open inode -> the restore that changed it
}

// RestoreMark is the number of restores this process has applied so far.
func (e *Engine) RestoreMark() uint64 {
	e.marks.mu.Lock()
	defer e.marks.mu.Unlock()
	return e.marks.n
}

// StaleSince reports whether a restore after mark changed ino: a handle
// opened at mark belongs to the replaced state.
func (e *Engine) StaleSince(ino, mark uint64) bool {
	e.marks.mu.Lock()
	defer e.marks.mu.Unlock()
	return e.marks.at[ino] > mark
}

// markRestored records a restore that changed the inodes in changed, for
// those open now. Caller holds e.ns.
func (e *Engine) markRestored(changed map[uint64]bool) {
	e.marks.mu.Lock()
	defer e.marks.mu.Unlock()
	e.marks.n++
	for ino, n := range e.ns.inodes {
		if changed[ino] && n.open > 0 {
			if e.marks.at == nil {
				e.marks.at = map[uint64]uint64{}
			}
			e.marks.at[ino] = e.marks.n
		}
	}
}
