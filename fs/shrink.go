package fs

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// A replica's reads past a recent shrink.
//
// The kernel caches a file's size and pages; when a followed journal
// shrinks a file, the replica tells the kernel from a worker of its own
// (fs/fuse/notify.go), a moment later. A read the kernel issues in between
// still believes the old size. If the replica answers it short (the new
// end of file), the kernel zero-fills the rest of the pages, and if the
// invalidation arrives while that read is in flight it keeps the old size
// too: the application then reads zeroes up to the old size, bytes the
// file never held.
//
// So before it applies a journal the replica takes a snapshot of its
// metadata, and keeps it for shrinkLife when the journal made a file
// shorter. A read past the new end is answered from the newest such
// snapshot in which the file reached as far as the read asks: the file
// exactly as it was just before one of its recent shrinks, a state it
// really had. (Mixing extents from different moments could not promise
// that: an extent that was a hole in one and data in another reads as
// zeroes.)

// shrinkLife is how long the bytes past a shrink stay readable: far longer
// than an invalidation takes to reach the kernel, far shorter than the
// writer's grace (60 s at least) before it deletes the frames they are in.
const shrinkLife = 10 * time.Second

// shrinkView is the metadata from before one journal that shrank files.
type shrinkView struct {
	snap  *lsm.Snapshot
	sizes map[uint64]uint64 // the files it shrank: their size before
	until time.Duration     // Clock.Mono after which it is dropped
}

type shrinks struct {
	mu    sync.Mutex
	views []*shrinkView // oldest first
}

// beforeApply notes, ahead of a journal's application, the size of every
// file whose record the journal writes, and takes a snapshot of the state
// it changes (nil if that fails: no bytes past a shrink then). Caller
// holds e.follow.view for writing.
func (e *Engine) beforeApply(keys [][]byte) (sizes map[uint64]uint64, snap *lsm.Snapshot) {
	e.expireShrinks()
	sizes = map[uint64]uint64{}
	for _, k := range keys {
		if len(k) == 9 && k[0] == schema.PInode {
			ino := binary.BigEndian.Uint64(k[1:])
			if rec, err := e.getRecord(ino); err == nil {
				sizes[ino] = rec.Size
			}
		}
	}
	if len(sizes) == 0 {
		return nil, nil // no file record changes: nothing can shrink
	}
	snap, err := e.db.NewSnapshot()
	if err != nil {
		e.log.Debug("replica: no snapshot before a journal", "err", err)
		return nil, nil
	}
	return sizes, snap
}

// afterApply keeps snap if the journal made any file shorter (and that
// file has no range tombstone, whose masked pointers a snapshot does not
// tell apart), and releases it otherwise. Caller holds e.follow.view for
// writing.
func (e *Engine) afterApply(sizes map[uint64]uint64, snap *lsm.Snapshot) {
	if snap == nil {
		return
	}
	shrunk := map[uint64]uint64{}
	for ino, before := range sizes {
		rec, err := e.getRecord(ino)
		if err == nil && rec.Size < before && !e.ranges.has(ino) {
			shrunk[ino] = before
		}
	}
	if len(shrunk) == 0 {
		snap.Close()
		return
	}
	e.follow.shrinks.mu.Lock()
	e.follow.shrinks.views = append(e.follow.shrinks.views, &shrinkView{snap: snap, sizes: shrunk, until: e.clk.Mono() + shrinkLife})
	e.follow.shrinks.mu.Unlock()
}

// expireShrinks releases the views older than shrinkLife. Caller holds
// e.follow.view for writing (no read uses a view it releases).
func (e *Engine) expireShrinks() {
	now := e.clk.Mono()
	e.follow.shrinks.mu.Lock()
	defer e.follow.shrinks.mu.Unlock()
	k := 0
	for k < len(e.follow.shrinks.views) && now > e.follow.shrinks.views[k].until {
		e.follow.shrinks.views[k].snap.Close()
		k++
	}
	e.follow.shrinks.views = e.follow.shrinks.views[k:]
}

// dropShrinks forgets every shrink (the replica moved to a newer manifest:
// the snapshots were of the state it replaced).
func (e *Engine) dropShrinks() {
	e.follow.view.Lock()
	defer e.follow.view.Unlock()
	e.follow.shrinks.mu.Lock()
	defer e.follow.shrinks.mu.Unlock()
	for _, v := range e.follow.shrinks.views {
		v.snap.Close()
	}
	e.follow.shrinks.views = nil
}

// ReadPastShrink reads, on a following replica, the bytes [off,
// off+len(p)) of a file that a journal applied in the last shrinkLife
// made shorter than that, as they were just before the newest such
// shrink whose old size covers them all (else the one that reached
// furthest): the kernel may have asked for them under the size it still
// believed. It returns how many bytes it placed (0: nothing to add; the
// read ends where it ended).
func (e *Engine) ReadPastShrink(ctx context.Context, ino uint64, p []byte, off int64) int {
	if !e.ro.Load() || e.opts.PinManifest != 0 || off < 0 || len(p) == 0 {
		return 0
	}
	e.follow.view.RLock()
	defer e.follow.view.RUnlock()
	now := e.clk.Mono()
	var v *shrinkView
	var size uint64
	// The newest state that covers the whole request: the kernel asks
	// under a size some state had, and a newer, shorter one would leave
	// the rest to be zero-filled. Failing that, the longest one.
	want := uint64(off) + uint64(len(p))
	e.follow.shrinks.mu.Lock()
	for i := len(e.follow.shrinks.views) - 1; i >= 0; i-- {
		x := e.follow.shrinks.views[i]
		s, ok := x.sizes[ino]
		if !ok || now > x.until || s <= uint64(off) {
			continue
		}
		if s >= want {
			v, size = x, s
			break
		}
		if s > size {
			v, size = x, s
		}
	}
	e.follow.shrinks.mu.Unlock()
	if v == nil || e.ranges.has(ino) {
		return 0
	}
	end := min(uint64(off)+uint64(len(p)), size)
	p = p[:end-uint64(off)]
	n, err := e.readSnapshot(ctx, v.snap, ino, p, off)
	if err != nil {
		e.log.Debug("replica: bytes past a recent truncation unreadable", "ino", ino, "off", off, "len", len(p), "err", err)
	}
	if n > 0 {
		e.follow.pastShrink.Add(1)
		e.log.Debug("replica: a read past a recent truncation got the bytes from before it", "ino", ino, "off", off, "len", n)
	}
	return n
}

// readSnapshot fills p from off with ino's committed bytes in snap, extent
// by extent; it returns how many bytes from the start of p it placed
// before an error.
func (e *Engine) readSnapshot(ctx context.Context, snap *lsm.Snapshot, ino uint64, p []byte, off int64) (int, error) {
	v, ok, err := snap.Get(schema.InodeKey(ino))
	if err != nil || !ok {
		return 0, err
	}
	rec, err := schema.UnmarshalInode(v)
	if err != nil {
		return 0, fmt.Errorf("fs: inode %d: %w", ino, err)
	}
	es := int64(1) << rec.Shift()
	first := uint64(off / es)
	last := uint64((off + int64(len(p)) - 1) / es)
	lo, hi := schema.ExtentRange(ino, first, last+1)
	ptrs := map[uint64]segment.Extent{}
	err = snap.Scan(lo, hi, func(k, v []byte) error {
		_, idx, err := schema.ParseExtentKey(k)
		if err != nil {
			return fmt.Errorf("fs: extent key %x: %w", k, err)
		}
		x, err := segment.UnmarshalExtent(v)
		if err != nil {
			return fmt.Errorf("fs: extent %d/%d: %w", ino, idx, err)
		}
		ptrs[idx] = x
		return nil
	})
	if err != nil {
		return 0, err
	}
	done := 0
	for idx := first; idx <= last; idx++ {
		var data []byte
		if x, ok := ptrs[idx]; ok {
			if data, err = e.readExtent(ctx, ino, idx, x); err != nil {
				return done, err
			}
		}
		start := int64(idx) * es
		lo, hi := max(start, off), min(start+es, off+int64(len(p)))
		dst := p[lo-off : hi-off]
		var src []byte
		if a := lo - start; a < int64(len(data)) {
			src = data[a:min(int64(len(data)), hi-start)]
		}
		clear(dst[copy(dst, src):])
		done = int(hi - off)
	}
	return done, nil
}
