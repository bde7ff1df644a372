package fs

import (
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/internal/stats"
)

// Stats collects what the engine did for /metrics and the monitor: the
// tombstones unlinks wrote and the durability barriers. (What the
// tombstone cleaner did is reclaim.CleanerStats.) Give one in
// Options.Stats; a nil *Stats records nothing. Safe for concurrent use.
type Stats struct {
	tombstones      atomic.Uint64 // tombstones written by unlinks
	barriers        atomic.Uint64
	barrierFailures atomic.Uint64
	barrierLat      *stats.Histogram
}

// NewStats returns an empty Stats.
func NewStats() *Stats { return &Stats{barrierLat: stats.NewHistogram()} }

// StatsSnapshot is Stats at one moment; counters are cumulative since
// the process started.
type StatsSnapshot struct {
	TombstonesCreated uint64                  `json:"tombstones_created"`
	Barriers          uint64                  `json:"barriers"`
	BarrierFailures   uint64                  `json:"barrier_failures"`
	BarrierLatency    stats.HistogramSnapshot `json:"barrier_latency"`
}

// Snapshot returns the counters so far.
func (s *Stats) Snapshot() StatsSnapshot {
	if s == nil {
		return StatsSnapshot{BarrierLatency: stats.NewHistogram().Snapshot()}
	}
	out := StatsSnapshot{
		TombstonesCreated: s.tombstones.Load(),
		Barriers:          s.barriers.Load(),
		BarrierFailures:   s.barrierFailures.Load(),
		BarrierLatency:    s.barrierLat.Snapshot(),
	}
	return out
}

// tombstoned records a tombstone written by an unlink.
func (s *Stats) tombstoned() {
	if s != nil {
		s.tombstones.Add(1)
	}
}

// barrierDone records one barrier of a writer.
func (s *Stats) barrierDone(start time.Time, err error) {
	if s == nil {
		return
	}
	s.barriers.Add(1)
	if err != nil {
		s.barrierFailures.Add(1)
	}
	s.barrierLat.Since(start)
}

// DirtyBytes is the written data not yet sealed into a segment.
func (e *Engine) DirtyBytes() int64 { return e.dirtyBytes.Load() }
