package fs

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/segment"
)

// Merge (docs/PATCHES.md): an extent whose value a commit leaves with
// mergePatches patches or more, or patches holding more than half the
// extent, is queued; the merger reads it assembled, without locks, and,
// if nothing wrote it meanwhile, makes it a whole dirty buffer of its
// current bytes. The next flush writes it as one frame and its commit
// replaces the value, debiting every piece, like any whole-extent write.
// A write that comes first wins as any later write does: it writes into
// that buffer, or, once committed, patches the merged frame. A merge
// changes no time of the file.
//
// The bounds are provisional until measured (issue 34, Build 2).
const (
	mergePatches = 8
	// mergeEighths: a value whose patches hold more than this many
	// eighths of the extent is merged too.
	mergeEighths = 8
	// mergeQueueMax bounds the extents waiting; past it, new ones are
	// left for their next patch to queue again.
	mergeQueueMax = 4096
	// mergeIdle: once no write came for this long, the merger folds the
	// patched extents that did not reach the bounds (foldIdle), at most
	// idleQueueMax of them remembered, in file order.
	mergeIdle    = 10 * time.Second
	idleQueueMax = 1 << 16
	// idleBatch is how many extents foldIdle merges before it looks
	// again whether a write came.
	idleBatch = 256
)

// mergeQueue is the extents waiting to be merged.
type mergeQueue struct {
	mu    sync.Mutex
	set   map[extentID]bool
	list  []extentID
	limit int // 0: mergeQueueMax
}

type extentID struct{ ino, idx uint64 }

// add queues an extent; it reports whether it was not queued already.
func (q *mergeQueue) add(x extentID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	limit := q.limit
	if limit == 0 {
		limit = mergeQueueMax
	}
	if q.set[x] || len(q.list) >= limit {
		return false
	}
	if q.set == nil {
		q.set = map[extentID]bool{}
	}
	q.set[x] = true
	q.list = append(q.list, x)
	return true
}

// take removes and returns everything queued.
func (q *mergeQueue) take() []extentID {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.list
	q.list, q.set = nil, nil
	return l
}

// wantsMerge reports whether value x of an extent of es bytes has
// gathered enough patches to merge (Options.mergePatches and
// mergeEighths).
func (e *Engine) wantsMerge(x segment.Extent, es uint64) bool {
	var plain uint64
	for _, p := range x.Patches {
		plain += uint64(p.End - p.At)
	}
	return len(x.Patches) >= e.opts.mergePatches || (x.Patched() && plain > es*uint64(e.opts.mergeEighths)/8)
}

// queueMerges queues extents for the merger. Called after the commit
// that left their values wanting it (wantsMerge).
func (e *Engine) queueMerges(xs []extentID) {
	added := false
	for _, x := range xs {
		added = e.merges.add(x) || added
	}
	if w := e.mergeW.Load(); w != nil && added {
		w.Notify()
	}
}

// queueIdle remembers extents that took a patch, for foldIdle.
func (e *Engine) queueIdle(xs []extentID) {
	for _, x := range xs {
		e.idle.add(x)
	}
}

// merger is the merge worker's loop: the queued merges as they come, and
// the idle fold once writes stopped for mergeIdle.
func (e *Engine) merger(w *worker.Worker) {
	ctx := w.Context()
	for w.Wait(mergeIdle) {
		for _, x := range e.merges.take() {
			// Merged buffers count as dirty data: leave the room to
			// the application's writes when they need it.
			if ctx.Err() != nil || e.dirtyBytes.Load() > e.opts.DirtyLimit/2 {
				break
			}
			e.merge(ctx, x, false)
		}
		e.foldIdle(ctx)
	}
}

func (e *Engine) merge(ctx context.Context, x extentID, relayout bool) {
	if err := e.mergeExtent(ctx, x.ino, x.idx, relayout); err != nil && ctx.Err() == nil && !errors.Is(err, ErrNotExist) {
		e.log.Warn("merging the patches of an extent", "ino", x.ino, "extent", x.idx, "err", err)
	}
}

// foldIdle rewrites the extents that took patches (queueIdle), merged
// or not, once no write came for mergeIdle, in file order: so that the
// store holds about the file's bytes once writes stop, not the file and
// its patches, and so that a file rewritten at random lies in order in
// its segments again (the merges made while it was written lie where
// each happened) and reads sequentially as fast as one written so. It
// stops, leaving the rest for the next pause, as soon as a write comes.
func (e *Engine) foldIdle(ctx context.Context) {
	idle := func() bool {
		return ctx.Err() == nil && e.clk.Now().UnixNano()-e.lastWrite.Load() >= int64(mergeIdle) &&
			e.dirtyBytes.Load() <= e.opts.DirtyLimit/2
	}
	if !idle() {
		return
	}
	xs := e.idle.take()
	slices.SortFunc(xs, func(a, b extentID) int {
		return cmp.Or(cmp.Compare(a.ino, b.ino), cmp.Compare(a.idx, b.idx))
	})
	for i, x := range xs {
		if i%idleBatch == 0 && !idle() {
			e.queueIdle(xs[i:]) // for the next idle spell
			return
		}
		e.merge(ctx, x, true)
	}
}

// mergeExtent makes extent idx of ino a whole dirty buffer of its bytes,
// if it is patched (or, relayout, has a value at all: foldIdle) and
// nothing in memory holds it.
func (e *Engine) mergeExtent(ctx context.Context, ino, idx uint64, relayout bool) error {
	n, err := e.acquire(ino)
	if err != nil {
		return err
	}
	defer e.release(n)
	n.mu.RLock()
	x, ok, err := e.visibleExtent(ino, idx)
	busy := n.dirty[idx] != nil || n.flushing[idx] != nil
	n.mu.RUnlock()
	if err != nil || !ok || busy || (!x.Patched() && !relayout) {
		return err
	}
	var data []byte
	err = e.storeRead(ctx, "merge extent", func() error {
		var err error
		data, err = e.readExtent(ctx, ino, idx, x)
		return err
	})
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	es := n.es()
	if n.deleted || n.dirty[idx] != nil || n.flushing[idx] != nil || idx*es >= n.attr.Size {
		return nil // written, truncated or deleted meanwhile
	}
	// The value may only have moved (a repack's repoint, which changes
	// no byte) since it was read; anything else is a write that wins.
	cur, ok, err := e.visibleExtent(ino, idx)
	if err != nil || !ok || !sameBytes(cur, x) {
		return err
	}
	buf := getExtentBuf(es)
	clear(buf[copy(buf, data):])
	n.dirty[idx] = buf
	n.setSpan(idx, span{})
	e.dirtyBytes.Add(int64(es))
	e.opts.Stats.merged()
	failpoint.Hit("merge-after-install")
	return nil
}

// sameBytes reports whether values a and b hold the same bytes: equal
// but for where their frames live (a repack moves them verbatim, keeping
// their generation, length and place in the extent).
func sameBytes(a, b segment.Extent) bool {
	if len(a.Patches) != len(b.Patches) || !sameFrame(a.Base, b.Base) {
		return false
	}
	for i, p := range a.Patches {
		q := b.Patches[i]
		if p.At != q.At || p.End != q.End || !sameFrame(p.Ptr, q.Ptr) {
			return false
		}
	}
	return true
}

func sameFrame(a, b segment.Pointer) bool {
	return a.Gen == b.Gen && a.Length == b.Length && a.PlainLen == b.PlainLen
}
