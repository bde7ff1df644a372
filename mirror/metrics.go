package mirror

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a mirror's numbers (docs/METRICS.md, "Mirror").
type Collector struct {
	m     func() *Mirror
	descs map[string]*prometheus.Desc
}

// NewCollector exports the status and counters of the mirror m returns
// (nothing while it returns nil).
func NewCollector(m func() *Mirror) *Collector {
	c := &Collector{m: m, descs: map[string]*prometheus.Desc{}}
	for name, help := range metricHelp {
		c.descs[name] = prometheus.NewDesc(name, help, nil, nil)
	}
	return c
}

var metricHelp = map[string]string{
	"ebbfs_mirror_lag_seconds":           "Mirror: how far behind the source's durable state the mirror can be (time since the start of the newest probe after which the mirror held everything the source had made durable).",
	"ebbfs_mirror_lag_bytes":             "Mirror: bytes named by journals the mirror has read and not yet copied.",
	"ebbfs_mirror_journal":               "Mirror: the newest journal sequence copied.",
	"ebbfs_mirror_pending_deletes":       "Mirror: objects deleted from the source whose deletion waits for the retention.",
	"ebbfs_mirror_copied_objects_total":  "Mirror: objects copied to the mirror store.",
	"ebbfs_mirror_copied_bytes_total":    "Mirror: bytes copied to the mirror store.",
	"ebbfs_mirror_deleted_objects_total": "Mirror: objects deleted from the mirror store (after the retention).",
	"ebbfs_mirror_missing_objects_total": "Mirror: segments a journal named that were gone from the source before the mirror copied them.",
	"ebbfs_mirror_resyncs_total":         "Mirror: full copies (the first, and after a gap in the journals).",
	"ebbfs_mirror_errors_total":          "Mirror: rounds that failed (retried).",
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m()
	if m == nil {
		return
	}
	s := m.Status()
	g := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v)
	}
	n := func(name string, v int64) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, float64(v))
	}
	g("ebbfs_mirror_lag_seconds", s.LagSeconds)
	g("ebbfs_mirror_lag_bytes", float64(s.LagBytes))
	g("ebbfs_mirror_journal", float64(s.Journal))
	g("ebbfs_mirror_pending_deletes", float64(s.PendingDeletes))
	n("ebbfs_mirror_copied_objects_total", s.CopiedObjects)
	n("ebbfs_mirror_copied_bytes_total", s.CopiedBytes)
	n("ebbfs_mirror_deleted_objects_total", s.Deleted)
	n("ebbfs_mirror_missing_objects_total", s.Missing)
	n("ebbfs_mirror_resyncs_total", s.Resyncs)
	n("ebbfs_mirror_errors_total", s.Errors)
}
