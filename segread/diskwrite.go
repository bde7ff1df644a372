package segread

import (
	"bytes"
	"cmp"
	"errors"
	"os"
	"slices"
	"sort"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/segment"
)

// writer is the disk cache's worker: it writes the queued puts (and the
// overflow after each), and on a wake-up (the space watcher's, every
// diskspace.Every) writes the overflow and gives space back if the
// filesystem is short of it. It returns once close has closed q and it has
// written what q held, not on w's context, so that a sync marker or a put
// queued before close is never left behind.
func (c *diskCache) writer(w *worker.Worker) {
	for {
		select {
		case it, ok := <-c.q:
			if !ok {
				c.putOverflow()
				return
			}
			if it.ack != nil {
				c.putOverflow()
				close(it.ack)
			} else {
				c.putRuns(it.runs)
				c.queued.Add(-it.cost)
				it.done()
				c.freed()
			}
			c.putOverflow()
		case <-w.Woken(): // every diskspace.Every
			c.putOverflow()
			c.watch()
		}
	}
}

// putOverflow writes what the overflow holds, oldest first; what is
// admitted meanwhile waits for the next call, so that the queue's puts and
// sync markers are not held up behind a stream of uploads.
func (c *diskCache) putOverflow() {
	c.ovMu.Lock()
	its := c.overflow
	c.overflow = nil
	c.ovMu.Unlock()
	for _, it := range its {
		c.putRuns(it.runs)
		c.ovMu.Lock()
		c.overflowBytes -= it.cost
		c.ovMu.Unlock()
		it.done()
		c.freed()
	}
}

// done tells the owner of the memory a put of runs held that the cache
// no longer reads it.
func (it diskPut) done() {
	if it.release != nil {
		it.release()
	}
}

// putRuns writes runs, each with one write, and takes each out of pend
// once it is written (or left out).
func (c *diskCache) putRuns(runs []diskRun) {
	for k := range runs {
		r := &runs[k]
		c.putRun(r.seg, r.es, r.b)
		c.mu.Lock()
		c.unpendLocked(r)
		c.mu.Unlock()
	}
}

// pendLocked makes the runs of it readable (pend) until the writer has
// written them; enqueue and place call it before they queue it, so that
// the writer never finds a run not yet there.
func (c *diskCache) pendLocked(it diskPut) {
	for k := range it.runs {
		r := &it.runs[k]
		c.pend[r.seg] = append(c.pend[r.seg], r)
	}
}

// unpendLocked takes r out of pend; its bytes are not read after this.
func (c *diskCache) unpendLocked(r *diskRun) {
	rs := c.pend[r.seg]
	if k := slices.Index(rs, r); k >= 0 {
		rs = slices.Delete(rs, k, k+1)
	}
	if len(rs) == 0 {
		delete(c.pend, r.seg)
	} else {
		c.pend[r.seg] = rs
	}
}

// pendFrameLocked returns the queued run that holds the frame p, or nil.
func (c *diskCache) pendFrameLocked(p segment.Pointer) *diskRun {
	for _, r := range c.pend[p.Segment] {
		k, ok := sort.Find(len(r.es), func(k int) int { return cmp.Compare(p.Offset, r.es[k].off) })
		if ok && r.es[k].length == p.Length {
			return r
		}
	}
	return nil
}

// readPendLocked is readSpan's reading of a span that queued runs
// overlap, called with c.mu held, which it releases: their bytes are
// copied out of them, and the rest of the span (frames written before,
// or since present found them queued: a run leaves pend only once
// written) is read from the segment's file; the gaps between frames that
// neither holds are left zero. ok is false when no queued run overlaps
// the span (c.mu still held then).
func (c *diskCache) readPendLocked(seg uint64, off int64, n int, buf []byte) (b []byte, ok bool, err error) {
	type span struct{ from, to int64 } // relative to off
	var have []span
	for _, r := range c.pend[seg] {
		start := int64(r.es[0].off)
		from, to := max(start, off), min(start+int64(len(r.b)), off+int64(n))
		if from >= to {
			continue
		}
		if b == nil {
			if len(buf) < n {
				buf = make([]byte, n)
			}
			b = buf[:n]
		}
		copy(b[from-off:to-off], r.b[from-start:])
		have = append(have, span{from - off, to - off})
	}
	if b == nil {
		return nil, false, nil
	}
	sort.Slice(have, func(i, j int) bool { return have[i].from < have[j].from })
	var f *os.File
	if s := c.segs[seg]; s != nil {
		f, _, err = c.fileLocked(s)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, true, err
	}
	at := int64(0)
	for _, h := range append(have, span{int64(n), int64(n)}) {
		if h.from > at {
			got := []byte(nil)
			if f != nil {
				if got, err = readAt(f, off+at, b[at:h.from]); err != nil {
					// Closed under us (diskOpenFiles), or unreadable:
					// the caller goes to the store.
					return nil, true, errNotCached
				}
			}
			clear(b[at+int64(len(got)) : h.from])
		}
		at = max(at, h.to)
	}
	return b, true, nil
}

// put queues a copy of an encrypted frame for the disk cache without
// waiting.
func (c *diskCache) put(p segment.Pointer, frame []byte) {
	if int64(len(frame)) > c.max || len(frame) != int(p.Length) {
		return
	}
	c.putOwned(p, append([]byte(nil), frame...))
}

// putOwned is put of a frame the cache may keep: the caller neither
// changes nor reuses it.
func (c *diskCache) putOwned(p segment.Pointer, frame []byte) {
	if int64(len(frame)) > c.max || len(frame) != int(p.Length) {
		return
	}
	run := diskRun{seg: p.Segment, es: []diskEntry{{seg: p.Segment, off: p.Offset, length: p.Length}}, b: frame}
	if !c.enqueue(diskPut{runs: []diskRun{run}, cost: int64(len(frame))}) {
		c.skipped.Add(int64(len(frame)))
	}
}

// putSpan queues the frames ps[i], i in g, whose errs[j] is nil, for the
// cache: one put of runs of adjacent frames, each written with one write,
// over span, the sealed bytes of the group from ps[g[0]].Offset on, which
// the cache keeps until it calls release (if set; at once when it leaves
// the frames out). Frame by frame, a fetched 2 MiB run cost the writer 64
// puts of 4 syscalls each, through the page cache, and filled the queue
// by count (diskQueue) at 8 MiB.
//
// The span was fetched from the store for this read: left out, it would
// be fetched again by the next read of it once the memory cache let it
// go. So when neither the queue nor the overflow has room, the read waits
// for the writer to free some, up to diskRoomWait: a cache disk slower
// than the store then slows the reads that fill it instead of making
// them fetch bytes twice (16 random readers of a 512 MiB file fetched
// 1.32x the file when fetched spans were left out at a full queue).
func (c *diskCache) putSpan(ps []segment.Pointer, g []int, errs []error, span []byte, release func()) {
	start := uint64(ps[g[0]].Offset)
	var runs []diskRun
	var frames int64
	for j := 0; j < len(g); {
		if errs[j] != nil || ps[g[j]].End()-start > uint64(len(span)) {
			j++
			continue
		}
		k := j + 1
		for k < len(g) && errs[k] == nil && ps[g[k]].Segment == ps[g[j]].Segment && ps[g[k]].Offset == uint32(ps[g[k-1]].End()) && ps[g[k]].End()-start <= uint64(len(span)) {
			k++
		}
		es := make([]diskEntry, 0, k-j)
		for _, i := range g[j:k] {
			es = append(es, diskEntry{seg: ps[i].Segment, off: ps[i].Offset, length: ps[i].Length})
		}
		a, b := uint64(ps[g[j]].Offset)-start, ps[g[k-1]].End()-start
		runs = append(runs, diskRun{seg: ps[g[j]].Segment, es: es, b: span[a:b:b]})
		frames += int64(b - a)
		j = k
	}
	if len(runs) > 0 && c.placeWaiting(diskPut{runs: runs, cost: int64(len(span)), release: release}) {
		return // the writer calls release
	}
	c.skipped.Add(frames)
	if release != nil {
		release()
	}
}

// admit queues the frames ps of the object obj (as uploaded or as
// repack wrote it) for the disk cache without waiting. The put holds obj
// until its frames are written, and so counts len(obj) against the
// queue's bound, or, when the queue is full, against the overflow's. Frames
// of an object larger than the queue's bound, or taking less than half of
// it (the cached frames of a repack output of up to 1 GiB), are copied out
// instead, so that the object is not held; so are, when the object fits in
// neither whole, as many frames as the room left holds. Frames left out
// are counted (skipped). The caller must not change obj until release
// (if not nil) is called, once the cache no longer reads it: at once when
// it copied or left out the frames, else after writing them.
func (c *diskCache) admit(obj []byte, ps []segment.Pointer, release func()) {
	ok := func(p segment.Pointer) bool {
		return p.Length > 0 && p.End() <= uint64(len(obj)) && int64(p.Length) <= c.max
	}
	var runs []diskRun
	var frames int64
	for i := 0; i < len(ps); {
		if !ok(ps[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(ps) && ok(ps[j]) && ps[j].Segment == ps[i].Segment && ps[j].Offset == uint32(ps[j-1].End()) {
			j++
		}
		es := make([]diskEntry, 0, j-i)
		for _, p := range ps[i:j] {
			es = append(es, diskEntry{seg: p.Segment, off: p.Offset, length: p.Length})
		}
		runs = append(runs, diskRun{seg: ps[i].Segment, es: es, b: obj[ps[i].Offset:ps[j-1].End()]})
		frames += int64(ps[j-1].End() - uint64(ps[i].Offset))
		i = j
	}
	held := int64(len(obj)) <= diskQueueBytes && frames >= int64(len(obj))/2
	var put diskPut
	if held {
		put = diskPut{runs: runs, cost: int64(len(obj)), release: release}
	} else {
		put = copyRuns(runs, diskQueueBytes)
	}
	placed := len(put.runs) > 0 && c.place(put)
	if placed && put.release != nil {
		release = nil // the writer calls it
	}
	if !placed && held {
		put = copyRuns(runs, c.room())
		placed = len(put.runs) > 0 && c.place(put)
	}
	if !placed {
		put.runs = nil
	}
	c.skipped.Add(frames - runBytes(put.runs))
	if release != nil {
		release()
	}
}

// copyRuns copies the frames of runs, in order, up to budget bytes, into a
// put that holds only them.
func copyRuns(runs []diskRun, budget int64) diskPut {
	var put diskPut
	for _, r := range runs {
		room := budget - put.cost
		full := int64(len(r.b)) > room
		if full { // keep the frames of this run that fit, and no more runs
			n, m := 0, int64(0)
			for n < len(r.es) && m+int64(r.es[n].length) <= room {
				m += int64(r.es[n].length)
				n++
			}
			r.es, r.b = r.es[:n], r.b[:m]
		}
		if len(r.es) > 0 {
			r.b = bytes.Clone(r.b)
			put.runs = append(put.runs, r)
			put.cost += int64(len(r.b))
		}
		if full {
			break
		}
	}
	return put
}

// place queues it, or puts it in the overflow when the queue has no room
// for it, and reports whether either took it.
func (c *diskCache) place(it diskPut) bool {
	if c.enqueue(it) {
		return true
	}
	c.mu.Lock()
	c.pendLocked(it)
	c.mu.Unlock()
	// closeMu keeps a put from joining the overflow after close drained it.
	c.closeMu.Lock()
	c.ovMu.Lock()
	ok := !c.closed && c.overflowBytes+it.cost <= diskOverflowBytes
	if ok {
		c.overflow = append(c.overflow, it)
		c.overflowBytes += it.cost
	}
	c.ovMu.Unlock()
	c.closeMu.Unlock()
	if !ok {
		c.unpend(it)
	}
	return ok
}

// placeWaiting is place, waiting up to diskRoomWait for the writer to
// free room when there is none.
func (c *diskCache) placeWaiting(it diskPut) bool {
	if it.cost > max(diskQueueBytes, diskOverflowBytes) {
		return c.place(it) // never fits: do not wait
	}
	var deadline <-chan time.Time
	for {
		room := c.roomSignal() // before trying: a room freed after the try still wakes us
		if c.place(it) {
			return true
		}
		if deadline == nil {
			deadline = c.after(diskRoomWait)
		}
		c.closeMu.Lock()
		closed := c.closed
		c.closeMu.Unlock()
		if closed {
			return false
		}
		select {
		case <-room:
		case <-deadline:
			return false
		}
	}
}

// unpend takes the runs of it, which was not queued, out of pend.
func (c *diskCache) unpend(it diskPut) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range it.runs {
		c.unpendLocked(&it.runs[k])
	}
}

// room is the most that a put could hold and still be placed now.
func (c *diskCache) room() int64 {
	c.ovMu.Lock()
	ov := diskOverflowBytes - c.overflowBytes
	c.ovMu.Unlock()
	return max(0, diskQueueBytes-c.queued.Load(), ov)
}

func runBytes(runs []diskRun) int64 {
	var n int64
	for _, r := range runs {
		n += int64(len(r.b))
	}
	return n
}

// enqueue queues it unless the queue is full (by count, or by the
// it.cost bytes of memory it would hold), and reports whether it did; its
// runs are in pend from just before they are queued until they are
// written.
func (c *diskCache) enqueue(it diskPut) bool {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed || c.queued.Load()+it.cost > diskQueueBytes {
		return false
	}
	c.mu.Lock()
	c.pendLocked(it)
	c.mu.Unlock()
	select {
	case c.q <- it:
		c.queued.Add(it.cost)
		return true
	default:
		c.unpend(it)
		return false
	}
}

// putRun stores the adjacent frames es of segment seg, whose bytes are b
// (writeFrames). Errors only cost a future cache miss, so they are logged
// and otherwise ignored.
func (c *diskCache) putRun(seg uint64, es []diskEntry, b []byte) {
	c.mu.Lock()
	var n int64
	fresh := make([]diskEntry, 0, len(es))
	for _, e := range es {
		if s := c.segs[seg]; s != nil {
			if el, ok := s.frames[e.off]; ok {
				c.lru.MoveToFront(el)
				continue
			}
		}
		fresh = append(fresh, e)
		n += int64(e.length)
	}
	if len(fresh) == 0 || n > c.max {
		c.mu.Unlock()
		return
	}
	c.evictLocked(n)
	if !c.roomLocked(int64(len(b))+4096, false) {
		c.mu.Unlock()
		return
	}
	write := c.writeFrames
	c.mu.Unlock()
	data := c.dataPath(seg)
	err := write(data, c.idxPath(seg), int64(es[0].off), b, fresh)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if !c.failing {
			c.failing = true
			c.log.Warn("segment cache: cannot write frames; reads go to the store until it can (logged once)", "file", data, "err", err)
		}
		if errors.Is(err, syscall.ENOSPC) {
			c.roomLocked(int64(len(b))+4096, true)
		}
		return
	}
	if c.failing {
		c.failing = false
		c.log.Info("segment cache: writing frames again", "dir", c.dir)
	}
	c.evictLocked(n)
	for _, e := range fresh {
		c.insertLocked(e)
	}
}
