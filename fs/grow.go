package fs

import (
	"context"

	"ebbfs.dev/ebbfs/segment"
)

// zeroPastEnd makes sure the bytes of the file's last extent past its end
// read as zeroes before the file grows over them to newEnd (a write or a
// truncation past the end, fallocate). In memory they are zeroes already,
// but after a crash the store can hold the bytes from before a truncation
// there: the truncation's new size reaches the store in a barrier whose
// data flush ran before the truncation zeroed the tail in memory for the
// next flush (truncate.go), and the crash comes before that flush. Such a
// tail is zeroed into a dirty extent, which the next flush writes; a tail
// that is zero already, a hole, or an extent held in memory is left as it
// is (a dirty one is cleared in place).
//
// As in zeroRange, the committed bytes are read without the inode lock,
// and the change is made only if nothing moved meanwhile.
func (e *Engine) zeroPastEnd(ctx context.Context, n *inode, newEnd int64) error {
	for {
		n.mu.RLock()
		size := n.attr.Size
		regular := n.attr.IsRegular()
		es := n.es()
		idx, from := size/es, size%es
		inMem := n.dirty[idx] != nil || n.flushing[idx] != nil
		patch := n.patchInMem(idx)
		below := patch && n.patchesBelow(idx, from)
		var ptr segment.Extent
		var hasPtr bool
		var err error
		if regular && (!inMem || below) {
			ptr, hasPtr, err = e.visibleExtent(n.ino, idx)
		}
		n.mu.RUnlock()
		if err != nil {
			return err
		}
		if !regular || newEnd <= int64(size) || from == 0 || (!inMem && !hasPtr) || (below && !hasPtr) {
			return nil // not growing, no partial last extent, or a hole
		}
		if below {
			// Patches in memory below the end (an append's, patch.go):
			// the bytes past the end are the committed value's. Zeroes
			// (as nearly always) are left so; otherwise commit the
			// patches and look again.
			var data []byte
			err = e.storeRead(ctx, "read extent", func() error {
				var err error
				data, err = e.readExtent(ctx, n.ino, idx, ptr)
				return err
			})
			if err != nil || zeroFrom(data, from) {
				return err
			}
		}
		if patch {
			// The buffer holds part of the extent: commit it, then look
			// again (patch.go).
			if err := e.Seal(ctx); err != nil {
				return err
			}
			continue
		}
		var data []byte
		if hasPtr {
			err = e.storeRead(ctx, "read extent", func() error {
				var err error
				data, err = e.readExtent(ctx, n.ino, idx, ptr)
				return err
			})
			if err != nil {
				return err
			}
			if zeroFrom(data, from) {
				return nil
			}
		}
		done, err := e.zeroPastEndApply(n, size, es, idx, from, inMem, ptr, hasPtr, data)
		if done || err != nil {
			return err
		}
	}
}

// zeroPastEndApply is zeroPastEnd's change, made if the size and the last
// extent are still as zeroPastEnd saw them; otherwise it reports !done.
func (e *Engine) zeroPastEndApply(n *inode, size, es, idx, from uint64, inMem bool, ptr segment.Extent, hasPtr bool, data []byte) (done bool, err error) {
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.deleted {
		return true, nil
	}
	if n.attr.Size != size || n.es() != es || (n.dirty[idx] != nil || n.flushing[idx] != nil) != inMem || n.patchInMem(idx) {
		return false, nil
	}
	if buf := n.dirty[idx]; buf != nil {
		clear(buf[from:])
		return true, nil
	}
	if inMem {
		data = n.flushing[idx].data
		if zeroFrom(data, from) {
			return true, nil
		}
	} else {
		p, ok, err := e.visibleExtent(n.ino, idx)
		if err != nil {
			return true, err
		}
		if ok != hasPtr || !p.Equal(ptr) {
			return false, nil
		}
	}
	buf := getExtentBuf(es)
	n.setSpan(idx, span{})
	clear(buf[copy(buf, data):])
	clear(buf[from:])
	if len(n.res) > 0 {
		n.res = unreserve(n.res, idx, idx+1) // the data takes its place
	}
	n.dirty[idx] = buf
	e.dirtyBytes.Add(int64(es))
	return true, nil
}

// zeroFrom reports whether b holds only zeroes from offset from on.
func zeroFrom(b []byte, from uint64) bool {
	if uint64(len(b)) <= from {
		return true
	}
	for _, c := range b[from:] {
		if c != 0 {
			return false
		}
	}
	return true
}
