package segread

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// runGroups splits the indices of ps (sorted by offset, one segment) into
// groups each fetched with one GET: a new group starts where the gap to
// the previous wanted frame exceeds MaxRunGap.
func runGroups(ps []segment.Pointer, want []int) [][]int {
	var groups [][]int
	for _, i := range want {
		if n := len(groups); n > 0 {
			last := groups[n-1]
			prevEnd := ps[last[len(last)-1]].End()
			if uint64(ps[i].Offset)-prevEnd <= MaxRunGap {
				groups[n-1] = append(last, i)
				continue
			}
		}
		groups = append(groups, []int{i})
	}
	return groups
}

func (r *Reader) checkRun(ps []segment.Pointer) error {
	for i, p := range ps {
		if err := r.checkPointer(p); err != nil {
			return err
		}
		if p.Segment != ps[0].Segment {
			return fmt.Errorf("segment run: pointer %d is in segment %016x, not %016x", i, p.Segment, ps[0].Segment)
		}
		if i > 0 && uint64(p.Offset) < ps[i-1].End() {
			return fmt.Errorf("segment %s run: pointer %d at %d is not after the previous frame ending at %d", segment.Key(p.Segment), i, p.Offset, ps[i-1].End())
		}
	}
	return nil
}

// fetchGroup GETs the span of one group and returns the buffer, each
// frame's bytes within it, and whether the buffer is a pooled one to give
// back once they are opened: only when pool is set, for a caller that
// does not keep the frames (as a disk cache does).
func (r *Reader) fetchGroup(ctx context.Context, ps []segment.Pointer, g []int, pool bool) ([]byte, [][]byte, bool, error) {
	start, end := uint64(ps[g[0]].Offset), ps[g[len(g)-1]].End()
	key, n := segment.Key(ps[g[0]].Segment), int64(end-start)
	buf, data, pooled, err := r.readSealed(ctx, key, int64(start), int(n), pool)
	if err != nil {
		return nil, nil, false, fmt.Errorf("segment %s: get [%d,+%d): %w", key, start, n, err)
	}
	return buf, frameSlices(ps, g, start, data), pooled, nil
}

// frameSlices returns the bytes of each frame ps[i], i in g, within data,
// the sealed span of the group from offset start on.
func frameSlices(ps []segment.Pointer, g []int, start uint64, data []byte) [][]byte {
	out := make([][]byte, len(g))
	for j, i := range g {
		a, b := uint64(ps[i].Offset)-start, ps[i].End()-start
		out[j] = data[a:b:b]
	}
	return out
}

// openTo authenticates and decrypts frame, sealed for id, into d (its
// PlainLen bytes), as readRunTo does.
func (r *Reader) openTo(o *keys.Opener, id segment.FrameID, frame, d []byte) error {
	out, err := segment.DecodeFrameWith(d[:0:len(d)], r.k, o, id, frame, len(d))
	if err == nil && len(out) > 0 && &out[0] != &d[0] {
		copy(d, out) // decoded elsewhere (cannot happen with PlainLen bytes of room)
	}
	return err
}

// readSealed reads the n bytes of key at off. With scratch set, it reads
// them into a scratch buffer (a pooled one where they fit, for its caller
// to give back) wherever in it suits the store (objstore.ReadSpan: past
// the page cache); otherwise into a buffer of n bytes its caller may keep
// (alignedFor: the disk cache writes it past the page cache). It returns
// the buffer and the slice of it that holds the bytes.
func (r *Reader) readSealed(ctx context.Context, key string, off int64, n int, scratch bool) (buf, data []byte, pooled bool, err error) {
	if err := ctx.Err(); err != nil { // a cache-only attempt: not the store
		return nil, nil, false, err
	}
	r.gets.Add(1)
	ctx = objstore.DefaultIfTracing(ctx, objstore.PurposeReadMiss)
	if scratch {
		buf, pooled = r.bufs.scratch(n + directio.Slack)
		data, err = objstore.ReadSpan(ctx, r.store, key, off, n, buf)
	} else {
		buf = alignedFor(off, n)
		data, err = buf, objstore.ReadRange(ctx, r.store, key, off, buf)
	}
	if err != nil {
		if pooled {
			r.bufs.putScratch(buf)
		}
		return nil, nil, false, err
	}
	r.fetched.Add(uint64(n))
	return buf, data, pooled, nil
}

// alignedFor returns a new buffer of n bytes for the bytes at offset off
// of an object, placed in memory so that the bytes at the object's 4 KiB
// boundaries lie on 4 KiB boundaries of memory: the disk cache, which
// writes them at the same offsets of its file, can then write their whole
// blocks with O_DIRECT (directio.WriteAt) instead of copying them into
// the page cache.
func alignedFor(off int64, n int) []byte {
	raw := make([]byte, n+directio.Align)
	at := int((uintptr(off) - uintptr(unsafe.Pointer(&raw[0]))) & (directio.Align - 1))
	return raw[at : at+n : at+n]
}

// openRun authenticates and decrypts the frames ps[i], i in g, whose
// sealed bytes are frames (in the order of g), on every core, laying
// their plaintexts end to end in one run buffer (a pooled one when they
// fit). It returns the run to cache (not yet cached or held), each
// frame's plaintext (nil where it failed), the memory they hold, and each
// frame's error. frames are left as they were.
func (r *Reader) openRun(ids []segment.FrameID, ps []segment.Pointer, g []int, frames [][]byte) (*memRun, [][]byte, int64, []error) {
	at := make([]int, len(g)+1)
	for j, i := range g {
		at[j+1] = at[j] + int(ps[i].PlainLen)
	}
	buf, pooled := r.bufs.get(at[len(g)])
	run := &memRun{}
	if pooled {
		run.buf = buf
	}
	plains := make([][]byte, len(g))
	errs := make([]error, len(g))
	r.decodeEach(len(g), runtime.GOMAXPROCS(0), func(o *keys.Opener, j int) {
		i := g[j]
		plains[j], errs[j] = segment.DecodeFrameWith(buf[at[j]:at[j]:at[j+1]], r.k, o, ids[i], frames[j], int(ps[i].PlainLen))
	})
	held := int64(cap(buf))
	for j := range g {
		if errs[j] != nil {
			plains[j] = nil
			continue
		}
		if p := plains[j]; len(p) > 0 && &p[0] != &buf[at[j]] {
			held += int64(cap(p)) // decoded outside the buffer: a frame longer than its pointer said
		}
	}
	return run, plains, held, errs
}

// decodeEach calls f(o, j) for j in [0, n) on up to workers goroutines,
// each calling it for consecutive js with one keys.Opener: the frames of
// one nonce prefix (sealed together, Builder.AddFrames) then cost one key
// derivation. With more than one worker, each takes up to sealGroup js at
// a time (segment.SealGroupSize).
func (r *Reader) decodeEach(n, workers int, f func(o *keys.Opener, j int)) {
	chunk := max(n, 1)
	if workers > 1 {
		chunk = segment.SealGroupSize(n, workers)
	}
	segment.ForEachGroup(n, chunk, workers, func(lo, hi int) {
		o := r.k.Data.NewOpener()
		for j := lo; j < hi; j++ {
			f(&o, j)
		}
	})
}

// hold records a caller reading frames of run: until loan is released,
// or for good when loan is nil. Caller holds r.mu.
func (r *Reader) hold(run *memRun, loan *Loan) {
	if loan == nil {
		run.escaped = true
		return
	}
	if k := len(loan.runs); k > 0 && loan.runs[k-1] == run {
		return
	}
	run.refs++
	loan.runs = append(loan.runs, run)
}

// cacheRun caches the frames ps[i], i in g (those with a plaintext), as
// run, held for the caller by loan. Caller holds r.mu.
func (r *Reader) cacheRun(run *memRun, ids []segment.FrameID, ps []segment.Pointer, g []int, plains [][]byte, held int64, loan *Loan) {
	r.hold(run, loan)
	if r.mu.mem == nil {
		return
	}
	var offs []uint32
	var runIDs []segment.FrameID
	var datas [][]byte
	for j, i := range g {
		if plains[j] != nil {
			offs, runIDs, datas = append(offs, ps[i].Offset), append(runIDs, ids[i]), append(datas, plains[j])
		}
	}
	if len(offs) > 0 {
		r.mu.mem.add(ps[g[0]].Segment, run, offs, runIDs, datas, held)
	}
}

// runLeft is the memory cache's note that run has left it: its buffer is
// reused if nothing reads it. Caller holds r.mu.
func (r *Reader) runLeft(run *memRun) {
	if run.reusable() {
		r.bufs.put(run.buf)
		run.buf = nil
	}
}

// acceptRun authenticates and decrypts the frames of one coalesced GET
// (openRun), hands them to the disk cache (span, the GET's bytes, which
// the cache then keeps, calling release, if set, once it no longer reads
// them: one put of runs of adjacent frames), and caches them in memory as
// one run. It returns the plaintexts in the order of g.
func (r *Reader) acceptRun(ids []segment.FrameID, ps []segment.Pointer, g []int, frames [][]byte, span []byte, release func(), loan *Loan) ([][]byte, error) {
	run, plains, held, errs := r.openRun(ids, ps, g, frames)
	for j, i := range g {
		if errs[j] != nil {
			errs[j] = r.reportCorrupt(ps[i], "", errs[j])
		}
	}
	if r.disk != nil { // only authenticated frames are cached
		r.disk.putSpan(ps, g, errs, span, release)
	} else if release != nil {
		release()
	}
	if err := errors.Join(errs...); err != nil {
		if run.buf != nil {
			r.bufs.put(run.buf)
		}
		return nil, err
	}
	r.misses.Add(uint64(len(g)))
	r.mu.Lock()
	r.cacheRun(run, ids, ps, g, plains, held, loan)
	r.mu.Unlock()
	return plains, nil
}

// Loan is the plaintexts a Request with Lend was handed. They may be read until
// Release, and not after: their memory is then used again.
type Loan struct {
	r    *Reader
	runs []*memRun
}

// Release ends the loan. Releasing a nil or released Loan does nothing.
func (l *Loan) Release() {
	if l == nil || l.r == nil {
		return
	}
	r := l.r
	r.mu.Lock()
	for _, run := range l.runs {
		run.refs--
		r.runLeft(run) // reused now if it has left the cache
	}
	r.mu.Unlock()
	l.r, l.runs = nil, nil
}

// readRunLent is readRun for a caller that reads the plaintexts only
// until it releases the loan (as the file system copies them into a
// reply): their buffers can then be used again for other runs, which
// spares a sequential reader clearing new memory for every run.
func (r *Reader) readRunLent(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) ([][]byte, *Loan, error) {
	loan := &Loan{r: r}
	out, err := r.readRun(ctx, ids, ps, loan)
	if err != nil {
		loan.Release()
		return nil, nil, err
	}
	return out, loan, nil
}

// fetch reads the frames as readRun does, into the caches only.
func (r *Reader) fetch(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) error {
	_, loan, err := r.readRunLent(ctx, ids, ps)
	loan.Release()
	return err
}

// readRun: see runPlain (reader.go).
func (r *Reader) readRun(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, loan *Loan) ([][]byte, error) {
	if len(ids) != len(ps) {
		return nil, fmt.Errorf("segment run: %d ids for %d pointers", len(ids), len(ps))
	}
	if err := r.checkRun(ps); err != nil {
		return nil, err
	}
	out := make([][]byte, len(ps))
	var want []int
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, errClosed
	}
	for i := range ps {
		var e *memEntry
		if r.mu.mem != nil {
			e = r.mu.mem.entry(ps[i].Segment, ps[i].Offset, ids[i])
		}
		if e != nil {
			out[i] = e.data
			r.hold(e.run, loan)
			r.memHits.Add(1)
		} else {
			want = append(want, i)
		}
	}
	r.mu.Unlock()
	r.ahead.passed(ps, want, &r.bufs)
	if r.disk != nil && len(want) > 0 {
		want = r.readDiskRuns(ids, ps, want, out, loan)
	}
	if err := r.fetchWanted(ctx, ids, ps, want, out, loan); err != nil {
		return nil, err
	}
	return out, nil
}

// readSealedRun returns the raw (still sealed) frames ps point at, for
// repack to copy verbatim, with one coalesced ranged GET per run (as
// readRun). The caches are neither consulted nor filled, and the frames
// are not authenticated.
func (r *Reader) readSealedRun(ctx context.Context, ps []segment.Pointer) ([][]byte, error) {
	if err := r.checkRun(ps); err != nil {
		return nil, err
	}
	r.mu.Lock()
	closed := r.mu.closed
	r.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	out := make([][]byte, len(ps))
	all := make([]int, len(ps))
	for i := range all {
		all[i] = i
	}
	for _, g := range runGroups(ps, all) {
		_, frames, _, err := r.fetchGroup(ctx, ps, g, false)
		if err != nil {
			return nil, err
		}
		for j, i := range g {
			out[i] = frames[j]
		}
	}
	return out, nil
}

// readVerifiedRun is readSealedRun that also authenticates every frame
// for its id (without decompressing), so repack never copies a damaged
// frame. Failures wrap ErrCorrupt and are logged.
func (r *Reader) readVerifiedRun(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) ([][]byte, error) {
	if len(ids) != len(ps) {
		return nil, fmt.Errorf("segment run: %d ids for %d pointers", len(ids), len(ps))
	}
	out, err := r.readSealedRun(ctx, ps)
	if err != nil {
		return nil, err
	}
	for i, f := range out {
		if err := segment.VerifyFrame(r.k, ids[i], f, int(ps[i].PlainLen)); err != nil {
			return nil, r.reportCorrupt(ps[i], "", err)
		}
	}
	return out, nil
}
