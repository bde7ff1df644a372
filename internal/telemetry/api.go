package telemetry

import (
	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// API routes beyond the built-in flush/status/metrics/page.
const (
	RouteReclaimRun   = "/v1/reclaim/run"
	RouteReclaimSweep = "/v1/reclaim/sweep"
	RouteSpace        = "/v1/space"
	RouteCheckpoints  = "/v1/checkpoints"
	RouteTrace        = "/v1/trace"
	RouteRestore      = "/v1/checkpoints-restore"
)

// RestoreRequest is the body of POST /v1/checkpoints-restore.
type RestoreRequest struct {
	Name string `json:"name"`
}

// RestoreReply is what `ebbfs checkpoint restore --json` prints
// (docs/JSON.md).
type RestoreReply struct {
	Checkpoint string `json:"checkpoint"` // the checkpoint restored
	// PreRestore is the persistent checkpoint of the state replaced:
	// restoring it undoes the restore; deleting it lets reclamation free
	// what only that state referenced.
	PreRestore string  `json:"pre_restore_checkpoint"`
	Writer     string  `json:"writer"` // "running" (through its admin socket) or "none" (opened for the restore)
	Seconds    float64 `json:"duration_seconds"`
	fs.RestoreStats
}

// TraceLine is one line of GET /v1/trace: a store request, and how many
// the client has missed so far by not keeping up.
type TraceLine struct {
	objstore.TraceEvent
	Dropped uint64 `json:"dropped,omitempty"`
}

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
	ExtraHealth                  = "health" // Health
	// Damage: []fs.DamagedFile, the files reads found damaged, and the
	// frames that failed authentication; set only when there is some.
	ExtraDamage        = "damage"
	ExtraCorruptFrames = "corrupt_frames"
)
