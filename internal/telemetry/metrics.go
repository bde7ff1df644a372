package telemetry

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// Collector exports the process's own numbers (docs/METRICS.md lists every
// series). Values are read at scrape time from the components that keep
// them: cumulative counters from the recorders, the footprint from the
// sampler's cached counter scan.
type Collector struct {
	src     *Source
	sampler *Sampler
	descs   []*prometheus.Desc

	build, lagDesc, memLimit *prometheus.Desc

	ha haDescs // standby writers (ha_metrics.go)

	storeRequests, storeBytes, storeDuration, storeErrors, storeUnreachable *prometheus.Desc

	segments, segmentBytes, segmentStored, live, metaObjects, metaBytes *prometheus.Desc

	tombCreated, tombProcessed, tombPending, tombPendingBytes, cleanerExtents, cleanerBytes, cleanerBatches *prometheus.Desc

	cycles, segDeleted, freed, staleCounters, repaired, repacks, relocFrames, relocBytes, cycleDuration, reclaimRequests, repackJobs *prometheus.Desc

	sweeps, orphans, orphanBytes *prometheus.Desc

	metaPasses, metaDeleted, metaDeletedBytes *prometheus.Desc

	barrierDuration, barrierFailures, dirty *prometheus.Desc
	barrierJoins, syncsClean                *prometheus.Desc

	patchWrites, patchBytes, merges, mergeQueue *prometheus.Desc

	cacheHits, cacheMisses, cacheBytes, cacheEntries, cacheFetched, cacheSkipped, cacheAhead, cacheWaits, cachePieces, authFailures *prometheus.Desc

	fuseOps, fuseErrors, fuseBytes, fuseDuration, nbdOps, nbdErrors, nbdBytes, nbdDuration *prometheus.Desc
}

// NewCollector exports src's numbers; the footprint comes from the
// sampler's cached counter scan.
func NewCollector(src *Source, sampler *Sampler) *Collector {
	c := &Collector{src: src, sampler: sampler}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		desc := prometheus.NewDesc(name, help, labels, nil)
		c.descs = append(c.descs, desc)
		return desc
	}
	c.build = d("ebbfs_build_info", "Constant 1, labelled with the version and the role of this process (writer, standby, replica, checkpoint).", "version", "role")
	c.lagDesc = d("ebbfs_replica_lag_seconds", "Replicas: how long ago the last probe of the writer's journal found nothing newer than what this replica serves (the newest durable state is at most this old here).")
	c.ha = newHADescs(d)
	c.memLimit = d("ebbfs_memory_limit_bytes", "The Go memory limit the process runs under (the cache plus headroom, or GOMEMLIMIT).")

	c.storeRequests = d("ebbfs_store_requests_total", "Object-store requests sent by this process, by operation and key space.", "op", "space")
	c.storeBytes = d("ebbfs_store_bytes_total", "Object-store payload bytes, by direction (up: PUT bodies, down: GET results).", "direction")
	c.storeDuration = d("ebbfs_store_request_duration_seconds", "Object-store request latency, by operation.", "op")
	c.storeUnreachable = d("ebbfs_store_unreachable_seconds", "How long every object-store request has been failing, or none has been answered while one waits 15 s or more (0 while the store answers).")
	c.storeErrors = d("ebbfs_store_request_errors_total", "Object-store requests that failed (not-found and lost conditional PUTs are answers, not failures), by operation.", "op")

	c.segments = d("ebbfs_segments", "Segments by state: live (holds live data), fragmented (live, with dead frames), dead (no live data), awaiting_delete (dead, deadline recorded), pinned (held by a persistent checkpoint).", "state")
	c.segmentBytes = d("ebbfs_segment_bytes", "Bytes by state: live frame bytes, fragmented (dead frames inside live segments), dead and awaiting_delete (object bytes), pinned (bytes a persistent checkpoint holds).", "state")
	c.segmentStored = d("ebbfs_segment_stored_bytes", "Object bytes of every segment with a counter (what segments/ holds, orphans aside).")
	c.live = d("ebbfs_live_bytes", "Frame bytes referenced by live extent pointers (sum of the segment counters).")
	c.metaObjects = d("ebbfs_metadata_objects", "Objects under meta/ (journal, manifests, SSTs); listed at most every 30 s.")
	c.metaBytes = d("ebbfs_metadata_bytes", "Bytes under meta/; listed at most every 30 s.")

	c.tombCreated = d("ebbfs_tombstones_created_total", "Tombstones written by unlinks of files of more than 10 extents.")
	c.tombProcessed = d("ebbfs_tombstones_processed_total", "Tombstones the cleaner finished (every extent of the file deleted).")
	c.tombPending = d("ebbfs_tombstones_pending", "Deleted files whose extents await the tombstone cleaner.")
	c.tombPendingBytes = d("ebbfs_tombstone_pending_bytes", "Frame bytes the extents of pending tombstones reference.")
	c.cleanerExtents = d("ebbfs_cleaner_extents_deleted_total", "Extent pointers deleted by the tombstone cleaner.")
	c.cleanerBytes = d("ebbfs_cleaner_deleted_bytes_total", "Frame bytes of the extent pointers the tombstone cleaner deleted.")
	c.cleanerBatches = d("ebbfs_cleaner_batches_total", "Cleaner transactions committed.")

	c.cycles = d("ebbfs_reclaim_cycles_total", "Reclamation cycles, by result (ok, blocked: reclaimed nothing by rule, error).", "result")
	c.segDeleted = d("ebbfs_reclaim_segments_deleted_total", "Dead segments deleted by reclamation cycles.")
	c.freed = d("ebbfs_reclaim_freed_bytes_total", "Object bytes deleted by reclamation cycles.")
	c.staleCounters = d("ebbfs_reclaim_stale_counters_total", "Counters dropped because their segment was already gone.")
	c.repaired = d("ebbfs_reclaim_repaired_counters_total", "Dead-looking segments kept because pointers still referenced them (counter repaired).")
	c.repacks = d("ebbfs_reclaim_repacks_total", "Repack jobs, by result (ok, error).", "result")
	c.relocFrames = d("ebbfs_reclaim_relocated_frames_total", "Extent pointers moved to repack outputs.")
	c.relocBytes = d("ebbfs_reclaim_relocated_bytes_total", "Frame bytes written to repack outputs.")
	c.cycleDuration = d("ebbfs_reclaim_cycle_duration_seconds", "Duration of reclamation cycles (on the reclamation clock).")
	c.reclaimRequests = d("ebbfs_reclaim_store_requests_total", "Object-store requests sent by reclamation (cycles, repacks, sweeps), by operation.", "op")
	c.repackJobs = d("ebbfs_reclaim_repack_jobs", "Repack jobs in flight.")

	c.sweeps = d("ebbfs_orphan_sweeps_total", "Orphan sweeps, by result (ok, error).", "result")
	c.orphans = d("ebbfs_orphans_deleted_total", "Counter-less segment objects deleted by orphan sweeps.")
	c.orphanBytes = d("ebbfs_orphan_deleted_bytes_total", "Bytes of the orphans deleted.")

	c.metaPasses = d("ebbfs_metagc_passes_total", "Metadata object GC passes, by result (ok, error).", "result")
	c.metaDeleted = d("ebbfs_metagc_deleted_objects_total", "Unreferenced meta/ objects (manifests, SSTs) deleted.")
	c.metaDeletedBytes = d("ebbfs_metagc_deleted_bytes_total", "Bytes of the meta/ objects deleted.")

	c.barrierDuration = d("ebbfs_barrier_duration_seconds", "Durability barriers (fsync, NBD flush, periodic flush, ebbfs flush): seal, upload, commit, journal.")
	c.barrierFailures = d("ebbfs_barrier_failures_total", "Barriers that failed (the data stays dirty and is retried).")
	c.barrierJoins = d("ebbfs_barrier_joins_total", "Barrier calls (fsync, NBD flush, ...) that shared a barrier another call ran (group commit).")
	c.syncsClean = d("ebbfs_fsync_clean_total", "fsyncs that found nothing of their file to make durable: no barrier, no request.")
	c.dirty = d("ebbfs_dirty_bytes", "Written data not yet sealed into a segment.")

	c.patchWrites = d("ebbfs_patch_writes_total", "Patches committed: writes into part of an extent stored as only their bytes (docs/PATCHES.md).")
	c.patchBytes = d("ebbfs_patch_bytes_total", "Plain bytes of the patches committed.")
	c.merges = d("ebbfs_merges_total", "Patched extents the merger folded into a whole buffer, which the next flush stores as one frame.")
	c.mergeQueue = d("ebbfs_merge_queue", "Patched extents waiting for the merger.")

	c.cacheHits = d("ebbfs_cache_hits_total", "Frames served without a store request, by level (memory, disk, pending: a segment still uploading).", "level")
	c.cacheMisses = d("ebbfs_cache_misses_total", "Frames fetched from the store.")
	c.cacheBytes = d("ebbfs_cache_bytes", "Bytes held by the frame caches, by level (memory, disk, readahead).", "level")
	c.cacheEntries = d("ebbfs_cache_entries", "Entries in the frame caches, by level (memory: runs of frames, disk: frames).", "level")
	c.cacheFetched = d("ebbfs_cache_fetched_bytes_total", "Bytes the reads of missed frames fetched from the store.")
	c.cacheAhead = d("ebbfs_cache_readahead_frames_total", "Frames decrypted from sealed bytes read ahead (local store).")
	c.cacheWaits = d("ebbfs_cache_fetch_waits_total", "Frames a read waited for another read's fetch of (a read-ahead, a concurrent request) rather than fetching them again.")
	c.cachePieces = d("ebbfs_cache_piece_reads_total", "Random reads served from the pieces fetched for them alone (no locality in a file larger than the disk cache), not from a whole frame.")
	c.cacheSkipped = d("ebbfs_cache_disk_skipped_bytes_total", "Frame bytes the disk cache left out because its write queue was full (the cache disk slower than uploads and fetches).")
	c.authFailures = d("ebbfs_frame_auth_failures_total", "Frames or segment directories that failed authentication or checks, by where they came from (store: reported as EIO; disk_cache: dropped and fetched again).", "source")

	c.fuseOps = d("ebbfs_fuse_operations_total", "FUSE requests, by operation.", "op")
	c.fuseErrors = d("ebbfs_fuse_operation_errors_total", "FUSE requests answered with an error (not ENOENT, ENODATA or EINTR), by operation.", "op")
	c.fuseBytes = d("ebbfs_fuse_bytes_total", "Bytes read and written through FUSE, by operation (read, write, copy_file_range).", "op")
	c.fuseDuration = d("ebbfs_fuse_operation_duration_seconds", "FUSE request latency, by operation.", "op")
	c.nbdOps = d("ebbfs_nbd_operations_total", "NBD commands, by command (read, write, trim, write_zeroes, flush, block_status).", "op")
	c.nbdErrors = d("ebbfs_nbd_operation_errors_total", "NBD commands that failed, by command.", "op")
	c.nbdBytes = d("ebbfs_nbd_bytes_total", "Bytes read and written through NBD, by command (read, write).", "op")
	c.nbdDuration = d("ebbfs_nbd_operation_duration_seconds", "NBD command latency, by command.", "op")
	return c
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// storeSpaces are the key spaces requests are broken down by.
var storeSpaces = map[string]string{"segments/": "segments", "meta/": "meta", "checkpoints/": "checkpoints"}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, h stats.HistogramSnapshot, labels ...string) {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, labels...)
}

func CountsByOp(n objstore.Counts) map[string]int64 {
	return map[string]int64{"put": n.Put, "get": n.Get, "get_range": n.GetRange, "head": n.Head,
		"delete": n.Delete, "delete_many": n.DeleteMany, "list": n.List}
}

// opSeries exports a stats.Ops as counts, errors, bytes (for the byte ops)
// and a latency histogram by op.
func opSeries(ch chan<- prometheus.Metric, ops map[string]stats.OpSnapshot, n, errs, bytes, dur *prometheus.Desc, byteOps ...string) {
	for op, s := range ops {
		counter(ch, n, float64(s.Count), op)
		counter(ch, errs, float64(s.Errors), op)
		histogram(ch, dur, s.Latency, op)
	}
	if bytes != nil {
		for _, op := range byteOps {
			counter(ch, bytes, float64(ops[op].Bytes), op)
		}
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	p := c.src
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gauge(ch, c.build, 1, p.Version, map[string]string{RoleWriter: "writer", RoleReplica: "replica", RoleStandby: "standby", RoleCheckpoint: "checkpoint"}[p.Role()])
	gauge(ch, c.memLimit, float64(memoryLimit()))
	if p.Lag != nil {
		gauge(ch, c.lagDesc, p.Lag.Get(ctx).LagSeconds)
	}
	c.collectStore(ch)
	c.collectEngine(ch)
	c.collectHA(ch)
	r, gc := p.reclamation()
	if r == nil {
		return
	}
	c.collectFootprint(ctx, ch, r, gc)
	c.collectReclaim(ch, r, gc)
}

// collectStore exports the object store's requests, bytes and latencies.
func (c *Collector) collectStore(ch chan<- prometheus.Metric) {
	p := c.src
	if p.Count != nil {
		total := p.Count.Snapshot()
		emit := func(space string, n objstore.Counts) {
			for op, v := range CountsByOp(n) {
				counter(ch, c.storeRequests, float64(v), op, space)
			}
		}
		rest := total
		for prefix, space := range storeSpaces {
			n := p.Count.CountsFor(prefix)
			emit(space, n)
			rest = rest.Sub(n)
		}
		emit("other", rest)
		counter(ch, c.storeBytes, float64(total.BytesUp), "up")
		counter(ch, c.storeBytes, float64(total.BytesDown), "down")
	}
	if p.Timed != nil {
		for op, s := range p.Timed.Ops().Snapshot() {
			histogram(ch, c.storeDuration, s.Latency, op)
			counter(ch, c.storeErrors, float64(s.Errors), op)
		}
		down := 0.0
		if since, _ := p.Timed.Health(); !since.IsZero() {
			down = time.Since(since).Seconds()
		}
		gauge(ch, c.storeUnreachable, down)
	}
}

// collectEngine exports the cleaner's counters, barriers, caches and the
// FUSE and NBD operations.
func (c *Collector) collectEngine(ch chan<- prometheus.Metric) {
	p := c.src
	es, cs := p.FS.Snapshot(), p.Cleaner.Snapshot()
	if !p.Engine.ReadOnly() {
		counter(ch, c.tombCreated, float64(es.TombstonesCreated))
		counter(ch, c.tombProcessed, float64(cs.TombstonesProcessed))
		counter(ch, c.cleanerExtents, float64(cs.ExtentsCleaned))
		counter(ch, c.cleanerBytes, float64(cs.BytesCleaned))
		counter(ch, c.cleanerBatches, float64(cs.CleanerBatches))
		histogram(ch, c.barrierDuration, es.BarrierLatency)
		counter(ch, c.barrierFailures, float64(es.BarrierFailures))
		counter(ch, c.barrierJoins, float64(es.BarrierJoins))
		counter(ch, c.syncsClean, float64(es.SyncsClean))
		gauge(ch, c.dirty, float64(p.Engine.DirtyBytes()))
		counter(ch, c.patchWrites, float64(es.PatchWrites))
		counter(ch, c.patchBytes, float64(es.PatchBytes))
		counter(ch, c.merges, float64(es.Merges))
		gauge(ch, c.mergeQueue, float64(p.Engine.MergeQueue()))
	}
	rs := p.Engine.Reader().Stats()
	counter(ch, c.cacheHits, float64(rs.MemHits), "memory")
	counter(ch, c.cacheHits, float64(rs.DiskHits), "disk")
	counter(ch, c.cacheMisses, float64(rs.Misses))
	gauge(ch, c.cacheBytes, float64(rs.MemBytes), "memory")
	gauge(ch, c.cacheBytes, float64(rs.DiskBytes), "disk")
	gauge(ch, c.cacheBytes, float64(rs.AheadBytes), "readahead")
	gauge(ch, c.cacheEntries, float64(rs.MemEntries), "memory")
	gauge(ch, c.cacheEntries, float64(rs.DiskEntries), "disk")
	counter(ch, c.cacheFetched, float64(rs.BytesFetched))
	counter(ch, c.cacheAhead, float64(rs.AheadHits))
	counter(ch, c.cacheWaits, float64(rs.Waits))
	counter(ch, c.cachePieces, float64(rs.PieceHits))
	counter(ch, c.cacheSkipped, float64(rs.DiskSkipped))
	counter(ch, c.authFailures, float64(rs.Corrupt), "store")
	counter(ch, c.authFailures, float64(rs.DiskCorrupt), "disk_cache")

	opSeries(ch, p.FUSEOps.Snapshot(), c.fuseOps, c.fuseErrors, c.fuseBytes, c.fuseDuration, "read", "write", "copy_file_range")
	opSeries(ch, p.NBDOps.Snapshot(), c.nbdOps, c.nbdErrors, c.nbdBytes, c.nbdDuration, "read", "write")

	if live, err := p.Engine.LiveBytes(); err == nil {
		gauge(ch, c.live, float64(live))
	}
}

// collectFootprint exports the writer's segment footprint.
func (c *Collector) collectFootprint(ctx context.Context, ch chan<- prometheus.Metric, r *reclaim.Reclaimer, gc *reclaim.MetaGC) {
	sp, _, _ := c.sampler.space(ctx, r, gc)
	if sp == nil {
		return
	}
	pinned := int64(0)
	for _, b := range sp.Pinned {
		pinned = max(pinned, b)
	}
	pinnedSegs := 0
	if pinned > 0 {
		pinnedSegs = sp.DeadSegments + sp.FragmentedSegments
	}
	for _, s := range []struct {
		state string
		n     int
		b     int64
	}{
		{"live", sp.LiveSegments, sp.LiveBytes},
		{"fragmented", sp.FragmentedSegments, sp.FragmentedBytes},
		{"dead", sp.DeadSegments, sp.DeadBytes},
		{"awaiting_delete", sp.AwaitingSegments, sp.AwaitingBytes},
		{"pinned", pinnedSegs, pinned},
	} {
		gauge(ch, c.segments, float64(s.n), s.state)
		gauge(ch, c.segmentBytes, float64(s.b), s.state)
	}
	gauge(ch, c.segmentStored, float64(sp.SegmentBytes))
	gauge(ch, c.tombPending, float64(sp.TombstonesPending))
	gauge(ch, c.tombPendingBytes, float64(sp.TombstoneBytes))
	if sp.MetaError == "" {
		gauge(ch, c.metaObjects, float64(sp.MetaObjects))
		gauge(ch, c.metaBytes, float64(sp.MetaBytes))
	}
}

// collectReclaim exports reclamation's and the metadata GC's totals.
func (c *Collector) collectReclaim(ch chan<- prometheus.Metric, r *reclaim.Reclaimer, gc *reclaim.MetaGC) {
	t := r.Totals()
	for res, n := range t.Cycles {
		counter(ch, c.cycles, float64(n), res)
	}
	counter(ch, c.segDeleted, float64(t.Deleted))
	counter(ch, c.freed, float64(t.BytesFreed))
	counter(ch, c.staleCounters, float64(t.StaleDropped))
	counter(ch, c.repaired, float64(t.Repaired))
	counter(ch, c.repacks, float64(t.Repacks), "ok")
	counter(ch, c.repacks, float64(t.RepackFailed), "error")
	counter(ch, c.relocFrames, float64(t.RelocatedFrames))
	counter(ch, c.relocBytes, float64(t.RelocatedBytes))
	histogram(ch, c.cycleDuration, t.CycleDuration)
	for op, v := range CountsByOp(r.Requests()) {
		counter(ch, c.reclaimRequests, float64(v), op)
	}
	gauge(ch, c.repackJobs, float64(len(r.Activity().Jobs)))
	for res, n := range t.Sweeps {
		counter(ch, c.sweeps, float64(n), res)
	}
	counter(ch, c.orphans, float64(t.OrphansDeleted))
	counter(ch, c.orphanBytes, float64(t.OrphanBytes))
	mt, _ := gc.Totals()
	for res, n := range mt.Passes {
		counter(ch, c.metaPasses, float64(n), res)
	}
	counter(ch, c.metaDeleted, float64(mt.Deleted))
	counter(ch, c.metaDeletedBytes, float64(mt.Bytes))
}
