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
	lastBarrier     atomic.Int64 // unix nanoseconds of the last barrier that succeeded
	barrierLat      *stats.Histogram
	barrierJoins    atomic.Uint64 // calls that shared a barrier another ran
	syncsClean      atomic.Uint64 // fsyncs with nothing to make durable
	patches         atomic.Uint64 // patches committed (patch.go)
	patchBytes      atomic.Uint64 // their plain bytes
	merges          atomic.Uint64 // extents the merger made whole buffers (merge.go)
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
	// BarrierJoins counts barrier calls (fsync, NBD FLUSH, ...) that
	// shared a barrier another call ran (group commit); Barriers counts
	// the barriers run.
	BarrierJoins uint64 `json:"barrier_joins"`
	// SyncsClean counts fsyncs that found nothing of their file to make
	// durable and ran no barrier.
	SyncsClean uint64 `json:"syncs_clean"`
	// LastBarrier is when the last barrier that succeeded ended (zero:
	// none yet in this process).
	LastBarrier time.Time `json:"last_barrier,omitzero"`
	PatchWrites uint64    `json:"patch_writes"`
	PatchBytes  uint64    `json:"patch_bytes"`
	Merges      uint64    `json:"merges"`
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
		BarrierJoins:      s.barrierJoins.Load(),
		SyncsClean:        s.syncsClean.Load(),
		PatchWrites:       s.patches.Load(),
		PatchBytes:        s.patchBytes.Load(),
		Merges:            s.merges.Load(),
	}
	if ns := s.lastBarrier.Load(); ns != 0 {
		out.LastBarrier = time.Unix(0, ns)
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
	} else {
		s.lastBarrier.Store(time.Now().UnixNano())
	}
	s.barrierLat.Since(start)
}

// barrierJoined records a call that shared a barrier another ran.
func (s *Stats) barrierJoined() {
	if s != nil {
		s.barrierJoins.Add(1)
	}
}

// syncClean records an fsync that needed no barrier.
func (s *Stats) syncClean() {
	if s != nil {
		s.syncsClean.Add(1)
	}
}

// patched records n patches of bytes plain bytes committed.
func (s *Stats) patched(n int, bytes int64) {
	if s != nil && n > 0 {
		s.patches.Add(uint64(n))
		s.patchBytes.Add(uint64(bytes))
	}
}

// merged records an extent the merger made a whole buffer.
func (s *Stats) merged() {
	if s != nil {
		s.merges.Add(1)
	}
}

// MergeQueue is the number of patched extents waiting for the merger.
func (e *Engine) MergeQueue() int {
	e.merges.mu.Lock()
	defer e.merges.mu.Unlock()
	return len(e.merges.list)
}

// DirtyBytes is the written data not yet sealed into a segment.
func (e *Engine) DirtyBytes() int64 { return e.dirtyBytes.Load() }
