package main

import (
	"context"
	"net/http"
	"time"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/internal/worker"
)

// withReclaimProgress runs do (a reclamation request to the writer)
// and, while it runs and stderr is a terminal, shows what the writer's
// reclamation is doing: the cycle's phase and, while it repacks, the
// live bytes gathered of those to gather and the rate; for a sweep, the
// time it has taken.
func withReclaimProgress(cl *admin.Client, what string, do func() error) error {
	pr := newProgress(what)
	if pr.w == nil {
		return do()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var g worker.Group
	g.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var st telemetry.State
			if cl.Do(ctx, http.MethodGet, telemetry.RouteMonitor, nil, &st) != nil || st.Reclaim == nil {
				continue
			}
			a := st.Reclaim
			phase := a.Phase
			if a.SweepRunning && what == "sweep" {
				phase = "listing and judging segments/"
			}
			var done, total int64
			for _, j := range a.Jobs {
				done += j.Gathered
				total += j.LiveBytes
			}
			pr.update(phase, 0, 0, done, total, false)
		}
	})
	err := do()
	cancel()
	g.Wait()
	pr.done()
	return err
}
