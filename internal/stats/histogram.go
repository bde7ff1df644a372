// Package stats holds the small lock-free instruments the lower layers
// record into (latency histograms, per-operation tallies) without
// importing a metrics library. internal/telemetry turns them into
// Prometheus series and the monitor's JSON at read time.
package stats

import (
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds, in seconds, every latency histogram
// uses: 100 µs to about 52 s, doubling.
var LatencyBuckets = func() []float64 {
	b := make([]float64, 20)
	v := 0.0001
	for i := range b {
		b[i] = v
		v *= 2
	}
	return b
}()

// Histogram counts durations into LatencyBuckets. The zero value is not
// usable; NewHistogram returns one. Safe for concurrent use.
type Histogram struct {
	counts []atomic.Uint64 // per bucket (not cumulative); the last is +Inf
	sumNs  atomic.Int64
	n      atomic.Uint64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]atomic.Uint64, len(LatencyBuckets)+1)}
}

// Observe records one duration.
func (h *Histogram) Observe(d time.Duration) {
	if h == nil {
		return
	}
	s := d.Seconds()
	i := sort.SearchFloat64s(LatencyBuckets, s)
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
	h.n.Add(1)
}

// Since records the time since start.
func (h *Histogram) Since(start time.Time) { h.Observe(time.Since(start)) }

// HistogramSnapshot is a histogram's state: Counts[i] observations at or
// below Bounds[i] (cumulative, as Prometheus has them), plus the total.
type HistogramSnapshot struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"` // cumulative, len(Bounds)
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"` // seconds
}

// Snapshot returns the current state.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: LatencyBuckets, Counts: make([]uint64, len(LatencyBuckets))}
	if h == nil {
		return s
	}
	var cum uint64
	for i := range LatencyBuckets {
		cum += h.counts[i].Load()
		s.Counts[i] = cum
	}
	s.Count = cum + h.counts[len(LatencyBuckets)].Load()
	s.Sum = float64(h.sumNs.Load()) / 1e9
	return s
}

// Sub returns the observations between an earlier snapshot o and s.
func (s HistogramSnapshot) Sub(o HistogramSnapshot) HistogramSnapshot {
	if len(o.Counts) != len(s.Counts) {
		return s
	}
	out := HistogramSnapshot{Bounds: s.Bounds, Counts: make([]uint64, len(s.Counts)), Count: s.Count - o.Count, Sum: s.Sum - o.Sum}
	for i := range s.Counts {
		out.Counts[i] = s.Counts[i] - o.Counts[i]
	}
	return out
}

// Quantile estimates the q-quantile (0 < q < 1) in seconds by linear
// interpolation inside the bucket that holds it, as Prometheus's
// histogram_quantile does. It returns NaN without observations.
func (s HistogramSnapshot) Quantile(q float64) float64 {
	if s.Count == 0 || len(s.Counts) == 0 {
		return math.NaN()
	}
	rank := q * float64(s.Count)
	prevCount, prevBound := uint64(0), 0.0
	for i, c := range s.Counts {
		if float64(c) >= rank {
			inBucket := c - prevCount
			if inBucket == 0 {
				return s.Bounds[i]
			}
			return prevBound + (s.Bounds[i]-prevBound)*(rank-float64(prevCount))/float64(inBucket)
		}
		prevCount, prevBound = c, s.Bounds[i]
	}
	return s.Bounds[len(s.Bounds)-1] // in the +Inf bucket: the largest bound
}
