// Package reclaim is all of ebbfs space reclamation (DESIGN sections 7
// and 8): stage 1, the tombstone cleaner, on a worker of its own
// (cleaner.go); stage 2, the segment reclamation cycle (dead-segment
// deletion and repack), and the daily orphan sweep, with the scheduler that
// runs both on one worker; stage 3, metadata objects, in metagc*.go.
//
// The package talks to the filesystem engine only through Host, so it does
// not import fs. Time comes from an injected clock; deadlines are on
// monotonic time.
//
// Persisted state: the wall time of the last completed orphan sweep, under
// the system key "s" + "reclaim.last-sweep" (8-byte big-endian Unix
// nanoseconds); and at a clean stop the remaining grace of each pending
// deletion, under "s" + "reclaim.deadlines" (deadlines.go), which the next
// writer continues. After a crash, dead segments get a fresh full grace.
//
// Decisions where DESIGN.md is silent:
//
//   - "Current and durable" pointers: the deletion check reads the current
//     pointers, and the cycle then runs one barrier before its first
//     DELETE, so the state it checked is the durable state too (no new
//     pointer ever goes into an existing segment). Without that barrier an
//     under-counted counter could have a segment deleted whose last
//     reference was removed after the cycle's first barrier and is in no
//     journal yet: a crash would bring the pointer back (the model's
//     undercount-durable-ref run, docs/model).
//   - The pointer check reads every directory entry's extent and the
//     segment's counter in one Pebble iterator (a consistent view), so a
//     counter repair delta stays right under concurrent debits. Any
//     pointer into the segment, at any offset, counts as a reference.
//   - While a persistent checkpoint exists no deadline is recorded; a
//     segment that died meanwhile gets its full grace once it is gone.
//   - A dead segment whose deadline passed is retried after RetryDelay
//     when its check hit a read error; the deadline itself never moves.
//   - The sweep records its start time; a failed sweep (a LIST or DELETE
//     error) retries after RetryDelay, doubling up to SweepRetryMax, and
//     does not update the timestamp. Objects whose directory cannot be
//     read are kept and reported without failing the sweep. A counter-less
//     object that pointers do reference is kept and its counter recreated
//     from the truth.
//   - A fenced writer (lost lease) deletes and rewrites nothing and stops
//     retrying.
//   - Close stops admissions and cancels work not yet admitted (every step
//     is idempotent); admitted repack jobs run to completion.
package reclaim

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segread"
)

// ErrClosed is returned by RunNow and SweepNow after Close.
var ErrClosed = errors.New("reclaim: closed")

// Reclaimer runs reclamation cycles and orphan sweeps for one writer.
type Reclaimer struct {
	opts  Options
	host  Host
	clk   clock.Clock
	log   *slog.Logger
	store *objstore.Counting // every request reclamation sends goes through it
	rd    *segread.Reader    // uncached reader over store, for repack fetches
	meta  chan struct{}      // MetaParallel tokens shared by all jobs

	// The two workers, set under mu by Start: the cycle's and the sweep's
	// (loop), whose context Close cancels to end work not yet admitted,
	// and the tombstone cleaner (cleaner.go).
	cycleW   *worker.Worker
	cleanerW *worker.Worker

	mu struct {
		sync.Mutex
		started, closed bool
		pending         bool          // a trigger arrived since the last cycle started
		ranCycle        bool          // lastCycle is valid
		lastCycle       time.Duration // Mono at the start of the last cycle
		retryAt         time.Duration // 0: none
		deadlines       map[uint64]time.Duration
		activity        map[uint64]segActivity // live segments below the last cutoff
		scanned         bool                   // a cycle has scanned the counters
		coolAt          time.Duration          // when the first deferred repack candidate settles (never: none)
		sweepAt         time.Duration          // Mono when the next sweep is due
		sweepKnown      bool                   // sweepAt is valid
		sweepFailures   int
		lastSweep       time.Time // wall time of the last completed sweep (zero: unknown)
		runReqs         []chan result[CycleStats]
		sweepReqs       []chan result[SweepStats]
		lastStats       CycleStats
		cycles          int
		sweeps          int
		// idle is set while the worker sleeps with nothing due before
		// sleepUntil (never: no timer); anything that kicks clears it.
		idle       bool
		sleepUntil time.Duration
	}

	live liveState // what the stages are doing, and totals (state.go)

	// Test overrides (0: the constants).
	chunkForTests  int   // RepointChunk
	budgetForTests int64 // JobBudget
}

// result answers one RunNow or SweepNow request.
type result[T any] struct {
	stats T
	err   error
}

// answer sends res to every waiting request.
func answer[T any](reqs []chan result[T], res result[T]) {
	for _, c := range reqs {
		c <- res
	}
}

// New checks o and returns a stopped Reclaimer.
func New(o Options) (*Reclaimer, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cs := objstore.NewCounting(o.Store)
	if o.Checkpoints == nil {
		o.Checkpoints = storeCheckpoints{cs}
	}
	rd, err := segread.NewReader(segread.ReaderOptions{Store: cs, Keys: o.Keys, MemoryBytes: -1, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	r := &Reclaimer{
		opts:  o,
		host:  o.Host,
		clk:   o.Clock,
		log:   o.Logger,
		store: cs,
		rd:    rd,
		meta:  make(chan struct{}, MetaParallel),
	}
	r.mu.deadlines = map[uint64]time.Duration{}
	r.mu.activity = map[uint64]segActivity{}
	r.mu.coolAt = never
	r.restoreDeadlines()
	r.live.init()
	return r, nil
}

// Requests returns the requests reclamation has sent so far.
func (r *Reclaimer) Requests() objstore.Counts { return r.store.Snapshot() }

// Start starts the workers. It schedules one cycle at once and the first
// orphan sweep from the persisted time of the last one.
func (r *Reclaimer) Start() {
	r.mu.Lock()
	if r.mu.started || r.mu.closed {
		r.mu.Unlock()
		return
	}
	r.mu.started = true
	r.mu.pending = true
	// Started under the lock, so Close and Tombstoned see it.
	r.cleanerW = worker.Start("reclaim-cleaner", r.clk, r.cleaner)
	r.mu.Unlock()
	r.live.noteTrigger(TriggerStartup)
	if !r.opts.DisableSweep {
		r.scheduleFirstSweep()
	}
	r.mu.Lock()
	if !r.mu.closed {
		r.cycleW = worker.Start("reclaim-cycle", r.clk, r.loop)
	}
	r.mu.Unlock()
}

// Close stops new admissions (cycles, sweeps, repack jobs, deletions) and
// waits for the workers: repack jobs already admitted finish; other work
// in progress is cancelled (every step is idempotent).
func (r *Reclaimer) Close() error {
	r.mu.Lock()
	first := !r.mu.closed
	r.mu.closed = true
	r.mu.idle = false
	cycle, cleaner := r.cycleW, r.cleanerW
	reqs, sreqs := r.mu.runReqs, r.mu.sweepReqs
	r.mu.runReqs, r.mu.sweepReqs = nil, nil
	r.mu.Unlock()
	answer(reqs, result[CycleStats]{err: ErrClosed})
	answer(sreqs, result[SweepStats]{err: ErrClosed})
	// Both cancelled before either is waited for, so that neither's
	// non-admitted work waits on the other's.
	var g worker.Group
	for _, w := range []*worker.Worker{cycle, cleaner} {
		if w != nil {
			g.Go(w.Close)
		}
	}
	g.Wait()
	if !first {
		return nil
	}
	err := r.saveDeadlines()
	if err != nil && !errors.Is(err, lsm.ErrClosed) {
		r.log.Warn("reclaim: cannot record the remaining deadlines; the next writer gives dead segments a full grace", "err", err)
	}
	return r.rd.Close()
}

// kick wakes the cycle's worker (a no-op before Start: Start schedules a
// cycle at once).
func (r *Reclaimer) kick() {
	r.mu.Lock()
	w := r.cycleW
	r.mu.Unlock()
	if w != nil {
		w.Notify()
	}
}

func (r *Reclaimer) closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.closed
}

// trigger asks for a cycle (coalesced to the flush interval); why is
// reported by Activity.
func (r *Reclaimer) trigger(why string) {
	r.live.noteTrigger(why)
	r.mu.Lock()
	r.mu.pending = true
	r.mu.idle = false
	r.mu.Unlock()
	r.kick()
}

// DeadBytes implements fs.Events: a committed batch debited counters.
func (r *Reclaimer) DeadBytes() { r.trigger(TriggerDead) }

// Sealed implements fs.Events: a segment under SmallSegment triggers a
// cycle (it is a repack candidate).
func (r *Reclaimer) Sealed(segID uint64, size int64) {
	if size < SmallSegment {
		r.trigger(TriggerSmall)
	}
}

// Tombstoned implements fs.Events: an unlink wrote a tombstone, which wakes
// the tombstone cleaner. The cleaner's debits trigger the cycle
// (DeadBytes).
func (r *Reclaimer) Tombstoned() {
	r.mu.Lock()
	w := r.cleanerW
	r.mu.Unlock()
	if w != nil {
		w.Notify()
	}
}

// Triggers forwards fs.Events to a Reclaimer attached after the engine was
// opened (the engine needs its Events before the Reclaimer can exist).
// Events before Attach are remembered as one pending trigger.
type Triggers struct {
	r       atomic.Pointer[Reclaimer]
	missed  atomic.Bool
	attachM sync.Mutex
}

// Attach connects t to r.
func (t *Triggers) Attach(r *Reclaimer) {
	t.attachM.Lock()
	defer t.attachM.Unlock()
	t.r.Store(r)
	if t.missed.Swap(false) {
		r.trigger(TriggerDead)
	}
}

// DeadBytes implements fs.Events.
func (t *Triggers) DeadBytes() {
	if r := t.r.Load(); r != nil {
		r.DeadBytes()
		return
	}
	t.missed.Store(true)
}

// Sealed implements fs.Events.
func (t *Triggers) Sealed(segID uint64, size int64) {
	if r := t.r.Load(); r != nil {
		r.Sealed(segID, size)
		return
	}
	if size < SmallSegment {
		t.missed.Store(true)
	}
}

// Tombstoned implements fs.Events. Before Attach it is dropped: the
// cleaner's first pass, at Start, finds every tombstone.
func (t *Triggers) Tombstoned() {
	if r := t.r.Load(); r != nil {
		r.Tombstoned()
	}
}

// RunNow runs a cycle now (`ebbfs reclaim run`), without waiting for the
// coalescing interval, and returns its summary. It needs a started
// Reclaimer.
func (r *Reclaimer) RunNow(ctx context.Context) (CycleStats, error) {
	return request(ctx, r, &r.mu.runReqs)
}

// SweepNow runs an orphan sweep now (`ebbfs reclaim sweep`). A completed
// sweep records its time and schedules the next one SweepInterval later.
func (r *Reclaimer) SweepNow(ctx context.Context) (SweepStats, error) {
	return request(ctx, r, &r.mu.sweepReqs)
}

// request queues a request on *queue (guarded by r.mu), wakes the worker
// and waits for its answer or for ctx.
func request[T any](ctx context.Context, r *Reclaimer, queue *[]chan result[T]) (T, error) {
	var zero T
	c := make(chan result[T], 1)
	r.mu.Lock()
	if r.mu.closed || !r.mu.started {
		r.mu.Unlock()
		return zero, ErrClosed
	}
	*queue = append(*queue, c)
	r.mu.idle = false
	r.mu.Unlock()
	r.kick()
	select {
	case res := <-c:
		return res.stats, res.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// settled reports (for tests) that the worker sleeps with nothing due
// at or before now.
func (r *Reclaimer) settled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.idle && (r.mu.sleepUntil == never || r.mu.sleepUntil > r.clk.Mono())
}

// LastCycle returns the summary of the last cycle and how many ran.
func (r *Reclaimer) LastCycle() (CycleStats, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lastStats, r.mu.cycles
}

const never = time.Duration(1<<63 - 1)

// nextCycleLocked returns when the next cycle is due (never: not due).
func (r *Reclaimer) nextCycleLocked() time.Duration {
	at := never
	if r.mu.pending {
		at = 0
	}
	if r.mu.retryAt > 0 {
		at = min(at, r.mu.retryAt)
	}
	for _, d := range r.mu.deadlines {
		// A deadline that had passed when the last cycle started was that
		// cycle's business (and its retry's, if it failed).
		if !r.mu.ranCycle || d > r.mu.lastCycle {
			at = min(at, d)
		}
	}
	at = min(at, r.mu.coolAt)
	if at != never && r.mu.ranCycle {
		at = max(at, r.mu.lastCycle+r.opts.FlushInterval)
	}
	return at
}

// loop is the cycle's worker: it answers RunNow and SweepNow, runs the
// sweeps and cycles as they fall due, and otherwise sleeps until the next
// is due or something kicks it. Its context is cancelled by Close.
func (r *Reclaimer) loop(w *worker.Worker) {
	ctx := w.Context()
	for {
		r.mu.Lock()
		if r.mu.closed {
			r.mu.Unlock()
			return
		}
		now := r.clk.Mono()
		if len(r.mu.runReqs) > 0 {
			reqs := r.mu.runReqs
			r.mu.runReqs = nil
			r.mu.Unlock()
			st, err := r.runScheduledCycle(ctx, TriggerManual)
			answer(reqs, result[CycleStats]{st, err})
			continue
		}
		if len(r.mu.sweepReqs) > 0 {
			reqs := r.mu.sweepReqs
			r.mu.sweepReqs = nil
			r.mu.Unlock()
			st, err := r.runScheduledSweep(ctx)
			answer(reqs, result[SweepStats]{st, err})
			continue
		}
		if r.mu.sweepKnown && r.mu.sweepAt <= now {
			r.mu.Unlock()
			r.runScheduledSweep(ctx)
			continue
		}
		next := r.nextCycleLocked()
		if next <= now {
			why := TriggerDeadline
			if r.mu.pending {
				why = ""
			} else if r.mu.retryAt > 0 && r.mu.retryAt <= now {
				why = TriggerRetry
			}
			r.mu.Unlock()
			r.runScheduledCycle(ctx, why)
			continue
		}
		if r.mu.sweepKnown {
			next = min(next, r.mu.sweepAt)
		}
		r.mu.idle, r.mu.sleepUntil = true, next
		r.mu.Unlock()
		wait := time.Duration(0) // never: until kicked
		if next != never {
			wait = next - now
		}
		ok := w.Wait(wait)
		r.mu.Lock()
		r.mu.idle = false
		r.mu.Unlock()
		if !ok {
			return
		}
	}
}

// runScheduledCycle runs one cycle on ctx and updates the schedule from
// it; why is its trigger ("": the pending trigger's reason).
func (r *Reclaimer) runScheduledCycle(ctx context.Context, why string) (CycleStats, error) {
	if pending := r.live.takePending(); why == "" {
		why = pending
	}
	r.live.cycleStart(why, r.clk.Now())
	r.mu.Lock()
	r.mu.pending = false
	r.mu.ranCycle = true
	r.mu.lastCycle = r.clk.Mono()
	r.mu.retryAt = 0
	r.mu.Unlock()
	st, err := r.cycle(ctx)
	r.mu.Lock()
	if (err != nil || st.Retry) && !r.mu.closed && r.host.Fenced() == nil {
		r.mu.retryAt = r.clk.Mono() + RetryDelay
	}
	r.mu.lastStats = st
	r.mu.cycles++
	r.mu.Unlock()
	r.live.cycleEnd(st, err, r.clk.Now())
	return st, err
}
