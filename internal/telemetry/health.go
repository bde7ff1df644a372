package telemetry

import (
	"context"
	"strings"
	"time"
)

// ReaderCheckpointPrefix starts the name of every replica's renewed
// checkpoint ("reader-<host>-<id>").
const ReaderCheckpointPrefix = "reader-"

// Health is the summary `ebbfs status` leads with and the monitor shows
// under its header: what an operator checks first.
type Health struct {
	Role       string `json:"role"`
	Checkpoint string `json:"checkpoint,omitempty"` // the checkpoint a checkpoint reader serves

	// The writer's lease (absent on a reader): its epoch, the last
	// heartbeat written and how stale it may grow before another host may
	// take over. Fenced is set once another writer took over.
	LeaseEpoch     uint64    `json:"lease_epoch,omitempty"`
	LeaseHeartbeat time.Time `json:"lease_heartbeat,omitzero"`
	LeaseTTLSec    float64   `json:"lease_ttl_seconds,omitempty"`
	Fenced         string    `json:"fenced,omitempty"`

	// Barriers counts every durability barrier of this process (fsync,
	// flush, the timer), as the monitor does; LastBarrier is when the last
	// one that succeeded ended.
	Barriers        uint64    `json:"barriers"`
	BarrierFailures uint64    `json:"barrier_failures"`
	LastBarrier     time.Time `json:"last_barrier,omitzero"`
	DirtyBytes      int64     `json:"dirty_bytes"`

	// Replicas is the number of live replicas' checkpoints (reader-*)
	// in the store, as last listed; -1 when the list is unreadable.
	Replicas int `json:"replicas"`
	// LagSec is a replica's distance from the newest durable state.
	LagSec float64 `json:"lag_seconds,omitempty"`

	StoreReachable        bool      `json:"store_reachable"`
	StoreUnreachableSince time.Time `json:"store_unreachable_since,omitzero"`
	StoreLastError        string    `json:"store_last_error,omitempty"`

	// Damaged counts the corrupt frames reads found in store objects
	// since the process started (each read of one fails with EIO).
	Damaged uint64 `json:"damaged"`

	// The cache directory's disk: bytes free, the floor below which new
	// writes fail with ENOSPC, and whether the metadata store's emergency
	// reserve is in use. MetadataFailed is set once the local metadata
	// store failed (the writer acknowledges nothing more).
	CacheDirFree    int64  `json:"cache_dir_free_bytes,omitempty"`
	CacheDirFloor   int64  `json:"cache_dir_floor_bytes,omitempty"`
	ReserveReleased bool   `json:"reserve_released,omitempty"`
	MetadataFailed  string `json:"metadata_failed,omitempty"`

	// HA is the process's part in standby writers: its role, the
	// writer's last sign of life seen by a standby, failovers.
	HA *HAStatus `json:"ha,omitempty"`
}

// Health builds the health summary.
func (s *Sampler) Health(ctx context.Context) Health {
	p := s.src
	fsn := p.FS.Snapshot()
	h := Health{
		Role:            p.Role(),
		Checkpoint:      p.Checkpoint,
		Barriers:        fsn.Barriers,
		BarrierFailures: fsn.BarrierFailures,
		LastBarrier:     fsn.LastBarrier,
		DirtyBytes:      p.Engine.DirtyBytes(),
		StoreReachable:  true,
		Damaged:         p.Engine.Reader().Stats().Corrupt,
	}
	if l, ttl, ok := p.Engine.Lease(); ok {
		h.LeaseEpoch, h.LeaseHeartbeat, h.LeaseTTLSec = l.Epoch, l.Heartbeat, ttl.Seconds()
	}
	if err := p.Engine.Fenced(); err != nil {
		h.Fenced = err.Error()
	}
	if p.Timed != nil {
		h.StoreUnreachableSince, h.StoreLastError = p.Timed.Health()
		h.StoreReachable = h.StoreUnreachableSince.IsZero()
	}
	if p.Lag != nil {
		h.LagSec = p.Lag.Get(ctx).LagSeconds
	}
	if !p.Engine.ReadOnly() {
		if free, floor, err := p.Engine.CacheDirSpace(); err == nil {
			h.CacheDirFree, h.CacheDirFloor = free, floor
		}
		h.ReserveReleased = p.Engine.CacheDirReserveReleased()
	}
	if err := p.Engine.LocalFailure(); err != nil {
		h.MetadataFailed = err.Error()
	}
	if p.HA != nil {
		ha := p.HA()
		h.HA = &ha
	}
	recs, ckErr := s.checkpoints(ctx)
	if ckErr != "" && len(recs) == 0 {
		h.Replicas = -1
	}
	for _, r := range recs {
		if strings.HasPrefix(r.Name, ReaderCheckpointPrefix) && (r.ExpireTime.IsZero() || r.ExpireTime.After(time.Now())) {
			h.Replicas++
		}
	}
	return h
}

// HAStatus is what status, the monitor and /metrics show of a process's
// role (ExtraHA).
type HAStatus struct {
	Role string `json:"role"` // writer, standby, replica or fenced
	// Writer is the lease holder as this process last read it.
	Writer string `json:"writer,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// LastSignOfLife is when a standby last saw the writer alive;
	// SinceSignOfLifeSec is how long ago, by this process's clock.
	LastSignOfLife     time.Time `json:"last_sign_of_life,omitzero"`
	SinceSignOfLifeSec float64   `json:"since_sign_of_life_seconds,omitempty"`
	TakeoverAfterSec   float64   `json:"takeover_after_seconds,omitempty"`
	// Armed: the writer heartbeats for this standby.
	Armed bool `json:"armed,omitempty"`
	// Failovers counts the takeovers this process made; Promoted is when
	// the last one finished.
	Failovers int       `json:"failovers"`
	Promoted  time.Time `json:"promoted,omitzero"`
	// HandoverSec is the last planned switch-over's length: on the
	// standby that asked, from its request to accepting writes; on the
	// writer that handed over, how long it refused writes before it
	// released the lease.
	HandoverSec float64 `json:"handover_seconds,omitempty"`
	// Rejoins counts the times this process, fenced as the writer, turned
	// itself into a standby following the new writer.
	Rejoins int `json:"rejoins,omitempty"`
	// HeartbeatEverySec and Standbys: a writer's heartbeat interval and
	// the standbys it heartbeats for.
	HeartbeatEverySec float64  `json:"heartbeat_every_seconds,omitempty"`
	Standbys          []string `json:"standbys,omitempty"`
	LastError         string   `json:"last_error,omitempty"`
}
