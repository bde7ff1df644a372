package fs

import (
	"cmp"
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

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
	if orphan && !e.ro.Load() && !e.closed.Load() {
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

// extentPointer is the committed value of one extent: its frame p, or,
// for a patched value, x (p is then zero).
type extentPointer struct {
	idx uint64
	p   segment.Pointer
	x   *segment.Extent
}

// extentPointerOf is the extentPointer of value x of extent idx.
func extentPointerOf(idx uint64, x segment.Extent) extentPointer {
	if x.Patched() {
		return extentPointer{idx: idx, x: &x}
	}
	return extentPointer{idx: idx, p: x.Base}
}

// value is the extent's committed value.
func (ep extentPointer) value() segment.Extent {
	if ep.x != nil {
		return *ep.x
	}
	return segment.BaseOnly(ep.p)
}

// A sequential read of the writer looks up the pointers of the next
// streamWindow bytes of its file at once and keeps them with the inode
// (pointerWindow): the requests after it, 1 MiB each from the kernel,
// find theirs there instead of each setting up a Pebble iterator. The window holds while the metadata has not
// changed since it was read (lsm.DB.Changes): any commit, of any file,
// makes the next request read its pointers again.
const streamWindow = 8 << 20

// pointerWindow is the committed pointers of extents [from, to) of an
// inode, as the metadata held them at change count seen.
type pointerWindow struct {
	ino      uint64 // in ptrWindows
	from, to uint64
	seen     uint64
	ptrs     []extentPointer
}

// committedIn is pointersIn for a read of extents [from, to) of n, which
// holds n.mu: from n's pointer window where it covers them and still
// holds, or, for a sequential read (stream) of the writer, from a new
// window from from on; a random read's from a random window (randomIn).
func (e *Engine) committedIn(n *inode, from, to uint64, stream bool) ([]extentPointer, error) {
	if e.ro.Load() || e.ranges.has(n.ino) {
		return e.pointersIn(n.ino, from, to)
	}
	seen := e.db.Changes()
	if w := n.ptrWin.Load(); w != nil && w.seen == seen && w.from <= from && to <= w.to {
		return within(w.ptrs, from, to), nil
	}
	if !stream {
		return e.randomIn(n, from, to, seen)
	}
	end := max(to, min(from+streamWindow>>n.shift, (n.attr.Size+n.es()-1)>>n.shift))
	committedScans.Add(1)
	ptrs, err := e.pointersIn(n.ino, from, end)
	if err != nil {
		return nil, err
	}
	n.ptrWin.Store(&pointerWindow{from: from, to: end, seen: seen, ptrs: ptrs})
	return within(ptrs, from, to), nil
}

// committedScans counts the lookups in Pebble committedIn made, not
// finding the pointers in a window (for tests).
var committedScans atomic.Int64

// Random reads of the writer find their pointers in windows too: the
// pointers of an aligned randomWindow of a file, read in one scan and
// kept, in an LRU shared by all files that holds at most randomPointers
// pointers (ptrWindows, 3.5 MiB; about 2,000 windows of a file of 32 KiB
// extents, 255 of one of 4 KiB extents), while the metadata has not
// changed. A point lookup in Pebble per read was a large share of the
// writer's CPU on cold 4 KiB random reads; a scan of a window costs about
// six of them, and 4 KiB reads over a 1 GiB file come back to a window 20
// times in 20,000 (bench/README.md). A
// window is read at the second random read that misses it with no commit
// in between (ptrWindows.ghosts): reads spread too thin to come back, and
// a file being written meanwhile, whose windows every commit outdates,
// keep their point lookups.
const (
	randomWindow   = 1 << 20
	randomPointers = 65536
	randomGhosts   = 4096
)

// ptrWindows is the writer's LRU of random-read pointer windows.
type ptrWindows struct {
	mu   sync.Mutex
	ptrs int // pointers held, and one per window (pointerWindow.cost)
	lru  list.List
	m    map[[2]uint64]*list.Element // (ino, first extent): *pointerWindow
	// ghosts holds the windows a random read missed, with the change
	// count then; cleared when it reaches randomGhosts.
	ghosts map[[2]uint64]uint64
}

// lookup returns the window of ino from extent from on, as the metadata
// held it at change count seen, or nil.
func (w *ptrWindows) lookup(ino, from, seen uint64) *pointerWindow {
	w.mu.Lock()
	defer w.mu.Unlock()
	el := w.m[[2]uint64{ino, from}]
	if el == nil {
		return nil
	}
	pw := el.Value.(*pointerWindow)
	if pw.seen != seen {
		w.dropLocked(el)
		return nil
	}
	w.lru.MoveToFront(el)
	return pw
}

// admit reports whether the window of ino from extent from may be read
// now (seen is the change count now): whether a random read missed it
// before, with no commit since. It records this miss otherwise.
func (w *ptrWindows) admit(ino, from, seen uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]uint64{ino, from}
	if s, ok := w.ghosts[k]; ok && s == seen {
		delete(w.ghosts, k)
		return true
	}
	if w.ghosts == nil {
		w.ghosts = map[[2]uint64]uint64{}
	} else if len(w.ghosts) >= randomGhosts {
		clear(w.ghosts)
	}
	w.ghosts[k] = seen
	return false
}

// store keeps pw, dropping the least recently used windows while more
// than randomPointers pointers are held.
func (w *ptrWindows) store(pw *pointerWindow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[[2]uint64]*list.Element{}
	}
	k := [2]uint64{pw.ino, pw.from}
	if el := w.m[k]; el != nil {
		w.dropLocked(el)
	}
	w.m[k] = w.lru.PushFront(pw)
	w.ptrs += pw.cost()
	for w.ptrs > randomPointers {
		w.dropLocked(w.lru.Back())
	}
}

func (w *ptrWindows) dropLocked(el *list.Element) {
	pw := el.Value.(*pointerWindow)
	w.lru.Remove(el)
	delete(w.m, [2]uint64{pw.ino, pw.from})
	w.ptrs -= pw.cost()
}

// cost is what a window counts against randomPointers: its pointers,
// a patched value's patches as one pointer each, and one more, so that
// windows over holes (none) are bounded too.
func (pw *pointerWindow) cost() int {
	n := len(pw.ptrs) + 1
	for _, p := range pw.ptrs {
		if p.x != nil {
			n += len(p.x.Patches)
		}
	}
	return n
}

// randomIn is committedIn for a random read of extents [from, to) of n
// that found no window of its own: from the aligned randomWindow that
// holds them, if that is kept or may be read now, else from Pebble.
func (e *Engine) randomIn(n *inode, from, to, seen uint64) ([]extentPointer, error) {
	k := uint64(randomWindow) >> n.shift
	start := from &^ (k - 1)
	if k >= 2 && to <= start+k {
		if w := e.wins.lookup(n.ino, start, seen); w != nil && to <= w.to {
			return within(w.ptrs, from, to), nil
		}
	}
	committedScans.Add(1)
	if k < 2 || to > start+k || !e.wins.admit(n.ino, start, seen) {
		return e.pointersIn(n.ino, from, to)
	}
	end := max(to, min(start+k, (n.attr.Size+n.es()-1)>>n.shift))
	ptrs, err := e.pointersIn(n.ino, start, end)
	if err != nil {
		return nil, err
	}
	e.wins.store(&pointerWindow{ino: n.ino, from: start, to: end, seen: seen, ptrs: ptrs})
	return within(ptrs, from, to), nil
}

// within returns the pointers of ps (in index order) of extents [from, to).
func within(ps []extentPointer, from, to uint64) []extentPointer {
	lo, _ := slices.BinarySearchFunc(ps, from, func(x extentPointer, i uint64) int { return cmp.Compare(x.idx, i) })
	hi, _ := slices.BinarySearchFunc(ps, to, func(x extentPointer, i uint64) int { return cmp.Compare(x.idx, i) })
	return ps[lo:hi:hi]
}

// pointersIn returns the visible committed values (visibleExtent) of
// extents [from, to) of ino in index order, read in one scan rather than
// a lookup per extent.
func (e *Engine) pointersIn(ino, from, to uint64) ([]extentPointer, error) {
	masked := e.ranges.has(ino)
	if to == from+1 {
		// One extent (a small random read): a point lookup costs less
		// than setting up an iterator.
		x, ok, err := e.extentValue(ino, from)
		if err != nil || !ok || masked && e.ranges.dead(ino, from, x.NewestGen()) {
			return nil, err
		}
		return []extentPointer{extentPointerOf(from, x)}, nil
	}
	lo, hi := schema.ExtentRange(ino, from, to)
	// Room for every extent of the range (a stream's read-ahead asks for
	// 768), bounded for sparse files asked about large ranges.
	out := make([]extentPointer, 0, min(to-from, 4096))
	err := e.scan(lo, hi, func(k, v []byte) error {
		_, idx, err := schema.ParseExtentKey(k)
		if err != nil {
			return fmt.Errorf("fs: extent key %x: %w", k, err)
		}
		x, err := segment.UnmarshalExtent(v)
		if err != nil {
			return fmt.Errorf("fs: extent %d/%d: %w", ino, idx, err)
		}
		if !masked || !e.ranges.dead(ino, idx, x.NewestGen()) {
			out = append(out, extentPointerOf(idx, x))
		}
		return nil
	})
	return out, err
}
