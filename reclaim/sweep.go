package reclaim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// LastSweepKey holds the wall time of the last completed orphan sweep:
// 8-byte big-endian Unix nanoseconds.
var LastSweepKey = lsm.SystemKey("reclaim.last-sweep")

// SweepStats summarises one orphan sweep.
type SweepStats struct {
	Start    time.Time
	Duration time.Duration
	Horizon  uint64 // only ids below it were judged

	Listed       int   // segment objects listed
	Unrecognised int   // keys that are not segment keys (left alone)
	Counterless  int   // counter-less objects below the horizon
	Deleted      int   // orphans deleted
	DeletedBytes int64 // their bytes
	Unreadable   int   // kept: directory could not be read
	Referenced   int   // kept: a pointer references it (counter recreated)
	Complete     bool  // every shard listed and every candidate judged

	Requests objstore.Counts
}

// decodeLastSweep parses the persisted timestamp.
func decodeLastSweep(v []byte) (time.Time, bool) {
	if len(v) != 8 {
		return time.Time{}, false
	}
	ns := int64(binary.BigEndian.Uint64(v))
	if ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func encodeLastSweep(t time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano()))
}

// sweepDelay is the startup delay of the first sweep given the persisted
// time of the last completed one: between 0 and SweepInterval from it; a
// future timestamp postpones by at most one interval; a missing or invalid
// one makes the sweep due at once.
func sweepDelay(last time.Time, ok bool, now time.Time) time.Duration {
	if !ok {
		return 0
	}
	d := last.Add(SweepInterval).Sub(now)
	return min(max(d, 0), SweepInterval)
}

func (r *Reclaimer) scheduleFirstSweep() {
	v, found, err := r.host.MetaGet(LastSweepKey)
	var last time.Time
	ok := false
	switch {
	case err != nil:
		r.log.Warn("reclaim: cannot read the last orphan sweep time; sweeping at once", "err", err)
	case !found:
	default:
		if last, ok = decodeLastSweep(v); !ok {
			r.log.Warn("reclaim: invalid last orphan sweep time; sweeping at once", "value", fmt.Sprintf("%x", v))
		}
	}
	d := sweepDelay(last, ok, r.clk.Now())
	r.mu.Lock()
	r.mu.sweepKnown = true
	r.mu.sweepAt = r.clk.Mono() + d
	if ok {
		r.mu.lastSweep = last
	}
	r.mu.Unlock()
}

// runScheduledSweep runs a sweep on ctx and schedules the next one:
// SweepInterval after this one started if it completed, after a back-off
// otherwise.
func (r *Reclaimer) runScheduledSweep(ctx context.Context) (SweepStats, error) {
	start := r.clk.Mono()
	r.live.sweepStart()
	st, err := r.sweep(ctx)
	r.live.sweepEnd(st, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.sweeps++
	if err == nil && st.Complete {
		r.mu.sweepFailures = 0
		r.mu.lastSweep = st.Start
		if !r.opts.DisableSweep {
			r.mu.sweepKnown = true
			r.mu.sweepAt = start + SweepInterval
		}
		return st, nil
	}
	if !r.opts.DisableSweep {
		r.mu.sweepFailures++
		back := RetryDelay
		for i := 1; i < r.mu.sweepFailures && back < SweepRetryMax; i++ {
			back *= 2
		}
		r.mu.sweepKnown = true
		r.mu.sweepAt = r.clk.Mono() + min(back, SweepRetryMax)
	}
	if err == nil {
		err = errors.New("reclaim: orphan sweep incomplete")
	}
	return st, err
}

// sweep lists segments/ shard by shard and deletes counter-less objects
// below the sweep horizon that no pointer references. It is the only LIST
// of segments/.
func (r *Reclaimer) sweep(ctx context.Context) (st SweepStats, err error) {
	ctx = objstore.WithPurpose(ctx, objstore.PurposeSweep)
	st.Start = r.clk.Now()
	mono0 := r.clk.Mono()
	req0 := r.store.Snapshot()
	st.Horizon = r.host.SweepHorizon()
	if err := r.host.Fenced(); err != nil {
		return st, fmt.Errorf("reclaim: sweep: %w", err)
	}
	defer func() {
		st.Duration = r.clk.Mono() - mono0
		st.Requests = r.store.Snapshot().Sub(req0)
		r.logSweep(st, err)
	}()
	var (
		errs []error
		mu   sync.Mutex
		g    worker.Group // the orphans being judged
	)
	sem := make(chan struct{}, DeleteParallel)
	complete := true
	for shard := 0; shard < 256; shard++ {
		if r.closed() || ctx.Err() != nil {
			mu.Lock()
			complete = false
			mu.Unlock()
			break
		}
		objs, err := objstore.ListAll(ctx, r.store, segment.ShardPrefix(uint8(shard)))
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("reclaim: sweep: list %s: %w", segment.ShardPrefix(uint8(shard)), err))
			complete = false
			mu.Unlock()
			continue // the other shards are still worth judging
		}
		failpoint.Hit("sweep-after-list-shard")
		if shard == 127 {
			failpoint.Hit("sweep-mid")
		}
		mu.Lock()
		st.Listed += len(objs)
		mu.Unlock()
		for _, o := range objs {
			id, ok := segment.ParseKey(o.Key)
			if !ok {
				mu.Lock()
				st.Unrecognised++
				mu.Unlock()
				continue
			}
			if id >= st.Horizon {
				continue
			}
			_, has, err := r.host.MetaGet(schema.CounterKey(id))
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				complete = false
				mu.Unlock()
				continue
			}
			if has {
				continue
			}
			mu.Lock()
			st.Counterless++
			mu.Unlock()
			sem <- struct{}{}
			g.Go(func() {
				defer func() { <-sem }()
				size := o.Size
				out, err := r.judgeOrphan(ctx, id, size)
				mu.Lock()
				defer mu.Unlock()
				switch out {
				case orphanDeleted:
					st.Deleted++
					st.DeletedBytes += size
				case orphanUnreadable:
					st.Unreadable++
				case orphanReferenced:
					st.Referenced++
				}
				if err != nil {
					errs = append(errs, err)
					if out != orphanUnreadable {
						complete = false
					}
				}
			})
		}
	}
	g.Wait()
	st.Complete = complete
	if complete {
		err := r.host.MetaPut(LastSweepKey, encodeLastSweep(st.Start))
		if err == nil {
			failpoint.Hit("sweep-after-record-time")
			err = r.host.Barrier(ctx)
		}
		if err != nil {
			st.Complete = false
			errs = append(errs, fmt.Errorf("reclaim: sweep: recording its time: %w", err))
		}
	}
	if st.Complete {
		// Unreadable objects are reported but do not fail a sweep that
		// judged everything else: the next sweep tries them again.
		return st, nil
	}
	return st, errors.Join(errs...)
}

type orphanOutcome int

const (
	orphanKept orphanOutcome = iota
	orphanDeleted
	orphanUnreadable
	orphanReferenced
)

// judgeOrphan verifies one counter-less object with the directory check
// and deletes it if no pointer references any of its frames.
func (r *Reclaimer) judgeOrphan(ctx context.Context, id uint64, size int64) (orphanOutcome, error) {
	seg := fmt.Sprintf("%016x", id)
	_, entries, err := r.readDirectory(ctx, id, size)
	failpoint.Hit("sweep-after-directory-read")
	if objstore.IsNotFound(err) {
		return orphanKept, nil // gone since the listing
	}
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("reclaim: sweep: cannot read an orphan's directory; keeping it", "segment", seg, "err", err)
		}
		return orphanUnreadable, fmt.Errorf("reclaim: sweep: segment %s: %w", seg, err)
	}
	ref, err := r.lookup(id, entries)
	if err != nil {
		return orphanKept, fmt.Errorf("reclaim: sweep: segment %s: pointer check: %w", seg, err)
	}
	if ref.counterFound {
		return orphanKept, nil // committed meanwhile (cannot happen below the horizon; never judge it)
	}
	if ref.refs > 0 {
		// Referenced without a counter: keep it and restore the counter
		// from the truth, so fsck and later cycles see it.
		var frameBytes int64
		for _, e := range entries {
			frameBytes += int64(e.Length)
		}
		err := r.host.AdjustCounter(id, ref.refBytes, frameBytes, size)
		r.log.Error("reclaim: sweep: a counter-less segment is referenced; kept it and recreated its counter",
			"segment", seg, "references", ref.refs, "live", ref.refBytes, "err", err)
		return orphanReferenced, err
	}
	failpoint.Hit("sweep-before-delete")
	if err := r.store.Delete(ctx, segKey(id)); err != nil {
		return orphanKept, fmt.Errorf("reclaim: sweep: segment %s: delete: %w", seg, err)
	}
	r.host.ForgetSegments(id)
	failpoint.Hit("sweep-after-delete")
	return orphanDeleted, nil
}

// logSweep logs a sweep's summary: at DEBUG when it found nothing.
func (r *Reclaimer) logSweep(st SweepStats, err error) {
	attrs := []any{"listed", st.Listed, "counterless", st.Counterless, "deleted", st.Deleted,
		"bytes_freed", st.DeletedBytes, "unreadable", st.Unreadable, "referenced", st.Referenced,
		"complete", st.Complete, "duration", st.Duration,
		requestsAttr(st.Requests)}
	log := r.log.Info
	switch {
	case err != nil:
		attrs = append(attrs, "err", err)
	case st.Deleted == 0 && st.Unreadable == 0 && st.Referenced == 0:
		log = r.log.Debug // a sweep that found nothing is not news
	}
	log("reclaim: orphan sweep", attrs...)
}
