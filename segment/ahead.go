package segment

import (
	"context"
	"sync"

	"ebbfs.dev/ebbfs/objstore"
)

// Sealed read-ahead. A sequential reader of a local store has its frames
// decrypted straight into its buffer (ReadRunTo), and their sealed bytes
// are read past the page cache (objstore.ReadSpan), so the kernel no
// longer reads ahead of it. ReadAhead does: it reads a run's sealed span
// into a pooled buffer that the next ReadRunTo of frames inside the span
// decrypts from, waiting for it if it is still being read. Only sealed
// bytes wait here, each decrypted once, by the reader that wants it.
//
// The spans are few and short-lived: a span leaves the table once its
// bytes have all been read, or when newer spans push it out, and its
// buffer goes back to the pool when no reader decrypts from it any more.

// aheadMax bounds the spans held: 12 pooled buffers, 26 MiB, above the
// local read-ahead window (fs, 16 MiB in runs of 2 MiB) of one reader.
const aheadMax = 12

// aheadSpan is the sealed bytes [start, end) of a segment, read ahead.
type aheadSpan struct {
	seg        uint64
	start, end uint64
	done       chan struct{} // closed once data or err is set

	data   []byte // the span, inside buf; nil if the read failed
	buf    []byte
	pooled bool

	// Under aheadTable.mu:
	refs int    // readers decrypting from data
	used uint64 // bytes of it read so far
	gone bool   // out of the table: buf goes back once refs and the read are done
	read bool   // the read has finished
}

// aheadTable is a Reader's spans, oldest first.
type aheadTable struct {
	mu    sync.Mutex
	spans []*aheadSpan
}

// ReadAhead reads the sealed bytes of the run ps (frames adjacent in one
// segment, in offset order) for a ReadRunTo to come, unless a span held
// already covers them. It returns when they are read; errors are left to
// the reader, which then reads the frames itself.
func (r *Reader) ReadAhead(ctx context.Context, ps []Pointer) {
	if len(ps) == 0 || r.checkRun(ps) != nil {
		return
	}
	seg, start, end := ps[0].Segment, uint64(ps[0].Offset), ps[len(ps)-1].End()
	sp := &aheadSpan{seg: seg, start: start, end: end, done: make(chan struct{})}
	t := &r.ahead
	t.mu.Lock()
	for _, s := range t.spans {
		if s.seg == seg && s.start <= start && end <= s.end {
			t.mu.Unlock()
			return
		}
	}
	if len(t.spans) == aheadMax {
		t.dropLocked(0)
	}
	t.spans = append(t.spans, sp)
	t.mu.Unlock()

	n := int(end - start)
	buf, pooled := r.bufs.scratch(n + objstore.SpanSlack)
	r.gets.Add(1)
	data, err := objstore.ReadSpan(ctx, r.store, Key(seg), int64(start), n, buf)
	if err == nil {
		r.fetched.Add(uint64(n))
	} else {
		data = nil
	}
	t.mu.Lock()
	sp.data, sp.buf, sp.pooled, sp.read = data, buf, pooled, true
	close(sp.done)
	if data == nil {
		t.removeLocked(sp)
	}
	t.freeLocked(sp, &r.bufs)
	t.mu.Unlock()
}

// take returns the span that holds the sealed bytes [start, end) of seg,
// read or being read, with a reference to it that release gives back; or
// nil.
func (t *aheadTable) take(seg, start, end uint64) *aheadSpan {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.spans {
		if s.seg == seg && s.start <= start && end <= s.end {
			s.refs++
			return s
		}
	}
	return nil
}

// release gives back take's reference after n bytes of the span were read
// from it (0 if none were). A span whose bytes have all been read leaves
// the table.
func (t *aheadTable) release(sp *aheadSpan, n uint64, bufs *runBufs) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp.refs--
	sp.used += n
	if sp.used >= sp.end-sp.start {
		t.removeLocked(sp)
	}
	t.freeLocked(sp, bufs)
}

// dropLocked takes spans[i] out of the table.
func (t *aheadTable) dropLocked(i int) {
	t.spans[i].gone = true
	t.spans = append(t.spans[:i], t.spans[i+1:]...)
}

// removeLocked takes sp out of the table if it is still there.
func (t *aheadTable) removeLocked(sp *aheadSpan) {
	for i, s := range t.spans {
		if s == sp {
			t.dropLocked(i)
			return
		}
	}
}

// freeLocked gives sp's buffer back to the pool once sp is out of the
// table, read, and unreferenced.
func (t *aheadTable) freeLocked(sp *aheadSpan, bufs *runBufs) {
	if sp.gone && sp.read && sp.refs == 0 && sp.buf != nil {
		if sp.pooled {
			bufs.put(sp.buf)
		}
		sp.buf, sp.data = nil, nil
	}
}

// aheadFrames returns the sealed bytes of the frames ps[i], i in g, from a
// span read ahead, waiting for its read, and a function to call once they
// are decrypted; or nil if no span holds them (or its read failed).
func (r *Reader) aheadFrames(ctx context.Context, ps []Pointer, g []int) ([][]byte, func()) {
	seg, start, end := ps[g[0]].Segment, uint64(ps[g[0]].Offset), ps[g[len(g)-1]].End()
	sp := r.ahead.take(seg, start, end)
	if sp == nil {
		return nil, nil
	}
	select {
	case <-sp.done:
	case <-ctx.Done():
		r.ahead.release(sp, 0, &r.bufs)
		return nil, nil
	}
	if sp.data == nil {
		r.ahead.release(sp, 0, &r.bufs)
		return nil, nil
	}
	frames := make([][]byte, len(g))
	for j, i := range g {
		a := uint64(ps[i].Offset) - sp.start
		b := a + uint64(ps[i].Length)
		frames[j] = sp.data[a:b:b]
	}
	return frames, func() { r.ahead.release(sp, end-start, &r.bufs) }
}
