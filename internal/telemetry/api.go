package telemetry

import (
	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/reclaim"
)

// API routes beyond the built-in flush/status/metrics/page.
const (
	RouteReclaimRun   = "/v1/reclaim/run"
	RouteReclaimSweep = "/v1/reclaim/sweep"
	RouteSpace        = "/v1/space"
	RouteCheckpoints  = "/v1/checkpoints"
)

// CheckpointRequest is the body of POST /v1/checkpoints.
type CheckpointRequest struct {
	Name string          `json:"name"`
	Kind checkpoint.Kind `json:"kind"`
	// TTLSeconds is an ephemeral checkpoint's lifetime.
	TTLSeconds float64 `json:"ttl_seconds,omitempty"`
}

// SpaceReply is GET /v1/space.
type SpaceReply struct {
	reclaim.SpaceReport
	MetaError string `json:"MetaError,omitempty"`
}

// Keys of admin.Status.Extra filled by the process (GET /v1/status keeps
// them for scripts; the monitor reads /v1/monitor).
const (
	ExtraStoreRequests = "store_requests"
	ExtraBytesUp       = "store_bytes_up"
	ExtraBytesDown     = "store_bytes_down"
	ExtraLiveBytes     = "live_bytes"
	ExtraReclaimCycles = "reclaim_cycles"
	ExtraReplica       = "replica" // ReplicaState of a following replica
	// Set while every store request fails: since when, and the last error.
	ExtraStoreUnreachableSince   = "store_unreachable_since"
	ExtraStoreLastError          = "store_last_error"
	ExtraCacheDirFree            = "cache_dir_free"
	ExtraCacheDirFloor           = "cache_dir_floor"
	ExtraCacheDirReserveReleased = "cache_dir_reserve_released"
	ExtraMetadataFailed          = "metadata_failed"
)
