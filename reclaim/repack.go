package reclaim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// repackJob is one selection: sources rewritten into one output.
type repackJob struct {
	srcs []counterEntry
	live int64 // live frame bytes of the sources (per their counters)
	dead int64 // object bytes the sources hold beyond their live frames
}

func (j *repackJob) add(c counterEntry) {
	j.srcs = append(j.srcs, c)
	j.live += c.live
	j.dead += c.size - c.live
}

// worthIt is the selection rule: free at least MinSelection, or combine
// several sources holding at least MinSelection live (never rewrite one
// tiny segment into another).
func (j *repackJob) worthIt() bool {
	return j.dead >= MinSelection || (len(j.srcs) >= 2 && j.live >= MinSelection)
}

func deadShare(c counterEntry) float64 {
	if c.total <= 0 {
		return 0
	}
	return float64(c.total-c.live) / float64(c.total)
}

// selectJobs orders the candidates most fragmented first and packs them
// into jobs of about JobBudget live bytes (a job's first source may exceed
// it). Jobs that fail the selection rule are dropped: their sources wait
// for a later cycle.
func selectJobs(cands []counterEntry, budget int64) []repackJob {
	sort.Slice(cands, func(i, j int) bool {
		a, b := deadShare(cands[i]), deadShare(cands[j])
		if a != b {
			return a > b
		}
		if cands[i].live != cands[j].live {
			return cands[i].live < cands[j].live
		}
		return cands[i].id < cands[j].id
	})
	var jobs []repackJob
	var cur repackJob
	for _, c := range cands {
		if len(cur.srcs) > 0 && cur.live+c.live > budget {
			jobs = append(jobs, cur)
			cur = repackJob{}
		}
		cur.add(c)
	}
	if len(cur.srcs) > 0 {
		jobs = append(jobs, cur)
	}
	kept := jobs[:0]
	for _, j := range jobs {
		if j.worthIt() {
			kept = append(kept, j)
		}
	}
	return kept
}

// repack admits the selected jobs, MaxConcurrentRepacks at a time. A job
// failure, Close, or a cancelled cycle stops new admissions; admitted jobs
// always finish (they run on a context Close does not cancel).
func (r *Reclaimer) repack(ctx context.Context, cands []counterEntry, st *CycleStats) error {
	budget := int64(JobBudget)
	if r.budgetForTests > 0 {
		budget = r.budgetForTests
	}
	jobs := selectJobs(cands, budget)
	if len(jobs) == 0 {
		return nil
	}
	jobCtx := context.WithoutCancel(ctx)
	var (
		g      worker.Group // the admitted jobs
		mu     sync.Mutex
		errs   []error
		failed atomic.Bool
	)
	sem := make(chan struct{}, r.opts.MaxConcurrentRepacks)
	mem := newByteGate(RepackMemory)
	stopped := func() bool { return failed.Load() || r.closed() || ctx.Err() != nil }
	for _, j := range jobs {
		if stopped() {
			break
		}
		sem <- struct{}{}
		mem.take(j.live)
		if stopped() {
			mem.give(j.live)
			<-sem
			break
		}
		g.Go(func() {
			defer func() { <-sem }()
			defer mem.give(j.live)
			js, err := r.runJob(jobCtx, j)
			mu.Lock()
			defer mu.Unlock()
			st.RelocatedFrames += js.moved
			st.RelocatedBytes += js.bytes
			if err != nil {
				failed.Store(true)
				st.RepackFailed++
				errs = append(errs, err)
				return
			}
			st.Repacks++
		})
	}
	g.Wait()
	failpoint.Hit("repack-after-jobs")
	return errors.Join(errs...)
}

// byteGate admits work of n bytes while the admitted total stays within
// max; work larger than max is admitted alone.
type byteGate struct {
	mu   sync.Mutex
	cond *sync.Cond
	max  int64
	used int64
}

func newByteGate(max int64) *byteGate {
	g := &byteGate{max: max}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// take waits until n more bytes fit (or nothing else is admitted).
func (g *byteGate) take(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.used > 0 && g.used+n > g.max {
		g.cond.Wait()
	}
	g.used += n
}

func (g *byteGate) give(n int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.used -= n
	g.cond.Broadcast()
}

type jobStats struct {
	moved int
	bytes int64
}

// fetched is one live frame with its encoded bytes.
type fetched struct {
	lf    liveFrame
	frame []byte
}

// frameRun is a group of live frames of one source fetched with one GET.
type frameRun struct {
	src    uint64
	frames []liveFrame
}

// runJob gathers the live frames of j's sources into one output segment,
// uploads it, and only then repoints the extents that still point at the
// old frames.
func (r *Reclaimer) runJob(ctx context.Context, j repackJob) (jobStats, error) {
	ctx = objstore.WithPurpose(ctx, objstore.PurposeRepackGather)
	var js jobStats
	live := r.live.jobStart(j, r.clk.Now())
	defer r.live.jobEnd(live)
	var runs []frameRun
	for _, src := range j.srcs {
		_, entries, err := r.readDirectory(ctx, src.id, src.size)
		if objstore.IsNotFound(err) {
			r.log.Error("reclaim: repack source with live bytes is missing from the store", "segment", fmt.Sprintf("%016x", src.id), "live", src.live)
			continue
		}
		if err != nil {
			return js, fmt.Errorf("reclaim: repack: %w", err)
		}
		ref, err := r.lookup(src.id, entries)
		if err != nil {
			return js, fmt.Errorf("reclaim: repack: segment %016x: pointer check: %w", src.id, err)
		}
		runs = append(runs, groupRuns(src.id, ref.live)...)
	}
	frames, err := r.fetchRuns(ctx, runs, live)
	if err != nil {
		return js, fmt.Errorf("reclaim: repack: %w", err)
	}
	failpoint.Hit("repack-after-gather")
	if len(frames) == 0 {
		return js, nil // everything died since the scan: the sources are dead now
	}
	sort.Slice(frames, func(a, b int) bool {
		x, y := frames[a].lf.e, frames[b].lf.e
		if x.Ino != y.Ino {
			return x.Ino < y.Ino
		}
		return x.Extent < y.Extent
	})

	out := r.host.NewSegmentID()
	defer r.host.SegmentDone(out)
	r.live.jobUpdate(live, func(j *RepackJob) { j.Output, j.Phase = fmt.Sprintf("%016x", out), "upload" })
	b := segment.NewBuilder(r.opts.Keys, out, segment.CodecNone)
	var total int64
	for _, f := range frames {
		total += int64(len(f.frame))
	}
	// Frames, directory and footer in one allocation: Finish appends in place.
	b.Grow(int(min(total+int64(len(frames))*segment.DirEntrySize+keys.Overhead+segment.FooterSize, MaxOutput)))
	moves := make([]segment.Move, 0, len(frames))
	for _, f := range frames {
		n := int64(b.Frames() + 1)
		if int64(b.Size())+int64(len(f.frame))+n*segment.DirEntrySize+keys.Overhead+segment.FooterSize > MaxOutput {
			break // the rest stays in its source for a later job
		}
		np := b.AddEncoded(f.lf.e.ID(), f.frame, f.lf.e.PlainLen)
		np.Flags = f.lf.cur.Flags
		moves = append(moves, segment.Move{Ino: f.lf.e.Ino, Extent: f.lf.e.Extent, Old: f.lf.cur, New: np})
	}
	frameBytes := int64(b.Size())
	obj := b.Finish()
	failpoint.Hit("repack-before-upload")
	if err := segment.Upload(ctx, r.store, out, obj); err != nil {
		// A counter-less object may remain: the orphan sweep judges it.
		return js, fmt.Errorf("reclaim: repack: %w", err)
	}
	js.bytes = frameBytes
	failpoint.Hit("repack-after-upload")
	r.live.jobUpdate(live, func(j *RepackJob) { j.Phase = "repoint" })
	chunk := r.repointChunk()
	for i := 0; i < len(moves); i += chunk {
		part := moves[i:min(i+chunk, len(moves))]
		fb, sz := int64(0), int64(0)
		if i == 0 {
			fb, sz = frameBytes, int64(len(obj))
		}
		r.meta <- struct{}{}
		n, err := r.host.Repoint(out, fb, sz, part)
		<-r.meta
		if err != nil {
			return js, fmt.Errorf("reclaim: repack: repoint into %016x: %w", out, err)
		}
		// What was cached stays cached at its new place.
		r.host.Relocated(obj, part)
		js.moved += n
		r.live.jobUpdate(live, func(j *RepackJob) { j.Moved = js.moved })
		if i+chunk < len(moves) {
			failpoint.Hit("repack-mid-repoint")
		}
	}
	failpoint.Hit("repack-after-repoint")
	return js, nil
}

func (r *Reclaimer) repointChunk() int {
	if r.chunkForTests > 0 {
		return r.chunkForTests
	}
	return RepointChunk
}

// groupRuns splits one source's live frames (any order) into runs each
// fetched with one ranged GET: gaps up to segread.MaxRunGap are read
// through, and a run stops at MaxRunBytes.
func groupRuns(src uint64, live []liveFrame) []frameRun {
	sort.Slice(live, func(a, b int) bool { return live[a].e.Offset < live[b].e.Offset })
	var runs []frameRun
	var start uint64
	for _, lf := range live {
		if n := len(runs); n > 0 {
			last := runs[n-1].frames[len(runs[n-1].frames)-1]
			prevEnd := uint64(last.e.Offset) + uint64(last.e.Length)
			end := uint64(lf.e.Offset) + uint64(lf.e.Length)
			if uint64(lf.e.Offset)-prevEnd <= segread.MaxRunGap && end-start <= MaxRunBytes {
				runs[n-1].frames = append(runs[n-1].frames, lf)
				continue
			}
		}
		start = uint64(lf.e.Offset)
		runs = append(runs, frameRun{src: src, frames: []liveFrame{lf}})
	}
	return runs
}

// fetchRuns fetches runs, FetchParallel at a time, authenticating every
// frame so a damaged one is never copied.
func (r *Reclaimer) fetchRuns(ctx context.Context, runs []frameRun, live *RepackJob) ([]fetched, error) {
	results := make([][]fetched, len(runs))
	var (
		g        worker.Group
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, FetchParallel)
	for i, run := range runs {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		sem <- struct{}{}
		g.Go(func() {
			defer func() { <-sem }()
			ids := make([]segment.FrameID, len(run.frames))
			ps := make([]segment.Pointer, len(run.frames))
			for k, lf := range run.frames {
				ids[k] = lf.e.ID()
				ps[k] = lf.e.Pointer(run.src)
			}
			res, err := r.rd.Read(ctx, &segread.Request{IDs: ids, Ptrs: ps, Want: segread.Verified})
			bufs := res.Frames
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
			out := make([]fetched, len(bufs))
			var got int64
			for k := range bufs {
				out[k] = fetched{lf: run.frames[k], frame: bufs[k]}
				got += int64(len(bufs[k]))
			}
			r.live.jobUpdate(live, func(j *RepackJob) { j.Gathered += got })
			results[i] = out
		})
	}
	g.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	var all []fetched
	for _, rs := range results {
		all = append(all, rs...)
	}
	return all, nil
}
