package telemetry

import (
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/reclaim"
)

// HistoryBucket is the width of one point of the tombstone-cleanup chart,
// HistoryLen how many the page shows (one hour).
const (
	HistoryBucket = 10 * time.Second
	HistoryLen    = 360
)

// TombPoint is the cleaner's work in one bucket.
type TombPoint struct {
	T          int64  `json:"t"` // bucket start, Unix milliseconds
	Tombstones uint64 `json:"tombstones"`
	Extents    uint64 `json:"extents"`
}

// CyclePoint is one reclamation cycle that freed or moved something.
type CyclePoint struct {
	End        time.Time `json:"end"`
	BytesFreed int64     `json:"bytes_freed"`
	Deleted    int       `json:"deleted"`
	Repacks    int       `json:"repacks"`
	Trigger    string    `json:"trigger"`
}

// HistoryReply is GET /v1/history.
type HistoryReply struct {
	BucketSeconds float64      `json:"bucket_seconds"`
	NowMs         int64        `json:"now_ms"`
	Tombstones    []TombPoint  `json:"tombstones"`
	Cycles        []CyclePoint `json:"cycles"`
}

// History keeps the last hour of the cleaner's work in 10 s buckets. It
// samples the cumulative counters at every bucket boundary (a worker on
// the injected clock); the bucket in progress is computed at request time.
type History struct {
	stats *reclaim.CleanerStats
	clk   clock.Clock
	w     *worker.Worker // nil until Start

	mu struct {
		sync.Mutex
		points []TombPoint // finished buckets, oldest first
		start  time.Time   // start of the bucket in progress
		base   reclaim.CleanerSnapshot
	}
}

// NewHistory returns the history of s on clk (nil: the real clock).
func NewHistory(s *reclaim.CleanerStats, clk clock.Clock) *History {
	if clk == nil {
		clk = clock.Real{}
	}
	h := &History{stats: s, clk: clk}
	h.mu.start = clk.Now().Truncate(HistoryBucket)
	h.mu.base = s.Snapshot()
	return h
}

// Start runs the bucket ticker until Close.
func (h *History) Start() {
	h.w = worker.Start("history", h.clk, func(w *worker.Worker) {
		for {
			now := h.clk.Now()
			next := now.Truncate(HistoryBucket).Add(HistoryBucket)
			select {
			case <-w.Context().Done():
				return
			case <-w.After(next.Sub(now)):
				h.roll(next)
			}
		}
	})
}

// Close stops the ticker and waits for it; a history never started is
// closed at once.
func (h *History) Close() {
	if h.w != nil {
		h.w.Close()
	}
}

// roll finishes the bucket in progress at boundary at.
func (h *History) roll(at time.Time) {
	cur := h.stats.Snapshot()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.points = append(h.mu.points, h.pointLocked(cur))
	if len(h.mu.points) > HistoryLen {
		h.mu.points = append(h.mu.points[:0:0], h.mu.points[len(h.mu.points)-HistoryLen:]...)
	}
	h.mu.start, h.mu.base = at, cur
}

func (h *History) pointLocked(cur reclaim.CleanerSnapshot) TombPoint {
	return TombPoint{T: h.mu.start.UnixMilli(), Tombstones: cur.TombstonesProcessed - h.mu.base.TombstonesProcessed,
		Extents: cur.ExtentsCleaned - h.mu.base.ExtentsCleaned}
}

// Points returns the finished buckets and the one in progress.
func (h *History) Points() []TombPoint {
	cur := h.stats.Snapshot()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append(make([]TombPoint, 0, len(h.mu.points)+1), h.mu.points...)
	return append(out, h.pointLocked(cur))
}
