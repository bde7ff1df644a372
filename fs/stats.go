package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/internal/stats"
)

// Stats collects what the engine's background work did, for /metrics and
// the monitor: the tombstone cleaner (stage 1 of reclamation) and the
// durability barrier. Give one in Options.Stats; a nil *Stats records
// nothing. Safe for concurrent use.
type Stats struct {
	tombstones      atomic.Uint64 // tombstones written by unlinks
	cleanedTombs    atomic.Uint64 // tombstones the cleaner finished (file empty)
	cleanedExtents  atomic.Uint64 // extent pointers the cleaner deleted
	cleanedBytes    atomic.Uint64 // frame bytes those pointers referenced
	cleanerBatches  atomic.Uint64
	barriers        atomic.Uint64
	barrierFailures atomic.Uint64
	barrierLat      *stats.Histogram

	mu struct {
		sync.Mutex
		last CleanerPass
	}
}

// CleanerPass describes one committed cleaner transaction.
type CleanerPass struct {
	At         time.Time `json:"at"`
	Tombstones int       `json:"tombstones"` // tombstones finished
	Extents    int       `json:"extents"`    // pointers deleted
	Bytes      int64     `json:"bytes"`      // their frame bytes
}

// NewStats returns an empty Stats.
func NewStats() *Stats { return &Stats{barrierLat: stats.NewHistogram()} }

// StatsSnapshot is Stats at one moment; counters are cumulative since
// the process started.
type StatsSnapshot struct {
	TombstonesCreated   uint64                  `json:"tombstones_created"`
	TombstonesProcessed uint64                  `json:"tombstones_processed"`
	ExtentsCleaned      uint64                  `json:"extents_cleaned"`
	BytesCleaned        uint64                  `json:"bytes_cleaned"`
	CleanerBatches      uint64                  `json:"cleaner_batches"`
	LastBatch           CleanerPass             `json:"last_batch"`
	Barriers            uint64                  `json:"barriers"`
	BarrierFailures     uint64                  `json:"barrier_failures"`
	BarrierLatency      stats.HistogramSnapshot `json:"barrier_latency"`
}

// Snapshot returns the counters so far.
func (s *Stats) Snapshot() StatsSnapshot {
	if s == nil {
		return StatsSnapshot{BarrierLatency: stats.NewHistogram().Snapshot()}
	}
	out := StatsSnapshot{
		TombstonesCreated:   s.tombstones.Load(),
		TombstonesProcessed: s.cleanedTombs.Load(),
		ExtentsCleaned:      s.cleanedExtents.Load(),
		BytesCleaned:        s.cleanedBytes.Load(),
		CleanerBatches:      s.cleanerBatches.Load(),
		Barriers:            s.barriers.Load(),
		BarrierFailures:     s.barrierFailures.Load(),
		BarrierLatency:      s.barrierLat.Snapshot(),
	}
	s.mu.Lock()
	out.LastBatch = s.mu.last
	s.mu.Unlock()
	return out
}

// tombstoned records a tombstone written by an unlink.
func (s *Stats) tombstoned() {
	if s != nil {
		s.tombstones.Add(1)
	}
}

// cleaned records a committed cleaner transaction.
func (s *Stats) cleaned(tombs, extents int, bytes int64) {
	if s == nil || (tombs == 0 && extents == 0) {
		return
	}
	s.cleanedTombs.Add(uint64(tombs))
	s.cleanedExtents.Add(uint64(extents))
	s.cleanedBytes.Add(uint64(bytes))
	s.cleanerBatches.Add(1)
	s.mu.Lock()
	s.mu.last = CleanerPass{At: time.Now(), Tombstones: tombs, Extents: extents, Bytes: bytes}
	s.mu.Unlock()
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

// cleanerPause waits Options.CleanerDelay (test builds) unless ctx ends.
func (e *Engine) cleanerPause(ctx context.Context) {
	if d := e.opts.CleanerDelay; d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}
