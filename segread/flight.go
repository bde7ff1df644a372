package segread

import (
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// Frames in flight. Each frame fetched from the store into the caches
// (readRun, readFrame) is entered in the reader's flight table, under the
// lock, by the read that fetches it, and leaves it once the fetch has
// cached it (or failed). Another read that wants the frame meanwhile
// (a read-ahead and the read it runs ahead of, a FUSE request and the
// kernel's next one, several random readers of one extent) waits for that
// fetch and then takes the frame from the caches, rather than fetching it
// a second time: a byte is fetched once however the reads interleave and
// however slow the machine is. A read waits once: if the frame is not
// cached when the fetch lands (it failed, or memory pressure pushed the
// frame out of a memory cache that the disk cache does not back), the
// read fetches the frame itself.
//
// A cache-only attempt (a read whose context is done from the start)
// neither waits nor enters a frame: it takes what is cached or read ahead,
// and nothing from the store.

// fetchCall is one fetch from the store that reads of its frames wait on.
type fetchCall struct {
	done chan struct{}
	// frame is readFrame's sealed frame, for waiters that do not find it
	// cached (a reader without a memory cache); nil for a run's fetch.
	frame []byte
	err   error
}

// claimed is a group of frames (indices into a run, fetched with one GET)
// that a read has entered in the flight table as its own, with the call
// its waiters wait on.
type claimed struct {
	g    []int
	call *fetchCall
}

// fetchWanted fetches the frames ps[i], i in want, that no cache holds
// (readRun's), into out and the caches, waiting for fetches in flight of
// the frames they have, and fetching the rest with one GET per group
// (storeGroups).
func (r *Reader) fetchWanted(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, want []int, out [][]byte, loan *Loan) error {
	if ctx.Err() != nil {
		// A cache-only attempt: spans read ahead serve it, the store
		// does not (readSealed).
		return r.fetchGroups(ctx, ids, ps, runGroups(ps, want), out, loan)
	}
	for waited := false; len(want) > 0; waited = true {
		mine, theirs, calls := r.claim(ids, ps, want, out, loan, waited)
		r.waits.Add(uint64(len(theirs)))
		if err := r.fetchClaimed(ctx, ids, ps, mine, out, loan); err != nil {
			return err
		}
		if len(theirs) == 0 {
			return nil
		}
		for _, c := range calls {
			select {
			case <-c.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		want = r.lookAgain(ids, ps, theirs, out, loan)
	}
	return nil
}

// claim sorts the frames ps[i], i in want, under the lock: those the
// memory cache holds by now go into out; those another read is fetching
// are returned in theirs, with the calls to wait for (unless waited: a
// read waits once); the rest are entered as this read's own, in groups
// each fetched with one GET. A frame of another's fetch that this read
// fetches too (after waiting) is not entered again.
func (r *Reader) claim(ids []segment.FrameID, ps []segment.Pointer, want []int, out [][]byte, loan *Loan, waited bool) (mine []claimed, theirs []int, calls []*fetchCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var own []int
	for _, i := range want {
		if r.mu.mem != nil {
			if e := r.mu.mem.entry(ps[i].Segment, ps[i].Offset, ids[i]); e != nil {
				out[i] = e.data
				r.hold(e.run, loan)
				r.memHits.Add(1)
				continue
			}
		}
		if c := r.mu.flight[corruptSite{ps[i].Segment, int64(ps[i].Offset)}]; c != nil && !waited {
			theirs = append(theirs, i)
			if len(calls) == 0 || calls[len(calls)-1] != c {
				calls = append(calls, c)
			}
			continue
		}
		own = append(own, i)
	}
	for _, g := range storeGroups(ps, own, theirs) {
		c := &fetchCall{done: make(chan struct{})}
		for _, i := range g {
			site := corruptSite{ps[i].Segment, int64(ps[i].Offset)}
			if _, busy := r.mu.flight[site]; !busy {
				r.mu.flight[site] = c
			}
		}
		mine = append(mine, claimed{g, c})
	}
	return mine, theirs, calls
}

// fetchClaimed fetches the groups claim made this read's own, landing
// each (land) once its frames are cached, or with the error that ends it.
func (r *Reader) fetchClaimed(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, mine []claimed, out [][]byte, loan *Loan) error {
	for k, m := range mine {
		err := r.fetchGroups(ctx, ids, ps, [][]int{m.g}, out, loan)
		r.land(ps, m, err)
		if err != nil {
			for _, rest := range mine[k+1:] {
				r.land(ps, rest, err)
			}
			return err
		}
	}
	return nil
}

// land takes a claimed group's frames out of the flight table and wakes
// the reads waiting for them.
func (r *Reader) land(ps []segment.Pointer, m claimed, err error) {
	r.mu.Lock()
	for _, i := range m.g {
		site := corruptSite{ps[i].Segment, int64(ps[i].Offset)}
		if r.mu.flight[site] == m.call {
			delete(r.mu.flight, site)
		}
	}
	m.call.err = err
	r.mu.Unlock()
	close(m.call.done)
}

// fetchGroups reads the groups (of indices into ps) from spans read ahead
// or the store, one request per group, and caches them (acceptRun).
// Behind a disk cache every group is fetched from the store (see
// sealedFrames).
func (r *Reader) fetchGroups(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, groups [][]int, out [][]byte, loan *Loan) error {
	for _, g := range groups {
		var frames [][]byte
		var span, raw []byte
		done := func() {}
		var err error
		if r.disk != nil {
			// From the store, into a buffer the disk cache keeps
			// (sealedFrames reads no span then).
			span, raw, frames, err = r.fetchKept(ctx, ps, g)
		} else {
			frames, done, err = r.sealedFrames(ctx, ps, g, true)
		}
		if err != nil {
			return err
		}
		var release func()
		if raw != nil {
			release = func() { r.bufs.putKept(raw) }
		}
		plains, err := r.acceptRun(ids, ps, g, frames, span, release, loan)
		done()
		if err != nil {
			return err
		}
		for j, i := range g {
			out[i] = plains[j]
		}
	}
	return nil
}

// fetchKept GETs the span of the group g into a buffer for the disk
// cache to keep (runBufs.keep) and returns the span, the pooled buffer it
// lies in (nil if none), and each frame's bytes within the span.
func (r *Reader) fetchKept(ctx context.Context, ps []segment.Pointer, g []int) (span, raw []byte, frames [][]byte, err error) {
	start, end := uint64(ps[g[0]].Offset), ps[g[len(g)-1]].End()
	key, n := segment.Key(ps[g[0]].Segment), int(end-start)
	if err := ctx.Err(); err != nil { // a cache-only attempt: not the store
		return nil, nil, nil, err
	}
	span, raw = r.bufs.keep(int64(start), n)
	r.gets.Add(1)
	if err := objstore.ReadRange(objstore.DefaultIfTracing(ctx, objstore.PurposeReadMiss), r.store, key, int64(start), span); err != nil {
		r.bufs.putKept(raw)
		return nil, nil, nil, fmt.Errorf("segment %s: get [%d,+%d): %w", key, start, n, err)
	}
	r.fetched.Add(uint64(n))
	return span, raw, frameSlices(ps, g, start, span), nil
}

// lookAgain looks for the frames ps[i], i in want, in the caches after
// the fetches they were in have landed, and returns those still wanted.
func (r *Reader) lookAgain(ids []segment.FrameID, ps []segment.Pointer, want []int, out [][]byte, loan *Loan) []int {
	rest := want[:0:0]
	r.mu.Lock()
	for _, i := range want {
		var e *memEntry
		if r.mu.mem != nil {
			e = r.mu.mem.entry(ps[i].Segment, ps[i].Offset, ids[i])
		}
		if e == nil {
			rest = append(rest, i)
			continue
		}
		out[i] = e.data
		r.hold(e.run, loan)
		r.memHits.Add(1)
	}
	r.mu.Unlock()
	if r.disk != nil && len(rest) > 0 {
		rest = r.readDiskRuns(ids, ps, rest, out, loan)
	}
	return rest
}

// storeGroups splits the indices want of ps (sorted by offset, one
// segment) into groups each fetched from the store with one GET, as
// runGroups does (a gap of up to MaxRunGap is read through: frames of
// other files, or of this run that a cache holds, cost fewer bytes than
// another request), except that a gap holding a frame ps[i], i in busy
// (ascending: frames another read is fetching), ends the group, so that
// no byte of that frame is fetched twice.
func storeGroups(ps []segment.Pointer, want, busy []int) [][]int {
	var groups [][]int
	b := 0
	for _, i := range want {
		if n := len(groups); n > 0 {
			last := groups[n-1]
			prev := last[len(last)-1]
			for b < len(busy) && busy[b] <= prev {
				b++
			}
			between := b < len(busy) && busy[b] < i
			if !between && uint64(ps[i].Offset)-ps[prev].End() <= MaxRunGap {
				groups[n-1] = append(last, i)
				continue
			}
		}
		groups = append(groups, []int{i})
	}
	return groups
}
