package fs

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

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
// So for a while after a shrink the replica answers reads past the new end
// with the bytes from before it: the pointers the shrinking journal (and
// any later one in that while) replaced or removed are kept, and the
// extents no journal touched read as they are. Such a read returns the
// file as it was just before the truncation, a state it really had.

// shrinkLife is how long the bytes past a shrink stay readable: far longer
// than an invalidation takes to reach the kernel, far shorter than the
// writer's grace (60 s at least) before it deletes the frames they are in.
const shrinkLife = 10 * time.Second

// shrunk is one file's bytes from before a shrink.
type shrunk struct {
	size  uint64                     // the size before the shrink
	ptrs  map[uint64]segment.Pointer // extents replaced or removed since, as they were
	holes map[uint64]bool            // extents that were holes then, written since
	until time.Duration              // Clock.Mono after which it is dropped
}

type shrinks struct {
	mu sync.Mutex
	m  map[uint64]*shrunk
}

// beforeApply notes, ahead of a journal's application, what it may be
// needed to answer for: the size of every file whose record the journal
// writes, and the current pointer of every extent it writes of those files
// and of files already shrunk. Caller holds e.follow.view.
func (e *Engine) beforeApply(keys [][]byte) (sizes map[uint64]uint64, old map[uint64]map[uint64]*segment.Pointer) {
	e.follow.shrinks.mu.Lock()
	live := map[uint64]bool{}
	now := e.clk.Mono()
	for ino, s := range e.follow.shrinks.m {
		if now > s.until {
			delete(e.follow.shrinks.m, ino)
			continue
		}
		live[ino] = true
	}
	e.follow.shrinks.mu.Unlock()
	sizes = map[uint64]uint64{}
	for _, k := range keys {
		if len(k) == 9 && k[0] == schema.PInode {
			ino := binary.BigEndian.Uint64(k[1:])
			if rec, err := e.getRecord(ino); err == nil {
				sizes[ino] = rec.Size
			}
		}
	}
	old = map[uint64]map[uint64]*segment.Pointer{}
	for _, k := range keys {
		if len(k) < 9 || k[0] != schema.PExtent {
			continue
		}
		ino, idx, err := schema.ParseExtentKey(k)
		if err != nil {
			continue
		}
		if _, ok := sizes[ino]; !ok && !live[ino] {
			continue
		}
		if old[ino] == nil {
			old[ino] = map[uint64]*segment.Pointer{}
		}
		if _, seen := old[ino][idx]; seen {
			continue
		}
		var pp *segment.Pointer
		if p, ok, err := e.pointer(ino, idx); err == nil && ok {
			pp = &p
		}
		old[ino][idx] = pp
	}
	return sizes, old
}

// afterApply keeps the bytes from before each shrink the journal made, and
// adds to the files already shrunk what the journal replaced of them.
// Files with range tombstones are left out (their pointers are masked,
// not removed). Caller holds e.follow.view.
func (e *Engine) afterApply(sizes map[uint64]uint64, old map[uint64]map[uint64]*segment.Pointer) {
	now := e.clk.Mono()
	e.follow.shrinks.mu.Lock()
	defer e.follow.shrinks.mu.Unlock()
	for ino, before := range sizes {
		rec, err := e.getRecord(ino)
		if err != nil || rec.Size >= before || e.ranges.has(ino) {
			continue
		}
		if e.follow.shrinks.m == nil {
			e.follow.shrinks.m = map[uint64]*shrunk{}
		}
		s := e.follow.shrinks.m[ino]
		if s == nil {
			s = &shrunk{ptrs: map[uint64]segment.Pointer{}, holes: map[uint64]bool{}}
			e.follow.shrinks.m[ino] = s
		}
		s.size = max(s.size, before)
		s.until = now + shrinkLife
	}
	for ino, ptrs := range old {
		s := e.follow.shrinks.m[ino]
		if s == nil {
			continue
		}
		for idx, p := range ptrs {
			if _, ok := s.ptrs[idx]; ok || s.holes[idx] {
				continue // the oldest version stays
			}
			if p == nil {
				s.holes[idx] = true
			} else {
				s.ptrs[idx] = *p
			}
		}
	}
}

// dropShrinks forgets every shrink (the replica moved to a newer manifest:
// nothing before it can be told apart any more).
func (e *Engine) dropShrinks() {
	e.follow.shrinks.mu.Lock()
	e.follow.shrinks.m = nil
	e.follow.shrinks.mu.Unlock()
}

// ReadPastShrink reads, on a following replica, the bytes [off,
// off+len(p)) of a file that a journal applied in the last shrinkLife
// made shorter than that, as they were before: the kernel may have asked
// for them under the size it still believed. It returns how many bytes
// it placed (0: nothing to add; the read ends where it ended).
func (e *Engine) ReadPastShrink(ctx context.Context, ino uint64, p []byte, off int64) int {
	if !e.opts.ReadOnly || e.opts.PinManifest != 0 || off < 0 || len(p) == 0 {
		return 0
	}
	e.follow.view.RLock()
	defer e.follow.view.RUnlock()
	e.follow.shrinks.mu.Lock()
	s := e.follow.shrinks.m[ino]
	var size uint64
	var ptrs map[uint64]segment.Pointer
	var holes map[uint64]bool
	if s != nil && e.clk.Mono() <= s.until {
		size, ptrs, holes = s.size, s.ptrs, s.holes
	}
	// The maps are only added to, under the lock; copy what this read
	// needs.
	end := min(uint64(off)+uint64(len(p)), size)
	type ext struct {
		p    segment.Pointer
		hole bool
		kept bool
	}
	var exts []ext
	if uint64(off) < end {
		for idx := uint64(off) / extentSize; idx*extentSize < end; idx++ {
			if sp, ok := ptrs[idx]; ok {
				exts = append(exts, ext{p: sp, kept: true})
			} else {
				exts = append(exts, ext{hole: holes[idx]})
			}
		}
	}
	e.follow.shrinks.mu.Unlock()
	if len(exts) == 0 || e.ranges.has(ino) {
		return 0
	}
	first := uint64(off) / extentSize
	done := 0
	for i, x := range exts {
		idx := first + uint64(i)
		var data []byte
		if !x.hole {
			ptr, ok := x.p, x.kept
			if !ok {
				var err error
				if ptr, ok, err = e.pointer(ino, idx); err != nil {
					return done
				}
			}
			if ok {
				var err error
				if data, err = e.rd.Read(ctx, segment.FrameID{Ino: ino, Extent: idx, Gen: ptr.Gen}, ptr); err != nil {
					return done // answered short, as without this
				}
			}
		}
		start := int64(idx) * extentSize
		lo, hi := max(start, off), min(start+extentSize, int64(end))
		dst := p[lo-off : hi-off]
		var src []byte
		if a := lo - start; a < int64(len(data)) {
			src = data[a:min(int64(len(data)), hi-start)]
		}
		clear(dst[copy(dst, src):])
		done = int(hi - off)
	}
	if done > 0 {
		e.follow.pastShrink.Add(1)
		e.log.Debug("replica: a read past a recent truncation got the bytes from before it", "ino", ino, "off", off, "len", done)
	}
	return done
}
