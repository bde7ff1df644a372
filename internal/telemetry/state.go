package telemetry

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
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
	"ebbfs.dev/ebbfs/segread"
)

// RouteMonitor serves State: everything `ebbfs monitor` and the
// status page show, in one JSON document.
const (
	RouteMonitor = "/v1/monitor"
	RouteHistory = "/v1/history"
)

// Roles of a running process.
const (
	RoleWriter     = "writer"
	RoleReplica    = "replica"
	RoleStandby    = "standby"
	RoleCheckpoint = "checkpoint reader"
)

// State is GET /v1/monitor. Counters are cumulative since the
// process started; clients compute rates from two samples.
type State struct {
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

	// Health is the summary `ebbfs status` leads with.
	Health Health `json:"health"`

	Replica *ReplicaState `json:"replica,omitempty"`

	// StoreUnreachableSince is set while every store request fails: when
	// that began, and the last error.
	StoreUnreachableSince time.Time `json:"store_unreachable_since,omitzero"`
	StoreLastError        string    `json:"store_last_error,omitempty"`

	FUSE   map[string]stats.OpSnapshot `json:"fuse"`
	NBDOps map[string]stats.OpSnapshot `json:"nbd_ops"`

	StoreRequests objstore.Counts             `json:"store_requests"`
	StoreOps      map[string]stats.OpSnapshot `json:"store_ops"`

	Space      *SpaceReply `json:"space,omitempty"`
	SpaceError string      `json:"space_error,omitempty"`
	SpaceAt    time.Time   `json:"space_at,omitzero"`

	Engine      EngineStats         `json:"engine"`
	DirtyBytes  int64               `json:"dirty_bytes"`
	Cache       segread.ReaderStats `json:"cache"`
	MemoryRSS   int64               `json:"memory_rss"`
	MemoryLimit int64               `json:"memory_limit"`

	Reclaim         *reclaim.Activity `json:"reclaim,omitempty"`
	ReclaimTotals   *reclaim.Totals   `json:"reclaim_totals,omitempty"`
	ReclaimRequests *objstore.Counts  `json:"reclaim_requests,omitempty"`
	MetaGC          *MetaGCState      `json:"metagc,omitempty"`

	Checkpoints     []checkpoint.Record `json:"checkpoints"`
	CheckpointError string              `json:"checkpoint_error,omitempty"`

	// Damage lists the files reads found damaged (frames that do not
	// authenticate): the alarm of the monitor's header and the page.
	Damage []fs.DamagedFile `json:"damage,omitempty"`
}

// MetaGCState is the metadata object GC's part of State.
type MetaGCState struct {
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

// Source is what a running process shows: the engine, the store's
// recorders and the writer's reclamation once it runs. The daemon fills it.
type Source struct {
	Engine     *fs.Engine
	Store      objstore.Store
	Count      *objstore.Counting    // nil: requests are not counted
	Timed      *objstore.Timed       // nil: latencies are not recorded
	FS         *fs.Stats             // tombstones written and barriers
	Cleaner    *reclaim.CleanerStats // the tombstone cleaner
	FUSEOps    *stats.Ops            // FUSE requests by operation
	NBDOps     *stats.Ops            // NBD commands
	Lag        *ReplicaLag           // readers that follow: distance from the writer
	Checkpoint string                // the checkpoint a checkpoint reader serves
	Version    string
	StoreURL   string
	Mountpoint string
	StartedAt  time.Time
	// NBDAddrs returns the NBD addresses served (nil: none).
	NBDAddrs func() []string
	// HA returns the process's part in standby writers (nil: not shown).
	HA func() HAStatus
	// Reclaim returns the writer's reclamation, or nils before it starts
	// and on a reader.
	Reclaim func() (*reclaim.Reclaimer, *reclaim.MetaGC)
}

// Role is the process's role: RoleWriter, RoleReplica or RoleCheckpoint.
func (s *Source) Role() string {
	switch {
	case s.Checkpoint != "":
		return RoleCheckpoint
	case s.Engine.Promotable():
		return RoleStandby
	case s.Engine.ReadOnly():
		return RoleReplica
	}
	return RoleWriter
}

func (s *Source) reclamation() (*reclaim.Reclaimer, *reclaim.MetaGC) {
	if s.Reclaim == nil {
		return nil, nil
	}
	return s.Reclaim()
}

// Sampler builds State for /v1/monitor, /metrics and the page.
type Sampler struct {
	src *Source

	// Listed from the store, refreshed in the background so that an
	// unreachable store does not stall the readers of the state.
	ckpts refreshed[[]checkpoint.Record]
	meta  refreshed[metaFootprint]
	// refreshes owns the background fetches; Close cancels and waits.
	refreshes worker.Group
	ctx       context.Context
	cancel    context.CancelFunc

	mu struct {
		sync.Mutex
		space     *SpaceReply
		spaceGen  uint64        // spaceGeneration when space was computed
		spaceTook time.Duration // how long that computation took
		spaceErr  string
		spaceAt   time.Time
	}
}

// NewSampler returns a sampler of src; Close stops its background fetches.
func NewSampler(src *Source) *Sampler {
	s := &Sampler{src: src}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.ckpts.start = s.startFetch
	s.meta.start = s.startFetch
	return s
}

// startFetch runs a refresh in a goroutine the sampler owns, under the
// sampler's context.
func (s *Sampler) startFetch(f func(context.Context)) {
	s.refreshes.Go(func() { f(s.ctx) })
}

// Close cancels the fetches under way and waits for them.
func (s *Sampler) Close() {
	s.cancel()
	s.refreshes.Wait()
}

// metaFootprint is the size of meta/.
type metaFootprint struct {
	objects int
	bytes   int64
}

// checkpoints returns the checkpoint list, listed at most every
// checkpointsTTL (see refreshed: while the store does not answer, the
// last list and the error).
func (s *Sampler) checkpoints(ctx context.Context) ([]checkpoint.Record, string) {
	recs, errStr, _ := s.ckpts.get(ctx, checkpointsTTL, func(ctx context.Context) ([]checkpoint.Record, error) {
		return checkpoint.List(ctx, s.src.Store)
	})
	if recs == nil {
		recs = []checkpoint.Record{}
	}
	return recs, errStr
}

// space returns the writer's footprint: the counter scan at most every
// spaceTTL, the meta/ listing at most every metaTTL, pinned bytes from
// the cached checkpoint list.
func (s *Sampler) space(ctx context.Context, r *reclaim.Reclaimer, gc *reclaim.MetaGC) (*SpaceReply, string, time.Time) {
	recs, ckErr := s.checkpoints(ctx)
	meta, metaErr, _ := s.meta.get(ctx, metaTTL, func(ctx context.Context) (metaFootprint, error) {
		n, b, err := gc.Footprint(ctx)
		return metaFootprint{n, b}, err
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := s.spaceGeneration(r)
	// The scan is reused for spaceTTL unless reclamation changed something,
	// and in any case for ten times as long as it took: the counters and
	// the extents of huge pending tombstones take a while to scan, and
	// watching must not load the writer.
	age := time.Since(s.mu.spaceAt)
	if s.mu.space != nil && (age < 10*s.mu.spaceTook || age < spaceTTL && gen == s.mu.spaceGen) {
		return s.mu.space, s.mu.spaceErr, s.mu.spaceAt
	}
	start := time.Now()
	rep, err := r.SpaceLocal()
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
	out := &SpaceReply{SpaceReport: rep, MetaError: metaErr}
	out.MetaObjects, out.MetaBytes = meta.objects, meta.bytes
	s.mu.space, s.mu.spaceErr, s.mu.spaceAt, s.mu.spaceGen = out, "", time.Now(), gen
	return out, "", s.mu.spaceAt
}

// spaceGeneration changes whenever reclamation may have changed the
// footprint: a cycle ended, the cleaner committed, a tombstone was
// written. A cached footprint of an older generation is not reused, so a
// reader right after a cycle sees what it did.
func (s *Sampler) spaceGeneration(r *reclaim.Reclaimer) uint64 {
	_, cycles := r.LastCycle()
	return uint64(cycles) + s.src.Cleaner.Snapshot().CleanerBatches + s.src.FS.Snapshot().TombstonesCreated
}

// EngineStats is the engine's figures and the tombstone cleaner's, as
// one JSON object.
type EngineStats struct {
	fs.StatsSnapshot
	reclaim.CleanerSnapshot
}

// State builds a State.
func (s *Sampler) State(ctx context.Context) State {
	p := s.src
	st := State{
		At:          time.Now(),
		Role:        p.Role(),
		Checkpoint:  p.Checkpoint,
		Version:     p.Version,
		PID:         os.Getpid(),
		Store:       p.StoreURL,
		Mountpoint:  p.Mountpoint,
		StartedAt:   p.StartedAt,
		UptimeSec:   time.Since(p.StartedAt).Seconds(),
		FUSE:        used(p.FUSEOps.Snapshot()),
		NBDOps:      used(p.NBDOps.Snapshot()),
		StoreOps:    map[string]stats.OpSnapshot{},
		Engine:      EngineStats{p.FS.Snapshot(), p.Cleaner.Snapshot()},
		DirtyBytes:  p.Engine.DirtyBytes(),
		Cache:       p.Engine.Reader().Stats(),
		MemoryRSS:   rss(),
		MemoryLimit: debug.SetMemoryLimit(-1),
		Damage:      p.Engine.Damage(),
	}
	if p.NBDAddrs != nil {
		st.NBD = p.NBDAddrs()
	}
	st.Health = s.Health(ctx)
	if p.Count != nil {
		st.StoreRequests = p.Count.Snapshot()
	}
	if p.Timed != nil {
		st.StoreOps = p.Timed.Ops().Snapshot()
		st.StoreUnreachableSince, st.StoreLastError = p.Timed.Health()
	}
	if p.Lag != nil {
		r := p.Lag.Get(ctx)
		st.Replica = &r
	}
	st.Checkpoints, st.CheckpointError = s.checkpoints(ctx)
	if r, gc := p.reclamation(); r != nil {
		st.Space, st.SpaceError, st.SpaceAt = s.space(ctx, r, gc)
		a := r.Activity()
		t := r.Totals()
		rq := r.Requests()
		st.Reclaim, st.ReclaimTotals, st.ReclaimRequests = &a, &t, &rq
		last, passes := gc.LastPass()
		totals, next := gc.Totals()
		m := &MetaGCState{Passes: passes, LastAt: last.At, Last: last.Stats, Next: next, Totals: totals}
		if last.Err != nil {
			m.Error = last.Err.Error()
		}
		st.MetaGC = m
	}
	return st
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
