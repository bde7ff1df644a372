package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"ebbfs.dev/ebbfs/objstore"
)

// collector exports the process's own numbers: object-store requests by
// kind and prefix class, live bytes, reclamation progress. Values are read
// at scrape time from the components that keep them.
type collector struct {
	p     *process
	count *objstore.Counting

	requests, bytes, live, cycles, cycleFreed, cycleDeleted, cycleRepacks, metaPasses, build *prometheus.Desc
}

func newCollector(p *process, count *objstore.Counting) *collector {
	return &collector{
		p:     p,
		count: count,
		requests: prometheus.NewDesc("ebbfs_store_requests_total",
			"Object-store requests sent by this process, by operation and key space.", []string{"op", "space"}, nil),
		bytes: prometheus.NewDesc("ebbfs_store_bytes_total",
			"Object-store payload bytes, by direction (up: PUT bodies, down: GET results).", []string{"direction"}, nil),
		live: prometheus.NewDesc("ebbfs_live_bytes",
			"Frame bytes referenced by live extent pointers (sum of the segment counters).", nil, nil),
		cycles: prometheus.NewDesc("ebbfs_reclaim_cycles_total",
			"Reclamation cycles run since start.", nil, nil),
		cycleFreed: prometheus.NewDesc("ebbfs_reclaim_last_cycle_bytes_freed",
			"Object bytes deleted by the last reclamation cycle.", nil, nil),
		cycleDeleted: prometheus.NewDesc("ebbfs_reclaim_last_cycle_deleted_segments",
			"Segments deleted by the last reclamation cycle.", nil, nil),
		cycleRepacks: prometheus.NewDesc("ebbfs_reclaim_last_cycle_repacks",
			"Repack jobs completed by the last reclamation cycle.", nil, nil),
		metaPasses: prometheus.NewDesc("ebbfs_metagc_passes_total",
			"Metadata object GC passes run since start.", nil, nil),
		build: prometheus.NewDesc("ebbfs_build_info",
			"Constant 1, labelled with the version and whether this process is read-only.", []string{"version", "read_only"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.bytes, c.live, c.cycles, c.cycleFreed, c.cycleDeleted, c.cycleRepacks, c.metaPasses, c.build} {
		ch <- d
	}
}

// storeSpaces are the key spaces requests are broken down by.
var storeSpaces = map[string]string{"segments/": "segments", "meta/": "meta", "checkpoints/": "checkpoints"}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ro := "false"
	if c.p.e.ReadOnly() {
		ro = "true"
	}
	ch <- prometheus.MustNewConstMetric(c.build, prometheus.GaugeValue, 1, versionString(), ro)
	if c.count != nil {
		total := c.count.Snapshot()
		emit := func(space string, n objstore.Counts) {
			for op, v := range map[string]int64{
				"put": n.Put, "get": n.Get, "get_range": n.GetRange, "head": n.Head,
				"delete": n.Delete, "delete_many": n.DeleteMany, "list": n.List,
			} {
				ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(v), op, space)
			}
		}
		rest := total
		for prefix, space := range storeSpaces {
			n := c.count.CountsFor(prefix)
			emit(space, n)
			rest = rest.Sub(n)
		}
		emit("other", rest)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(total.BytesUp), "up")
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(total.BytesDown), "down")
	}
	if live, err := c.p.e.LiveBytes(); err == nil {
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(live))
	}
	if bg := c.p.bg.Load(); bg != nil {
		st, n := bg.r.LastCycle()
		ch <- prometheus.MustNewConstMetric(c.cycles, prometheus.CounterValue, float64(n))
		ch <- prometheus.MustNewConstMetric(c.cycleFreed, prometheus.GaugeValue, float64(st.BytesFreed))
		ch <- prometheus.MustNewConstMetric(c.cycleDeleted, prometheus.GaugeValue, float64(st.Deleted))
		ch <- prometheus.MustNewConstMetric(c.cycleRepacks, prometheus.GaugeValue, float64(st.Repacks))
		_, passes := bg.gc.LastPass()
		ch <- prometheus.MustNewConstMetric(c.metaPasses, prometheus.CounterValue, float64(passes))
	}
}
