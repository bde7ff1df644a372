package main

import (
	"sync"
	"time"

	"ebbfs.dev/ebbfs/reclaim"
)

// historyBucket is the width of one point of the tombstone-cleanup chart,
// historyLen how many the page shows (one hour).
const (
	historyBucket = 10 * time.Second
	historyLen    = 360
)

// tombPoint is the cleaner's work in one bucket.
type tombPoint struct {
	T          int64  `json:"t"` // bucket start, Unix milliseconds
	Tombstones uint64 `json:"tombstones"`
	Extents    uint64 `json:"extents"`
}

// cyclePoint is one reclamation cycle that freed or moved something.
type cyclePoint struct {
	End        time.Time `json:"end"`
	BytesFreed int64     `json:"bytes_freed"`
	Deleted    int       `json:"deleted"`
	Repacks    int       `json:"repacks"`
	Trigger    string    `json:"trigger"`
}

// historyReply is GET /v1/history.
type historyReply struct {
	BucketSeconds float64      `json:"bucket_seconds"`
	NowMs         int64        `json:"now_ms"`
	Tombstones    []tombPoint  `json:"tombstones"`
	Cycles        []cyclePoint `json:"cycles"`
}

// history keeps the last hour of the cleaner's work in 10 s buckets. It
// samples the cumulative counters at every bucket boundary (a ticker);
// the bucket in progress is computed at request time.
type history struct {
	stats *reclaim.CleanerStats
	stop  chan struct{}
	done  chan struct{}

	mu struct {
		sync.Mutex
		points []tombPoint // finished buckets, oldest first
		start  time.Time   // start of the bucket in progress
		base   reclaim.CleanerSnapshot
	}
}

func newHistory(s *reclaim.CleanerStats) *history {
	h := &history{stats: s, stop: make(chan struct{}), done: make(chan struct{})}
	h.mu.start = time.Now().Truncate(historyBucket)
	h.mu.base = s.Snapshot()
	return h
}

// start runs the bucket ticker until close.
func (h *history) start() {
	go func() {
		defer close(h.done)
		for {
			next := time.Now().Truncate(historyBucket).Add(historyBucket)
			select {
			case <-h.stop:
				return
			case <-time.After(time.Until(next)):
				h.roll(next)
			}
		}
	}()
}

func (h *history) close() {
	close(h.stop)
	<-h.done
}

// roll finishes the bucket in progress at boundary at.
func (h *history) roll(at time.Time) {
	cur := h.stats.Snapshot()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.points = append(h.mu.points, h.pointLocked(cur))
	if len(h.mu.points) > historyLen {
		h.mu.points = append(h.mu.points[:0:0], h.mu.points[len(h.mu.points)-historyLen:]...)
	}
	h.mu.start, h.mu.base = at, cur
}

func (h *history) pointLocked(cur reclaim.CleanerSnapshot) tombPoint {
	return tombPoint{T: h.mu.start.UnixMilli(), Tombstones: cur.TombstonesProcessed - h.mu.base.TombstonesProcessed,
		Extents: cur.ExtentsCleaned - h.mu.base.ExtentsCleaned}
}

// points returns the finished buckets and the one in progress.
func (h *history) points() []tombPoint {
	cur := h.stats.Snapshot()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append(make([]tombPoint, 0, len(h.mu.points)+1), h.mu.points...)
	return append(out, h.pointLocked(cur))
}
