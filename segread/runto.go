package segread

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/segment"
)

// readRunTo reads the frames ps (of one segment, in offset order) as
// readRun does, but decrypts each into dst[i] (PlainLen bytes) instead of
// a run buffer, and caches nothing: frames the memory cache holds are
// copied from it, the rest are read with one request per run into a
// pooled buffer and decrypted from there. It is for a sequential reader
// (of a local store, or of what a disk cache holds): its bytes go from the
// store's file to the caller's buffer with one copy and the decryption,
// both while they are in the processor's caches, and a stream larger than
// the memory cache does not push out what random readers keep there.
//
// A run of up to decryptAloneMax bytes is decrypted by the calling
// goroutine alone, so that its plaintext is in that core's cache when the
// caller sends it on (a FUSE reply: writev); a larger one on every core.
// With a disk cache, the frames it holds are read from it the same way
// (readDiskTo); the others are read as readRun reads them.
//
// With lend, for a caller that can also send plaintexts
// the reader lends (a FUSE reply from several slices): a frame the memory
// cache holds, or, with a disk cache, one that neither cache holds (read
// from the store into both), is lent as lent[i], readable until loan is
// released, instead of copied into dst[i]; lent[i] is nil for a frame
// decrypted into dst[i]. So a stream of what was fetched ahead into the
// memory cache (behind a remote store, what the disk cache does not hold
// yet) is sent without a copy. The loan it returns (nil on error) holds
// what the frames were read from.
func (r *Reader) readRunTo(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, dst [][]byte, lend bool) (lent [][]byte, loan *Loan, err error) {
	if len(ids) != len(ps) || len(dst) != len(ps) {
		return nil, nil, fmt.Errorf("segment run: %d ids and %d buffers for %d pointers", len(ids), len(dst), len(ps))
	}
	for i, p := range ps {
		if len(dst[i]) != int(p.PlainLen) {
			return nil, nil, fmt.Errorf("segment run: a buffer of %d bytes for a frame of %d", len(dst[i]), p.PlainLen)
		}
	}
	if err := r.checkRun(ps); err != nil {
		return nil, nil, err
	}
	if lend {
		lent = make([][]byte, len(ps))
	}
	loan = &Loan{r: r}
	var want []int
	var hits [][2][]byte // cached plaintext -> its buffer, copied outside the lock
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, nil, errClosed
	}
	for i := range ps {
		var e *memEntry
		if r.mu.mem != nil {
			e = r.mu.mem.entry(ps[i].Segment, ps[i].Offset, ids[i])
		}
		if e == nil || len(e.data) != len(dst[i]) { // a plaintext of another length: not this frame's
			want = append(want, i)
			continue
		}
		r.hold(e.run, loan)
		r.mu.mem.passedBy(e)
		if lend {
			lent[i] = e.data
		} else {
			hits = append(hits, [2][]byte{e.data, dst[i]})
		}
	}
	r.mu.Unlock()
	r.ahead.passed(ps, want, &r.bufs)
	r.memHits.Add(uint64(len(ps) - len(want)))
	for _, h := range hits {
		copy(h[1], h[0])
	}
	workers := 1
	if dstLen(dst, want) > decryptAloneMax {
		workers = runtime.GOMAXPROCS(0)
	}
	if r.disk != nil {
		err = r.readDiskTo(ctx, ids, ps, want, dst, workers, lent, loan)
	} else {
		for _, g := range runGroups(ps, want) {
			if err = r.readGroupTo(ctx, ids, ps, g, dst, workers); err != nil {
				break
			}
		}
	}
	if err != nil {
		loan.Release()
		return nil, nil, err
	}
	return lent, loan, nil
}

// readDiskTo is readRunTo's reading of the frames ps[i], i in want, with
// a disk cache: those it holds are decrypted into dst[i] from it (from
// spans readAhead read out of it, or read here, one request per run),
// caching nothing; the rest, and any it held damaged (dropped from it),
// are read as readRun reads them, from the store into both caches, held
// by loan, and copied (or, with lent, lent as lent[i]). So a stream of
// what the writer uploaded, or of what was read before, costs its reads
// of the cache's files and one decryption, and does not push out of the
// memory cache what partial reads and writes keep there.
func (r *Reader) readDiskTo(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, want []int, dst [][]byte, workers int, lent [][]byte, loan *Loan) error {
	have := r.disk.present(ps, want)
	done := make([]bool, len(ps))
	// Spans are read from the cache's files, not the store: worth waiting
	// for even in a cache-only attempt, whose context is done from the
	// start.
	wait := context.WithoutCancel(ctx)
	for _, g := range runGroups(ps, have) {
		frames, release, err := r.sealedFramesFrom(wait, ps, g, true, func(g []int) ([]byte, [][]byte, bool, error) {
			start, end := ps[g[0]].Offset, ps[g[len(g)-1]].End()
			buf, data, pooled := r.readDiskSpan(ps[g[0]].Segment, int64(start), int(end-uint64(start)))
			if data == nil {
				return nil, nil, false, errNotCached
			}
			return buf, frameSlices(ps, g, uint64(start), data), pooled, nil
		})
		if err != nil {
			continue // unreadable now: from the store
		}
		ok := make([]bool, len(g))
		r.decodeEach(len(g), workers, func(o *keys.Opener, j int) {
			i := g[j]
			ok[j] = r.openTo(o, ids[i], frames[j], dst[i]) == nil
		})
		release()
		n := 0
		for j, i := range g {
			if !ok[j] {
				// A damaged cache entry (or a pointer for another id):
				// drop it; the store has the last word.
				r.diskDamaged(ps[i], "failed authentication")
				continue
			}
			done[i] = true
			n++
		}
		r.diskHits.Add(uint64(n))
	}
	var rest []int
	var restIDs []segment.FrameID
	var restPs []segment.Pointer
	for _, i := range want {
		if !done[i] {
			rest, restIDs, restPs = append(rest, i), append(restIDs, ids[i]), append(restPs, ps[i])
		}
	}
	if len(restPs) == 0 {
		return nil
	}
	datas, err := r.readRun(ctx, restIDs, restPs, loan)
	if err != nil {
		return err
	}
	for k, i := range rest {
		if lent != nil && len(datas[k]) == len(dst[i]) {
			lent[i] = datas[k]
			continue
		}
		clear(dst[i][copy(dst[i], datas[k]):])
	}
	return nil
}

// decryptAloneMax is the most plaintext readRunTo decrypts on the
// calling goroutine alone. A FUSE read (at most 1 MiB) is below it: the
// kernel keeps a sequential reader's next request in flight, which the
// other core serves meanwhile, and the reply is copied out of the cache
// of the core that decrypted it. Spreading each request over both cores
// of a 2-core machine lowered the cold read's throughput (the figure:
// bench/README.md, "Figures behind the code's constants").
var decryptAloneMax = 2 << 20

// dstLen sums the lengths of dst[i], i in want.
func dstLen(dst [][]byte, want []int) int {
	n := 0
	for _, i := range want {
		n += len(dst[i])
	}
	return n
}

// readGroupTo reads the frames ps[i], i in g, with one request and
// decrypts each into dst[i], on up to workers goroutines, for readRunTo.
func (r *Reader) readGroupTo(ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, g []int, dst [][]byte, workers int) error {
	frames, done, err := r.sealedFrames(ctx, ps, g, true)
	if err != nil {
		return err
	}
	defer done()
	errs := make([]error, len(g))
	r.decodeEach(len(g), workers, func(o *keys.Opener, j int) {
		i := g[j]
		if err := r.openTo(o, ids[i], frames[j], dst[i]); err != nil {
			errs[j] = r.reportCorrupt(ps[i], "", err)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.misses.Add(uint64(len(g)))
	return nil
}

// diskDamaged drops the disk cache's entry of the frame p, which failed
// authentication, and counts it as damaged if there was one. There may be
// none: an entry evicted (or a queued frame the writer gave up on) after
// present found it was read as a hole, which is a plain miss.
func (r *Reader) diskDamaged(p segment.Pointer, why string) {
	if r.disk.drop(p, why) {
		r.diskCorrupt.Add(1)
	}
}

// readDiskRuns reads the frames ps[i], i in want, that the disk cache
// holds: each run of them with one read of its span, authenticated and
// decrypted on every core (openRun), then cached in memory as one run (as
// acceptRun does with a GET). It fills out and returns the indexes still
// wanted: frames the cache lacks, could not read, or held damaged (those
// are dropped from it).
func (r *Reader) readDiskRuns(ids []segment.FrameID, ps []segment.Pointer, want []int, out [][]byte, loan *Loan) []int {
	have := r.disk.present(ps, want)
	if len(have) == 0 {
		return want
	}
	done := make([]bool, len(ps))
	for _, g := range runGroups(ps, have) {
		start, end := int64(ps[g[0]].Offset), int64(ps[g[len(g)-1]].End())
		// The sealed span goes into a scratch buffer (read past the page
		// cache), given back once its frames are opened into the run's
		// own buffer.
		scratch, pooled := r.bufs.scratch(int(end-start) + directio.Slack)
		buf, err := r.disk.readSpan(ps[g[0]].Segment, start, int(end-start), scratch)
		if err != nil {
			if pooled {
				r.bufs.putScratch(scratch)
			}
			if !errors.Is(err, errNotCached) {
				for _, i := range g {
					r.disk.drop(ps[i], "unreadable: "+err.Error())
				}
			}
			continue
		}
		// Frames past a short read are damaged: cut them short, so that
		// openRun finds them so.
		frames := make([][]byte, len(g))
		for j, i := range g {
			a, b := min(int64(ps[i].Offset)-start, int64(len(buf))), min(int64(ps[i].End())-start, int64(len(buf)))
			frames[j] = buf[a:b:b]
		}
		run, plains, held, errs := r.openRun(ids, ps, g, frames)
		if pooled {
			r.bufs.putScratch(scratch)
		}
		n := 0
		for j, i := range g {
			if errs[j] != nil {
				// A damaged cache entry (or a pointer for another id):
				// drop it; the store has the last word.
				r.diskDamaged(ps[i], errs[j].Error())
				continue
			}
			out[i], done[i] = plains[j], true
			n++
		}
		r.diskHits.Add(uint64(n))
		if n == 0 {
			if run.buf != nil {
				r.bufs.put(run.buf)
			}
			continue
		}
		r.mu.Lock()
		r.cacheRun(run, ids, ps, g, plains, held, loan)
		r.mu.Unlock()
	}
	rest := want[:0:0]
	for _, i := range want {
		if !done[i] {
			rest = append(rest, i)
		}
	}
	return rest
}
