package telemetry

import (
	"context"
	"time"

	"ebbfs.dev/ebbfs/fs"
)

// ReplicaState is a replica's distance from the writer.
//
// A replica probes the writer's next journal object every
// [replica] poll_interval (fs.Engine.Follow). LagSeconds is how long ago a
// probe last found nothing newer than what the replica serves: the newest
// durable state is at most that old on this replica. Measuring it costs no
// request.
type ReplicaState struct {
	Served     uint64    `json:"served_seq"` // newest journal applied
	Manifest   uint64    `json:"manifest"`   // newest manifest known
	LagSeconds float64   `json:"lag_seconds"`
	Follows    bool      `json:"follows"`
	CheckedAt  time.Time `json:"checked_at,omitzero"` // the last probe that found nothing newer
	Jumps      int       `json:"manifest_jumps"`      // moves to a newer manifest
	Error      string    `json:"error,omitempty"`     // the last probe failed with it
}

// NewReplicaLag reports the state of the replica e, started at started.
func NewReplicaLag(e *fs.Engine, started time.Time) *ReplicaLag {
	return &ReplicaLag{e: e, started: started}
}

// ReplicaLag reports a following replica's state.
type ReplicaLag struct {
	e       *fs.Engine
	started time.Time
}

// Get returns the replica's state now.
func (l *ReplicaLag) Get(context.Context) ReplicaState {
	st := l.e.FollowStatus()
	r := ReplicaState{Served: st.AppliedSeq, Manifest: st.Manifest, Follows: true,
		CheckedAt: st.UpToDate, Jumps: st.Jumps, Error: st.LastError}
	since := st.UpToDate
	if since.IsZero() {
		since = l.started
	}
	r.LagSeconds = max(time.Since(since).Seconds(), 0)
	return r
}
