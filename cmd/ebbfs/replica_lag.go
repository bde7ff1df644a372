package main

import (
	"context"
	"log/slog"
	"time"

	"ebbfs.dev/ebbfs/fs"
)

// replicaState is a replica's distance from the writer.
//
// A replica probes the writer's next journal object every
// [replica] poll_interval (fs.Engine.Follow). LagSeconds is how long ago a
// probe last found nothing newer than what the replica serves: the newest
// durable state is at most that old on this replica. Measuring it costs no
// request.
type replicaState struct {
	Served     uint64    `json:"served_seq"` // newest journal applied
	Manifest   uint64    `json:"manifest"`   // newest manifest known
	LagSeconds float64   `json:"lag_seconds"`
	Follows    bool      `json:"follows"`
	CheckedAt  time.Time `json:"checked_at,omitzero"` // the last probe that found nothing newer
	Jumps      int       `json:"manifest_jumps"`      // moves to a newer manifest
	Error      string    `json:"error,omitempty"`     // the last probe failed with it
}

// replicaLag reports a following replica's state.
type replicaLag struct {
	e       *fs.Engine
	started time.Time
}

func (l *replicaLag) get(context.Context) replicaState {
	st := l.e.FollowStatus()
	r := replicaState{Served: st.AppliedSeq, Manifest: st.Manifest, Follows: true,
		CheckedAt: st.UpToDate, Jumps: st.Jumps, Error: st.LastError}
	since := st.UpToDate
	if since.IsZero() {
		since = l.started
	}
	r.LagSeconds = max(time.Since(since).Seconds(), 0)
	return r
}

// followWriter keeps a replica up to date until ctx ends: a probe every
// interval (fs.Engine.Follow applies everything new at once). Failures
// are logged once when they start and every minute while they last; the
// replica serves what it has meanwhile.
func followWriter(ctx context.Context, e *fs.Engine, interval time.Duration, log *slog.Logger) {
	var failingSince time.Time
	var lastLog time.Time
	for {
		n, err := e.Follow(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(lastLog) >= time.Minute {
				log.Warn("replica: cannot reach the writer's journal; serving the state already applied", "since", failingSince.Format(time.RFC3339), "err", err)
				lastLog = time.Now()
			}
		default:
			if !failingSince.IsZero() {
				log.Info("replica: following the writer again", "down_for", time.Since(failingSince).Round(time.Second))
				failingSince, lastLog = time.Time{}, time.Time{}
			}
			if n > 0 {
				log.Debug("replica: applied journals", "count", n, "applied_seq", e.DB().AppliedSeq())
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
