package segread

import (
	"context"
	"sync"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// Sealed read-ahead. A sequential reader of a local store has its frames
// decrypted straight into its buffer (readRunTo), and their sealed bytes
// are read past the page cache (objstore.ReadSpan), so the kernel no
// longer reads ahead of it. readAhead does: it reads a run's sealed span
// into a buffer (a pooled one, for runs of up to about 2 MiB) that the
// next reads of frames inside the span decrypt from, waiting for it if it
// is still being read. Only sealed bytes wait here, each decrypted once,
// by the reader that wants it.
//
// The spans are few. A span leaves the table once readers have taken as
// many bytes from it as it holds; one they have not (a reader that
// stopped, read around it, or found the frames in the memory cache) stays
// until the table is full and aheadStale newer read-aheads have been asked
// for since its own, and then makes way for a new one. Its lifetime is so
// counted in read-aheads, not in time: on a busy machine a reader may take
// seconds to reach a span, which must still be there when it does, or its
// frames are read twice. A span's buffer goes back to the pool when no
// reader decrypts from it any more. When the table is full of spans that
// are not stale, a new span is refused rather than one pushed out, as the
// oldest is the one a reader wants next, and the kernel is asked to read
// the run into its page cache instead (objstore.WillNeed), which the reads
// then copy from.

// aheadMax bounds the spans held, at most 53 MiB of buffers: the local
// read-ahead window of one reader (fs, 24 MiB) in runs of 2 MiB, or of
// 1 MiB where segments are that small.
const aheadMax = 24

// aheadStale is how many read-aheads asked for after a span's own make it
// stale, to be pushed out of a full table: twice the table, which the
// spans of live readers (each a window ahead of its reader) do not reach.
const aheadStale = 2 * aheadMax

// aheadSpan is the sealed bytes [start, end) of a segment, read ahead.
type aheadSpan struct {
	seg        uint64
	start, end uint64
	done       chan struct{} // closed once the read has finished

	// Set under aheadTable.mu before done is closed; a reader holding a
	// reference (refs) reads data without the lock after done.
	data   []byte // the span, inside buf; nil if the read failed
	buf    []byte
	pooled bool

	// Under aheadTable.mu:
	refs int    // readers decrypting from data
	used uint64 // bytes taken from it so far
	gone bool   // out of the table: buf goes back once refs and the read are done
	read bool   // the read has finished
	born uint64 // aheadTable.asked when it was asked for
}

// holds reports whether the span covers the frame at p.
func (s *aheadSpan) holds(p segment.Pointer) bool {
	return s.seg == p.Segment && s.start <= uint64(p.Offset) && p.End() <= s.end
}

// aheadTable is a Reader's spans, oldest first.
type aheadTable struct {
	mu    sync.Mutex
	spans []*aheadSpan
	asked uint64 // read-aheads asked for that needed a new span
}

// evictStaleLocked takes the stale spans out of a full table.
func (t *aheadTable) evictStaleLocked(bufs *runBufs) {
	if len(t.spans) < aheadMax {
		return
	}
	for _, s := range append([]*aheadSpan(nil), t.spans...) {
		if t.asked-s.born >= aheadStale {
			t.removeLocked(s)
			t.freeLocked(s, bufs)
		}
	}
}

// readAhead reads the sealed bytes of the run ps (frames adjacent in one
// segment, in offset order) for the reads to come, but not the frames
// that spans held already cover. It returns when they are read; errors
// are left to the readers, which then read the frames themselves. A
// reader with a disk cache reads ahead here only a run that the cache
// holds whole, from the cache (or its queue), and reports whether it
// did: any other is for a Fill request, which fetches it from the store
// into both caches.
func (r *Reader) readAhead(ctx context.Context, ps []segment.Pointer) bool {
	ctx = objstore.TagIfTracing(ctx, objstore.PurposeReadAhead)
	if len(ps) == 0 || r.checkRun(ps) != nil {
		return false
	}
	if r.disk != nil {
		all := make([]int, len(ps))
		for i := range all {
			all[i] = i
		}
		if len(r.disk.present(ps, all)) < len(ps) {
			return false
		}
	}
	t := &r.ahead
	t.mu.Lock()
	// Successive read-aheads of a stream share the extent at their edge.
	for len(ps) > 0 && t.holdsLocked(ps[0]) {
		ps = ps[1:]
	}
	for len(ps) > 0 && t.holdsLocked(ps[len(ps)-1]) {
		ps = ps[:len(ps)-1]
	}
	if len(ps) == 0 {
		t.mu.Unlock()
		return true
	}
	seg, start, end := ps[0].Segment, uint64(ps[0].Offset), ps[len(ps)-1].End()
	t.asked++
	t.evictStaleLocked(&r.bufs)
	if len(t.spans) >= aheadMax {
		t.mu.Unlock()
		if r.disk == nil {
			objstore.WillNeed(r.store, segment.Key(seg), int64(start), int64(end-start))
		}
		return true
	}
	sp := &aheadSpan{seg: seg, start: start, end: end, done: make(chan struct{}), born: t.asked}
	t.spans = append(t.spans, sp)
	t.mu.Unlock()

	var buf, data []byte
	var pooled bool
	if r.disk != nil {
		buf, data, pooled = r.readDiskSpan(seg, int64(start), int(end-start))
	} else {
		buf, data, pooled, _ = r.readSealed(ctx, segment.Key(seg), int64(start), int(end-start), true)
	}
	t.mu.Lock()
	sp.data, sp.buf, sp.pooled, sp.read = data, buf, pooled, true
	close(sp.done)
	if data == nil {
		t.removeLocked(sp)
	}
	t.freeLocked(sp, &r.bufs)
	t.mu.Unlock()
	// A run the disk cache could not give whole after all (evicted, or
	// its file unreadable) is for a Fill request.
	return r.disk == nil || data != nil
}

// readDiskSpan reads the n sealed bytes at off of segment seg from the
// disk cache into a scratch buffer and returns the buffer, the bytes
// (nil if it could not read them all) and whether the buffer is pooled.
func (r *Reader) readDiskSpan(seg uint64, off int64, n int) (buf, data []byte, pooled bool) {
	buf, pooled = r.bufs.scratch(n + directio.Slack)
	data, err := r.disk.readSpan(seg, off, n, buf)
	if err != nil || len(data) < n {
		if pooled {
			r.bufs.putScratch(buf)
		}
		return nil, nil, false
	}
	return buf, data, pooled
}

// take returns the span that holds the frame ps[g[0]], read or being
// read, with a reference to it that release gives back, and how many of
// the frames ps[i], i in g, from the first on it holds. If no span holds
// that frame, it returns nil and how many, from the first on, no span
// holds.
func (t *aheadTable) take(ps []segment.Pointer, g []int) (*aheadSpan, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.spans {
		if s.holds(ps[g[0]]) {
			k := 1
			for k < len(g) && s.holds(ps[g[k]]) {
				k++
			}
			s.refs++
			return s, k
		}
	}
	k := 1
	for k < len(g) && !t.holdsLocked(ps[g[k]]) {
		k++
	}
	return nil, k
}

// holdsLocked reports whether a span in the table covers the frame at p.
func (t *aheadTable) holdsLocked(p segment.Pointer) bool {
	for _, s := range t.spans {
		if s.holds(p) {
			return true
		}
	}
	return false
}

// release gives back take's reference after n bytes of the span were read
// from it (0 if none were). A span that has given as many bytes as it
// holds leaves the table.
func (t *aheadTable) release(sp *aheadSpan, n uint64, bufs *runBufs) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp.refs--
	t.creditLocked(sp, n)
	t.freeLocked(sp, bufs)
}

// creditLocked counts n more bytes taken from sp; a span that has given
// as many bytes as it holds leaves the table.
func (t *aheadTable) creditLocked(sp *aheadSpan, n uint64) {
	sp.used += n
	if sp.used >= sp.end-sp.start {
		t.removeLocked(sp)
	}
}

// passed credits the spans holding the frames ps[i], i not in want (an
// ascending list), which a reader found elsewhere (the memory cache), as
// if it had read them from the spans.
func (t *aheadTable) passed(ps []segment.Pointer, want []int, bufs *runBufs) {
	if len(want) == len(ps) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	w := 0
	for i, p := range ps {
		if w < len(want) && want[w] == i {
			w++
			continue
		}
		for _, s := range t.spans {
			if s.holds(p) {
				t.creditLocked(s, uint64(p.Length))
				t.freeLocked(s, bufs)
				break
			}
		}
	}
}

// removeLocked takes sp out of the table if it is still there.
func (t *aheadTable) removeLocked(sp *aheadSpan) {
	for i, s := range t.spans {
		if s == sp {
			s.gone = true
			t.spans = append(t.spans[:i], t.spans[i+1:]...)
			return
		}
	}
}

// freeLocked gives sp's buffer back to the pool once sp is out of the
// table, read, and unreferenced.
func (t *aheadTable) freeLocked(sp *aheadSpan, bufs *runBufs) {
	if sp.gone && sp.read && sp.refs == 0 && sp.buf != nil {
		if sp.pooled {
			bufs.putScratch(sp.buf)
		}
		sp.buf, sp.data = nil, nil
	}
}

// sealedFrames returns the sealed bytes of the frames ps[i], i in g (a
// group of runGroups), in the order of g: from spans read ahead where they
// hold them (waiting for their reads), the rest read from the store with
// one request per stretch that no span holds (fetchGroup; pool as there).
// done gives back what the frames lie in; call it once they are opened.
//
// A reader with a disk cache reads the store here, never a span: its
// spans hold what the disk cache held (readAhead), which is what a
// caller reading the store wants to get past (an entry found damaged),
// and the frames it returns are the disk cache's to keep (putOwned),
// where a span's buffer goes back to its pool.
func (r *Reader) sealedFrames(ctx context.Context, ps []segment.Pointer, g []int, pool bool) (frames [][]byte, done func(), err error) {
	return r.sealedFramesFrom(ctx, ps, g, r.disk == nil, func(g []int) ([]byte, [][]byte, bool, error) {
		return r.fetchGroup(ctx, ps, g, pool)
	})
}

// sealedFramesFrom is sealedFrames taking frames from spans only with
// fromSpans set, and reading the others with read (one stretch of g at a
// time: its buffer, the frames' bytes in it, and whether the buffer is a
// pooled scratch one).
func (r *Reader) sealedFramesFrom(ctx context.Context, ps []segment.Pointer, g []int, fromSpans bool, read func(g []int) ([]byte, [][]byte, bool, error)) (frames [][]byte, done func(), err error) {
	frames = make([][]byte, len(g))
	var spans []*aheadSpan
	var used []uint64
	var bufs [][]byte
	done = func() {
		for i, sp := range spans {
			r.ahead.release(sp, used[i], &r.bufs)
		}
		for _, b := range bufs {
			r.bufs.putScratch(b)
		}
	}
	for j := 0; j < len(g); {
		sp, k := (*aheadSpan)(nil), len(g)-j
		if fromSpans {
			sp, k = r.ahead.take(ps, g[j:])
		}
		if sp != nil {
			read := false
			select {
			case <-sp.done: // read already (a done ctx must not win a tie)
				read = true
			default:
				select {
				case <-sp.done:
					read = true
				case <-ctx.Done():
				}
			}
			if read && sp.data != nil {
				n := uint64(0)
				for x, i := range g[j : j+k] {
					a := uint64(ps[i].Offset) - sp.start
					b := a + uint64(ps[i].Length)
					frames[j+x] = sp.data[a:b:b]
					n += uint64(ps[i].Length)
				}
				spans, used = append(spans, sp), append(used, n)
				r.aheadHits.Add(uint64(k))
				j += k
				continue
			}
			r.ahead.release(sp, 0, &r.bufs) // failed, or not waited for: read them here
		}
		buf, fetched, pooled, err := read(g[j : j+k])
		if err != nil {
			done()
			return nil, nil, err
		}
		if pooled {
			bufs = append(bufs, buf)
		}
		copy(frames[j:], fetched)
		j += k
	}
	return frames, done, nil
}
