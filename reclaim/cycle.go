package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
)

// CycleStats summarises one reclamation cycle (logged at info level).
type CycleStats struct {
	Start    time.Time
	Duration time.Duration
	Cutoff   uint64

	Counters     int // counters scanned
	Dead         int // dead segments seen (below the cutoff)
	NewDeadlines int // dead segments given a deadline this cycle
	Deleted      int // objects deleted
	StaleDropped int // counters dropped because the object was gone
	Repaired     int // under-counted counters repaired
	Kept         int // due segments kept after a read error

	Repacks         int   // repack jobs completed
	RepackFailed    int   // repack jobs failed
	RelocatedFrames int   // pointers moved to repack outputs
	RelocatedBytes  int64 // frame bytes moved
	BytesFreed      int64 // object bytes deleted

	// What the cycle left for later, and why: dead segments whose
	// deadline (the grace period readers get) is not due yet, the first
	// due in NextDeadline; fragmented segments not repacked because they
	// are still losing frames (cooling), the first settled in CoolIn.
	Waiting      int
	WaitingBytes int64
	NextDeadline time.Duration
	Cooling      int
	CoolIn       time.Duration

	Paused   bool     // a persistent checkpoint paused deletion and repack
	PinnedBy []string // those checkpoints
	Blocked  string   // why the cycle reclaimed nothing ("" if it ran)
	Retry    bool     // the cycle asks to run again after RetryDelay

	Requests objstore.Counts // requests this cycle sent
}

// counterEntry is one scanned segment counter.
type counterEntry struct {
	id                uint64
	live, total, size int64
}

func (c counterEntry) dead() bool { return c.live <= 0 }

// cycle runs one reclamation cycle.
func (r *Reclaimer) cycle(ctx context.Context) (st CycleStats, err error) {
	ctx = objstore.WithPurpose(ctx, objstore.PurposeDeletion)
	st.Start = r.clk.Now()
	mono0 := r.clk.Mono()
	req0 := r.store.Snapshot()
	defer func() {
		st.Duration = r.clk.Mono() - mono0
		st.Requests = r.store.Snapshot().Sub(req0)
		r.logCycle(st, err)
	}()

	// Seal and flush, so that current == durable for every segment the
	// scan can see, and capture the cutoff under the same barrier.
	cutoff, err := r.host.BarrierCutoff(ctx)
	if err != nil {
		return st, fmt.Errorf("reclaim: barrier: %w", err)
	}
	if err := r.host.Fenced(); err != nil {
		// A writer that lost the lease deletes and rewrites nothing.
		st.Blocked = "fenced"
		return st, fmt.Errorf("reclaim: %w", err)
	}
	st.Cutoff = cutoff
	failpoint.Hit("cycle-after-barrier")
	r.live.setPhase(PhaseCheckpoints)

	recs, err := r.opts.Checkpoints.List(ctx)
	if err != nil {
		st.Blocked = "checkpoint list unreadable"
		return st, fmt.Errorf("reclaim: checkpoint list unreadable, reclaiming nothing: %w", err)
	}
	failpoint.Hit("cycle-after-checkpoint-list")
	r.live.setPhase(PhaseScan)
	h, err := checkpoint.HorizonOf(recs)
	if err != nil {
		st.Blocked = "invalid checkpoint record"
		return st, fmt.Errorf("reclaim: reclaiming nothing: %w", err)
	}
	st.Paused, st.PinnedBy = h.Paused, h.PinnedBy

	entries, err := r.scanCounters()
	if err != nil {
		return st, fmt.Errorf("reclaim: counter scan: %w", err)
	}
	st.Counters = len(entries)
	failpoint.Hit("cycle-after-scan")

	due, cands, blocked := r.judge(entries, h, &st)
	failpoint.Hit("cycle-after-deadlines")
	if blocked {
		st.Blocked = "paused by persistent checkpoint"
		st.Retry = true
		return st, nil
	}

	var errs []error
	if len(due) > 0 {
		r.live.setPhase(PhaseDelete)
		if err := r.deleteDue(ctx, due, &st); err != nil {
			errs = append(errs, err)
		}
	}
	if len(cands) > 0 && !r.closed() {
		r.live.setPhase(PhaseRepack)
		if err := r.repack(ctx, cands, &st); err != nil {
			errs = append(errs, err)
		}
	}
	return st, errors.Join(errs...)
}

// judge sorts the scanned counters below st.Cutoff: dead segments due
// for deletion, repack candidates, and (in st) what waits and why:
// deadlines not yet due, segments still cooling. blocked is set when a
// persistent checkpoint paused work that there was to do.
func (r *Reclaimer) judge(entries []counterEntry, h checkpoint.Horizon, st *CycleStats) (due, cands []counterEntry, blocked bool) {
	now := r.clk.Mono()
	r.mu.Lock()
	defer r.mu.Unlock()
	seenDead := make(map[uint64]bool)
	seenLive := make(map[uint64]bool)
	r.mu.coolAt = never
	firstDue, firstCool := never, never
	for _, c := range entries {
		if c.id >= st.Cutoff {
			continue
		}
		if c.dead() {
			st.Dead++
			seenDead[c.id] = true
			d, ok := r.mu.deadlines[c.id]
			switch {
			case h.Paused:
				blocked = true
			case !ok:
				r.mu.deadlines[c.id] = now + h.Grace
				st.NewDeadlines++
				st.Waiting++
				st.WaitingBytes += c.size
				firstDue = min(firstDue, now+h.Grace)
			case d <= now:
				due = append(due, c)
			default:
				st.Waiting++
				st.WaitingBytes += c.size
				firstDue = min(firstDue, d)
			}
			continue
		}
		seenLive[c.id] = true
		r.noteActivityLocked(c, now, !r.mu.scanned)
		cand, coolAt := r.isCandidate(c, now)
		switch {
		case cand && h.Paused:
			blocked = true
		case cand:
			cands = append(cands, c)
		case coolAt != never:
			st.Cooling++
			firstCool = min(firstCool, coolAt)
		}
	}
	for id := range r.mu.activity {
		if !seenLive[id] {
			delete(r.mu.activity, id)
		}
	}
	r.mu.scanned = true
	for id := range r.mu.deadlines {
		if !seenDead[id] {
			// Gone (deleted, dropped) or no longer dead (repaired).
			delete(r.mu.deadlines, id)
		}
	}
	if firstDue != never {
		st.NextDeadline = firstDue - now
	}
	if firstCool != never {
		st.CoolIn = firstCool - now
	}
	return due, cands, blocked
}

// isCandidate reports whether segment c is to be repacked now. Small
// segments are, and so is one more than HotDeadPercent dead. One more
// than min_dead_percent dead is repacked once it is cool: it lost less
// than 1% of its frames over the last CoolTime. A segment that is still
// being overwritten tends to die whole, and then deletion frees it at no
// cost; repacking it meanwhile copies bytes that die in the copy next (under
// random 4 KiB overwrites that made repack upload more than the writes).
// A segment deferred while it cools returns coolAt, when it settles
// (never otherwise). Called with r.mu held, after noteActivityLocked.
func (r *Reclaimer) isCandidate(c counterEntry, now time.Duration) (cand bool, coolAt time.Duration) {
	if c.total <= 0 || c.size <= 0 {
		return false, never
	}
	if c.size < SmallSegment {
		return true, never
	}
	deadFrames := c.total - c.live
	if deadFrames*100 > int64(max(HotDeadPercent, r.opts.MinDeadPercent))*c.total {
		return true, never
	}
	if deadFrames*100 <= int64(r.opts.MinDeadPercent)*c.total {
		return false, never
	}
	a := r.mu.activity[c.id]
	if a.cool || r.opts.CoolTime < 0 {
		return true, never
	}
	coolAt = a.since + r.opts.CoolTime
	r.mu.coolAt = min(r.mu.coolAt, coolAt)
	return false, coolAt
}

// segActivity is what the cycles saw of one segment's live bytes.
type segActivity struct {
	live  int64         // live bytes at since
	since time.Duration // Mono when the current window started
	cool  bool          // the last full window lost less than 1% of the frames
}

// noteActivityLocked follows how fast c loses live bytes, in windows of
// CoolTime. Segments in the Reclaimer's first scan count as cool (nothing
// is known of them); a segment sealed since then is not, until one window
// has passed: new data is the likeliest to be overwritten.
func (r *Reclaimer) noteActivityLocked(c counterEntry, now time.Duration, first bool) {
	a, ok := r.mu.activity[c.id]
	switch {
	case !ok:
		a = segActivity{live: c.live, since: now, cool: first}
	case (a.live-c.live)*100 >= c.total:
		a = segActivity{live: c.live, since: now}
	case now-a.since >= r.opts.CoolTime:
		a = segActivity{live: c.live, since: now, cool: true}
	}
	r.mu.activity[c.id] = a
}

// scanCounters reads every segment counter in key order. It sends no
// requests. Malformed records are reported and skipped (never acted on).
func (r *Reclaimer) scanCounters() ([]counterEntry, error) {
	lo, hi := schema.PrefixRange(schema.PCounter)
	var out []counterEntry
	err := r.host.MetaScan(lo, hi, func(k, v []byte) error {
		id, err := schema.ParseU64Key(k, schema.PCounter)
		if err != nil {
			r.log.Error("reclaim: malformed counter key; skipping it", "key", fmt.Sprintf("%x", k))
			return nil
		}
		live, total, size, err := lsm.DecodeCounter(v)
		if err != nil {
			r.log.Error("reclaim: malformed counter; skipping its segment", "segment", fmt.Sprintf("%016x", id), "err", err)
			return nil
		}
		out = append(out, counterEntry{id: id, live: live, total: total, size: size})
		return nil
	})
	return out, err
}

// deleteDue verifies the dead segments whose deadline passed, makes the
// state it verified durable with one barrier, and only then deletes them,
// DeleteParallel at a time in each phase.
func (r *Reclaimer) deleteDue(ctx context.Context, due []counterEntry, st *CycleStats) error {
	sort.Slice(due, func(i, j int) bool { return due[i].id < due[j].id })
	var (
		mu        sync.Mutex
		errs      []error
		deletable []counterEntry
	)
	tally := func(c counterEntry, out deleteOutcome, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch out {
		case outDeleted:
			st.Deleted++
			st.BytesFreed += c.size
		case outStale:
			st.StaleDropped++
		case outRepaired:
			st.Repaired++
		case outKept:
			st.Kept++
		case outVerified:
			deletable = append(deletable, c)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	r.eachParallel(ctx, due, func(c counterEntry) {
		out, err := r.verifyDead(ctx, c)
		tally(c, out, err)
	})
	if len(deletable) == 0 || r.closed() || ctx.Err() != nil {
		return errors.Join(errs...)
	}
	// The check read the current pointers; after this barrier they are
	// the durable ones as well.
	if err := r.host.Barrier(ctx); err != nil {
		st.Kept += len(deletable)
		return errors.Join(append(errs, fmt.Errorf("reclaim: barrier before deleting %d verified segments: %w", len(deletable), err))...)
	}
	failpoint.Hit("delete-after-barrier")
	sort.Slice(deletable, func(i, j int) bool { return deletable[i].id < deletable[j].id })
	r.eachParallel(ctx, deletable, func(c counterEntry) {
		out, err := r.removeDead(ctx, c)
		tally(c, out, err)
	})
	return errors.Join(errs...)
}

// eachParallel runs f for each entry, DeleteParallel at a time, and stops
// admitting entries when the Reclaimer closes or ctx ends.
func (r *Reclaimer) eachParallel(ctx context.Context, list []counterEntry, f func(counterEntry)) {
	var g worker.Group
	sem := make(chan struct{}, DeleteParallel)
	for _, c := range list {
		if r.closed() || ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		g.Go(func() {
			defer func() { <-sem }()
			f(c)
		})
	}
	g.Wait()
}

type deleteOutcome int

const (
	outNone deleteOutcome = iota
	outDeleted
	outStale
	outRepaired
	outKept
	outVerified // no pointer refers to it: delete after the barrier
)

// verifyDead checks one dead segment: footer and directory, then every
// pointer its frames could have. Any doubt keeps the segment (and its
// deadline).
func (r *Reclaimer) verifyDead(ctx context.Context, c counterEntry) (deleteOutcome, error) {
	ctx = objstore.WithPurpose(ctx, objstore.PurposeVerification)
	seg := fmt.Sprintf("%016x", c.id)
	size := c.size
	if size <= 0 {
		// A counter without a recorded size (it should not exist): ask
		// the store rather than guess.
		info, err := r.store.Head(ctx, segKey(c.id))
		if objstore.IsNotFound(err) {
			return r.dropCounter(c.id, "object is gone and its counter has no size")
		}
		if err != nil {
			return outKept, fmt.Errorf("reclaim: segment %s: head: %w", seg, err)
		}
		size = info.Size
	}
	_, entries, err := r.readDirectory(ctx, c.id, size)
	failpoint.Hit("delete-after-directory-read")
	if objstore.IsNotFound(err) {
		return r.dropCounter(c.id, "object already gone")
	}
	if err != nil {
		if ctx.Err() == nil { // a read cut short by shutdown is not news
			r.log.Warn("reclaim: cannot read a dead segment's directory; keeping it", "segment", seg, "err", err)
		}
		return outKept, fmt.Errorf("reclaim: segment %s: %w", seg, err)
	}
	ref, err := r.lookup(c.id, entries)
	if err != nil {
		return outKept, fmt.Errorf("reclaim: segment %s: pointer check: %w", seg, err)
	}
	if !ref.counterFound {
		return outNone, nil // removed meanwhile; nothing to do
	}
	if ref.refs > 0 || ref.counterLive != 0 {
		if ref.refs == 0 && ref.counterLive > 0 {
			// The counter says live now although the scan said dead, and
			// no pointer refers to the segment: doubt. Keep it.
			r.log.Error("reclaim: dead segment's counter changed to live without references; keeping it", "segment", seg, "live", ref.counterLive)
			return outKept, nil
		}
		if ref.refs > 0 {
			return r.repairCounter(c.id, ref)
		}
		// Negative live bytes and no references: over-debited but
		// unreferenced, so deletion is safe; note it.
		r.log.Warn("reclaim: dead segment's counter is negative", "segment", seg, "live", ref.counterLive)
	}
	failpoint.Hit("delete-after-verify")
	return outVerified, nil
}

// removeDead deletes a verified segment: the DELETE, and only then the
// counter.
func (r *Reclaimer) removeDead(ctx context.Context, c counterEntry) (deleteOutcome, error) {
	ctx = objstore.WithPurpose(ctx, objstore.PurposeDeletion)
	seg := fmt.Sprintf("%016x", c.id)
	if err := r.store.Delete(ctx, segKey(c.id)); err != nil {
		r.log.Warn("reclaim: delete of a dead segment failed; keeping it for a retry", "segment", seg, "err", err)
		return outKept, fmt.Errorf("reclaim: segment %s: delete: %w", seg, err)
	}
	r.host.ForgetSegments(c.id)
	failpoint.Hit("delete-after-object-delete")
	if err := r.host.DropCounter(c.id); err != nil {
		// The next scan finds a counter whose object is NotFound and
		// drops it.
		return outDeleted, fmt.Errorf("reclaim: segment %s deleted, counter removal failed: %w", seg, err)
	}
	failpoint.Hit("delete-after-counter-removed")
	r.forgetDeadline(c.id)
	return outDeleted, nil
}

func (r *Reclaimer) forgetDeadline(id uint64) {
	r.mu.Lock()
	delete(r.mu.deadlines, id)
	r.mu.Unlock()
}

// dropCounter removes the counter of a dead segment whose object is gone.
func (r *Reclaimer) dropCounter(id uint64, why string) (deleteOutcome, error) {
	if err := r.host.DropCounter(id); err != nil {
		return outKept, fmt.Errorf("reclaim: segment %016x: dropping stale counter: %w", id, err)
	}
	failpoint.Hit("delete-after-stale-drop")
	r.forgetDeadline(id)
	r.log.Info("reclaim: dropped stale counter", "segment", fmt.Sprintf("%016x", id), "reason", why)
	return outStale, nil
}

// repairCounter sets the counter's live bytes to the sum of the frames its
// current pointers reference, with a merge delta computed in the same
// consistent view as that sum (so concurrent debits stay correct).
func (r *Reclaimer) repairCounter(id uint64, ref lookupResult) (deleteOutcome, error) {
	delta := ref.refBytes - ref.counterLive
	if err := r.host.AdjustCounter(id, delta, 0, 0); err != nil {
		return outKept, fmt.Errorf("reclaim: segment %016x: counter repair: %w", id, err)
	}
	failpoint.Hit("delete-after-repair")
	r.forgetDeadline(id)
	r.log.Error("reclaim: segment counter under-counted live data; kept the segment and repaired its counter",
		"segment", fmt.Sprintf("%016x", id), "counter_live", ref.counterLive, "true_live", ref.refBytes, "references", ref.refs)
	return outRepaired, nil
}

func (r *Reclaimer) logCycle(st CycleStats, err error) {
	attrs := []any{
		"deletes", st.Deleted, "repacks", st.Repacks, "relocated_frames", st.RelocatedFrames,
		"bytes_freed", st.BytesFreed, "duration", st.Duration,
		"counters", st.Counters, "dead", st.Dead, "new_deadlines", st.NewDeadlines,
	}
	if st.StaleDropped > 0 {
		attrs = append(attrs, "stale_counters", st.StaleDropped)
	}
	if st.Repaired > 0 {
		attrs = append(attrs, "repaired", st.Repaired)
	}
	if st.Kept > 0 {
		attrs = append(attrs, "kept_on_error", st.Kept)
	}
	if st.RepackFailed > 0 {
		attrs = append(attrs, "repack_failed", st.RepackFailed)
	}
	if st.Blocked != "" {
		attrs = append(attrs, "blocked", st.Blocked)
	}
	if st.Paused {
		attrs = append(attrs, "paused_by", st.PinnedBy)
	}
	if st.Waiting > 0 {
		attrs = append(attrs, "waiting", st.Waiting, "waiting_bytes", st.WaitingBytes, "next_deadline", st.NextDeadline)
	}
	if st.Cooling > 0 {
		attrs = append(attrs, "cooling", st.Cooling, "cool_in", st.CoolIn)
	}
	attrs = append(attrs, requestsAttr(st.Requests))
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	level := slog.LevelInfo
	if err == nil && st.idle() {
		// A cycle that changed nothing is not news: 90 of 124 INFO lines
		// in a few minutes were such cycles.
		level = slog.LevelDebug
	}
	r.log.Log(context.Background(), level, "reclaim: cycle", attrs...)
}

// idle reports whether the cycle changed nothing and found nothing new.
func (st CycleStats) idle() bool {
	return st.Deleted == 0 && st.Repacks == 0 && st.RepackFailed == 0 && st.NewDeadlines == 0 &&
		st.StaleDropped == 0 && st.Repaired == 0 && st.Kept == 0 && st.Blocked == ""
}

// requestsAttr renders request counts by kind as one log group.
func requestsAttr(c objstore.Counts) slog.Attr {
	return slog.Group("requests", "get_range", c.GetRange, "get", c.Get, "put", c.Put,
		"delete", c.Delete, "head", c.Head, "list", c.List, "bytes_down", c.BytesDown, "bytes_up", c.BytesUp)
}
