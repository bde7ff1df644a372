package main

import (
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
	"ebbfs.dev/ebbfs/segment"
)

// routeMonitor serves monitorState: everything `ebbfs monitor` and the
// status page show, in one JSON document.
const (
	routeMonitor = "/v1/monitor"
	routeHistory = "/v1/history"
)

// Roles of a running process.
const (
	roleWriter     = "writer"
	roleReplica    = "replica"
	roleCheckpoint = "checkpoint reader"
)

// monitorState is GET /v1/monitor. Counters are cumulative since the
// process started; clients compute rates from two samples.
type monitorState struct {
	At         time.Time `json:"at"`
	Role       string    `json:"role"`
	Checkpoint string    `json:"checkpoint,omitempty"` // the checkpoint a checkpoint reader serves
	Version    string    `json:"version"`
	PID        int       `json:"pid"`
	Store      string    `json:"store"`
	Mountpoint string    `json:"mountpoint"`
	StartedAt  time.Time `json:"started_at"`
	UptimeSec  float64   `json:"uptime_seconds"`
	NBD        []string  `json:"nbd,omitempty"`

	Replica *replicaState `json:"replica,omitempty"`

	// StoreUnreachableSince is set while every store request fails: when
	// that began, and the last error.
	StoreUnreachableSince time.Time `json:"store_unreachable_since,omitzero"`
	StoreLastError        string    `json:"store_last_error,omitempty"`

	FUSE   map[string]stats.OpSnapshot `json:"fuse"`
	NBDOps map[string]stats.OpSnapshot `json:"nbd_ops"`

	StoreRequests objstore.Counts             `json:"store_requests"`
	StoreOps      map[string]stats.OpSnapshot `json:"store_ops"`

	Space      *spaceReply `json:"space,omitempty"`
	SpaceError string      `json:"space_error,omitempty"`
	SpaceAt    time.Time   `json:"space_at,omitzero"`

	Engine      engineStats         `json:"engine"`
	DirtyBytes  int64               `json:"dirty_bytes"`
	Cache       segment.ReaderStats `json:"cache"`
	MemoryRSS   int64               `json:"memory_rss"`
	MemoryLimit int64               `json:"memory_limit"`

	Reclaim         *reclaim.Activity `json:"reclaim,omitempty"`
	ReclaimTotals   *reclaim.Totals   `json:"reclaim_totals,omitempty"`
	ReclaimRequests *objstore.Counts  `json:"reclaim_requests,omitempty"`
	MetaGC          *metaGCState      `json:"metagc,omitempty"`

	Checkpoints     []checkpoint.Record `json:"checkpoints"`
	CheckpointError string              `json:"checkpoint_error,omitempty"`
}

// metaGCState is the metadata object GC's part of monitorState.
type metaGCState struct {
	Passes int                  `json:"passes"`
	LastAt time.Time            `json:"last_at,omitzero"`
	Last   reclaim.MetaGCStats  `json:"last"`
	Error  string               `json:"error,omitempty"`
	Next   time.Time            `json:"next,omitzero"`
	Totals reclaim.MetaGCTotals `json:"totals"`
}

// Cache lifetimes: the parts of the state that cost work (a counter scan)
// or requests (listings) are shared by every client within these.
const (
	spaceTTL       = time.Second
	metaTTL        = 30 * time.Second
	checkpointsTTL = 10 * time.Second
)

// sampler builds monitorState for /v1/monitor, /metrics and the page.
type sampler struct {
	p *process

	// Listed from the store, refreshed in the background so that an
	// unreachable store does not stall the readers of the state.
	ckpts refreshed[[]checkpoint.Record]
	meta  refreshed[metaFootprint]

	mu struct {
		sync.Mutex
		space     *spaceReply
		spaceGen  uint64        // spaceGeneration when space was computed
		spaceTook time.Duration // how long that computation took
		spaceErr  string
		spaceAt   time.Time
	}
}

// metaFootprint is the size of meta/.
type metaFootprint struct {
	objects int
	bytes   int64
}

// checkpoints returns the checkpoint list, listed at most every
// checkpointsTTL (see refreshed: while the store does not answer, the
// last list and the error).
func (s *sampler) checkpoints(ctx context.Context) ([]checkpoint.Record, string) {
	recs, errStr, _ := s.ckpts.get(ctx, checkpointsTTL, func(ctx context.Context) ([]checkpoint.Record, error) {
		return checkpoint.List(ctx, s.p.st)
	})
	if recs == nil {
		recs = []checkpoint.Record{}
	}
	return recs, errStr
}

// space returns the writer's footprint: the counter scan at most every
// spaceTTL, the meta/ listing at most every metaTTL, pinned bytes from
// the cached checkpoint list.
func (s *sampler) space(ctx context.Context, bg *background) (*spaceReply, string, time.Time) {
	recs, ckErr := s.checkpoints(ctx)
	meta, metaErr, _ := s.meta.get(ctx, metaTTL, func(ctx context.Context) (metaFootprint, error) {
		n, b, err := bg.gc.Footprint(ctx)
		return metaFootprint{n, b}, err
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := s.spaceGeneration(bg)
	// The scan is reused for spaceTTL unless reclamation changed something,
	// and in any case for ten times as long as it took: the counters and
	// the extents of huge pending tombstones take a while to scan, and
	// watching must not load the writer.
	age := time.Since(s.mu.spaceAt)
	if s.mu.space != nil && (age < 10*s.mu.spaceTook || age < spaceTTL && gen == s.mu.spaceGen) {
		return s.mu.space, s.mu.spaceErr, s.mu.spaceAt
	}
	start := time.Now()
	rep, err := bg.r.SpaceLocal()
	s.mu.spaceTook = time.Since(start)
	if err != nil {
		s.mu.spaceErr = err.Error()
		return s.mu.space, s.mu.spaceErr, s.mu.spaceAt
	}
	if ckErr != "" {
		rep.CheckpointError = ckErr
	} else {
		rep.AddPinned(recs)
	}
	out := &spaceReply{SpaceReport: rep, MetaError: metaErr}
	out.MetaObjects, out.MetaBytes = meta.objects, meta.bytes
	s.mu.space, s.mu.spaceErr, s.mu.spaceAt, s.mu.spaceGen = out, "", time.Now(), gen
	return out, "", s.mu.spaceAt
}

// spaceGeneration changes whenever reclamation may have changed the
// footprint: a cycle ended, the cleaner committed, a tombstone was
// written. A cached footprint of an older generation is not reused, so a
// reader right after a cycle sees what it did.
func (s *sampler) spaceGeneration(bg *background) uint64 {
	_, cycles := bg.r.LastCycle()
	return uint64(cycles) + s.p.cleaner.Snapshot().CleanerBatches + s.p.fsStats.Snapshot().TombstonesCreated
}

// engineStats is the engine's figures and the tombstone cleaner's, as
// one JSON object.
type engineStats struct {
	fs.StatsSnapshot
	reclaim.CleanerSnapshot
}

// state builds a monitorState.
func (s *sampler) state(ctx context.Context) monitorState {
	p := s.p
	st := monitorState{
		At:          time.Now(),
		Role:        p.role(),
		Checkpoint:  p.checkpoint,
		Version:     versionString(),
		PID:         os.Getpid(),
		Store:       p.c.Storage.URL,
		Mountpoint:  p.mp,
		StartedAt:   p.started,
		UptimeSec:   time.Since(p.started).Seconds(),
		FUSE:        used(p.fuseOps.Snapshot()),
		NBDOps:      used(p.nbdOps.Snapshot()),
		StoreOps:    map[string]stats.OpSnapshot{},
		Engine:      engineStats{p.fsStats.Snapshot(), p.cleaner.Snapshot()},
		DirtyBytes:  p.e.DirtyBytes(),
		Cache:       p.e.Reader().Stats(),
		MemoryRSS:   rss(),
		MemoryLimit: debug.SetMemoryLimit(-1),
	}
	p.mu.Lock()
	st.NBD = append([]string(nil), p.mu.nbdAddrs...)
	p.mu.Unlock()
	if p.count != nil {
		st.StoreRequests = p.count.Snapshot()
	}
	if p.timed != nil {
		st.StoreOps = p.timed.Ops().Snapshot()
		st.StoreUnreachableSince, st.StoreLastError = p.timed.Health()
	}
	if p.lag != nil {
		r := p.lag.get(ctx)
		st.Replica = &r
	}
	st.Checkpoints, st.CheckpointError = s.checkpoints(ctx)
	if bg := p.bg.Load(); bg != nil {
		st.Space, st.SpaceError, st.SpaceAt = s.space(ctx, bg)
		a := bg.r.Activity()
		t := bg.r.Totals()
		rq := bg.r.Requests()
		st.Reclaim, st.ReclaimTotals, st.ReclaimRequests = &a, &t, &rq
		last, passes := bg.gc.LastPass()
		totals, next := bg.gc.Totals()
		m := &metaGCState{Passes: passes, LastAt: last.At, Last: last.Stats, Next: next, Totals: totals}
		if last.Err != nil {
			m.Error = last.Err.Error()
		}
		st.MetaGC = m
	}
	return st
}

func (p *process) role() string {
	switch {
	case p.checkpoint != "":
		return roleCheckpoint
	case p.e.ReadOnly():
		return roleReplica
	}
	return roleWriter
}

// used drops the operations that never ran (the JSON stays small).
func used(ops map[string]stats.OpSnapshot) map[string]stats.OpSnapshot {
	for k, v := range ops {
		if v.Count == 0 {
			delete(ops, k)
		}
	}
	return ops
}

// rss is the process's resident set size in bytes (0 if unknown).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// memoryLimit is the Go memory limit in force.
func memoryLimit() int64 { return debug.SetMemoryLimit(-1) }
