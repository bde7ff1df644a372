package daemon

import (
	"context"
	"log/slog"
	"time"

	"ebbfs.dev/ebbfs/fs"
)

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
