package reclaim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/internal/worker"
)

// CleanerIdle is how long the tombstone cleaner sleeps when there is
// nothing to do and nobody woke it.
const CleanerIdle = 10 * time.Second

// The tombstone cleaner is stage 1 of reclamation: it removes the
// pointers of deleted files (tombstones written by unlinks) and of the
// ranges large truncates dropped (range tombstones), debiting the segment
// counters in the same transaction, so the cycle (stage 2) sees the
// segments' dead bytes. Each transaction is the engine's
// (Host.CleanTombstones, under its pointer lock); the loop, its wake-ups,
// its figures and its log are here. It runs on a worker of its own beside
// the cycle's, started by Start and stopped by Close.

// cleaner runs until its worker is closed: it cleans while there is work,
// then sleeps until a tombstone is written (Tombstoned) or CleanerIdle
// passes.
func (r *Reclaimer) cleaner(w *worker.Worker) {
	ctx := w.Context()
	for {
		tombs, extents, bytes, err := r.host.CleanTombstones(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Error("tombstone cleaner", "err", err)
		}
		r.opts.CleanerStats.cleaned(tombs, extents, bytes)
		if extents > 0 && err == nil {
			continue
		}
		if !w.Wait(CleanerIdle) || !r.cleanerPause(ctx) {
			return
		}
	}
}

// cleanerPause waits Options.CleanerDelay (test builds; real time, so
// that a test watching tombstones pending sees them under any time scale)
// and reports whether the cleaner should go on.
func (r *Reclaimer) cleanerPause(ctx context.Context) bool {
	if d := r.opts.CleanerDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

// CleanerStats counts what the tombstone cleaner did, for /metrics and the
// monitor. Give one in Options.CleanerStats; a nil *CleanerStats records
// nothing. Safe for concurrent use.
type CleanerStats struct {
	tombs   atomic.Uint64 // tombstones finished (file empty)
	extents atomic.Uint64 // extent pointers deleted
	bytes   atomic.Uint64 // frame bytes those pointers referenced
	batches atomic.Uint64

	mu struct {
		sync.Mutex
		last CleanerPass
	}
}

// NewCleanerStats returns an empty CleanerStats.
func NewCleanerStats() *CleanerStats { return &CleanerStats{} }

// CleanerPass describes one committed cleaner transaction.
type CleanerPass struct {
	At         time.Time `json:"at"`
	Tombstones int       `json:"tombstones"` // tombstones finished
	Extents    int       `json:"extents"`    // pointers deleted
	Bytes      int64     `json:"bytes"`      // their frame bytes
}

// CleanerSnapshot is CleanerStats at one moment; counters are cumulative
// since the process started.
type CleanerSnapshot struct {
	TombstonesProcessed uint64      `json:"tombstones_processed"`
	ExtentsCleaned      uint64      `json:"extents_cleaned"`
	BytesCleaned        uint64      `json:"bytes_cleaned"`
	CleanerBatches      uint64      `json:"cleaner_batches"`
	LastBatch           CleanerPass `json:"last_batch"`
}

// Snapshot returns the counters so far.
func (s *CleanerStats) Snapshot() CleanerSnapshot {
	if s == nil {
		return CleanerSnapshot{}
	}
	out := CleanerSnapshot{
		TombstonesProcessed: s.tombs.Load(),
		ExtentsCleaned:      s.extents.Load(),
		BytesCleaned:        s.bytes.Load(),
		CleanerBatches:      s.batches.Load(),
	}
	s.mu.Lock()
	out.LastBatch = s.mu.last
	s.mu.Unlock()
	return out
}

// cleaned records a committed cleaner transaction.
func (s *CleanerStats) cleaned(tombs, extents int, bytes int64) {
	if s == nil || (tombs == 0 && extents == 0) {
		return
	}
	s.tombs.Add(uint64(tombs))
	s.extents.Add(uint64(extents))
	s.bytes.Add(uint64(bytes))
	s.batches.Add(1)
	s.mu.Lock()
	s.mu.last = CleanerPass{At: time.Now(), Tombstones: tombs, Extents: extents, Bytes: bytes}
	s.mu.Unlock()
}
