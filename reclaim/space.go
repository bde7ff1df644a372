package reclaim

import (
	"context"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// SpaceReport is what `ebbfs space` shows. Byte counts come from the
// segment counters (no LIST); the checkpoint part reads the checkpoint
// list.
type SpaceReport struct {
	LiveBytes    int64 // frame bytes live pointers reference
	SegmentCount int   // segments with a counter
	SegmentBytes int64 // their object bytes

	// LiveSegments hold live data; FragmentedSegments are those of them
	// that also hold dead frames.
	LiveSegments       int
	FragmentedSegments int
	// FragmentedBytes are dead frame bytes inside segments that still hold
	// live data (repack's work).
	FragmentedBytes int64
	// DeadSegments / DeadBytes: segments with no live data, and their
	// object bytes (deletion's work).
	DeadSegments int
	DeadBytes    int64
	// AwaitingSegments / AwaitingBytes: the dead segments that already
	// have a deadline; EarliestDeadline is when the first is due (wall
	// clock estimate from monotonic time; zero if none). Dead segments
	// without a deadline get one at the next cycle.
	AwaitingSegments int
	AwaitingBytes    int64
	EarliestDeadline time.Time

	// Pinned maps each persistent checkpoint to the dead bytes held while
	// it exists (deletion and repack are paused: every dead byte).
	Pinned map[string]int64
	// HeldBy names the ttl (ephemeral) checkpoint whose span sets the
	// grace of segments that die now, when it is longer than the 60 s
	// floor; HeldGrace is that grace and HeldUntil when the checkpoint
	// expires. Dead segments wait their grace from their death: the
	// awaiting bytes above are what such a checkpoint holds back.
	HeldBy    string
	HeldGrace time.Duration
	HeldUntil time.Time
	// CheckpointError is set when the checkpoint list could not be read
	// (Pinned is then unknown).
	CheckpointError string

	TombstonesPending int   // deleted files whose extents await the cleaner
	TombstoneBytes    int64 // frame bytes those extents reference

	LastSweep time.Time // last completed orphan sweep (zero: unknown)
	NextSweep time.Time // when the next one is due (zero: not scheduled)

	// MetaObjects / MetaBytes are filled in by the metadata object GC
	// (stage 3); Space leaves them zero.
	MetaObjects int
	MetaBytes   int64
}

// Space reports where the filesystem's bytes are.
func (r *Reclaimer) Space(ctx context.Context) (SpaceReport, error) {
	rep, err := r.SpaceLocal()
	if err != nil {
		return rep, err
	}
	recs, err := r.opts.Checkpoints.List(ctx)
	if err != nil {
		rep.CheckpointError = err.Error()
	} else {
		rep.AddPinned(recs)
	}
	return rep, nil
}

// AddPinned fills in Pinned (and CheckpointError for an invalid record)
// from the checkpoint list.
func (rep *SpaceReport) AddPinned(recs []checkpoint.Record) {
	rep.Pinned = nil
	h, err := checkpoint.HorizonOf(recs)
	if err != nil {
		rep.CheckpointError = err.Error()
	}
	rep.HeldBy, rep.HeldGrace, rep.HeldUntil = h.GraceBy, 0, h.GraceByExpires
	if h.GraceBy != "" {
		rep.HeldGrace = h.Grace
	}
	if len(h.PinnedBy) > 0 {
		rep.Pinned = map[string]int64{}
		for _, n := range h.PinnedBy {
			rep.Pinned[n] = rep.DeadBytes + rep.FragmentedBytes
		}
	}
}

// SpaceLocal is Space without the checkpoint part (Pinned): it reads only
// local metadata and sends no request.
func (r *Reclaimer) SpaceLocal() (SpaceReport, error) {
	var rep SpaceReport
	entries, err := r.scanCounters()
	if err != nil {
		return rep, err
	}
	nowMono, nowWall := r.clk.Mono(), r.clk.Now()
	r.mu.Lock()
	earliest := never
	for _, c := range entries {
		rep.SegmentCount++
		rep.SegmentBytes += c.size
		if c.dead() {
			rep.DeadSegments++
			rep.DeadBytes += c.size
			if d, ok := r.mu.deadlines[c.id]; ok {
				rep.AwaitingSegments++
				rep.AwaitingBytes += c.size
				earliest = min(earliest, d)
			}
			continue
		}
		rep.LiveBytes += c.live
		rep.LiveSegments++
		if c.total > c.live {
			rep.FragmentedSegments++
		}
		rep.FragmentedBytes += max(c.total-c.live, 0)
	}
	if earliest != never {
		rep.EarliestDeadline = nowWall.Add(earliest - nowMono)
	}
	rep.LastSweep = r.mu.lastSweep
	if r.mu.sweepKnown {
		rep.NextSweep = nowWall.Add(r.mu.sweepAt - nowMono)
	}
	r.mu.Unlock()

	if err := r.tombstones(&rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// tombstones counts pending tombstones and the frame bytes of their
// remaining extents.
func (r *Reclaimer) tombstones(rep *SpaceReport) error {
	lo, hi := schema.PrefixRange(schema.PTombstone)
	var inos []uint64
	if err := r.host.MetaScan(lo, hi, func(k, _ []byte) error {
		if ino, err := schema.ParseU64Key(k, schema.PTombstone); err == nil {
			inos = append(inos, ino)
		}
		return nil
	}); err != nil {
		return err
	}
	rep.TombstonesPending = len(inos)
	for _, ino := range inos {
		elo, ehi := schema.ExtentRange(ino, 0, 0)
		if err := r.host.MetaScan(elo, ehi, func(_, v []byte) error {
			if x, err := segment.UnmarshalExtent(v); err == nil {
				rep.TombstoneBytes += x.FrameBytes()
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}
