package daemon

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

var _ reclaim.Host = (*fs.Engine)(nil)

// enginePublisher publishes a manifest covering everything written so far
// (checkpoint creation): barrier, then publication.
type enginePublisher struct{ e *fs.Engine }

func (p enginePublisher) Publish(ctx context.Context) (uint64, error) {
	if err := p.e.Barrier(ctx); err != nil {
		return 0, err
	}
	return p.e.DB().Publish(ctx)
}

// background is the writer's reclamation: the segment reclamation cycle
// and orphan sweep (reclaim.Reclaimer, fed by the engine's events through
// Triggers) and the metadata object GC.
type background struct {
	r  *reclaim.Reclaimer
	gc *reclaim.MetaGC
}

var (
	errReadOnly   = errors.New("this process is a read-only reader; run the command against the writer")
	errNotStarted = errors.New("reclamation has not started yet (the writer is still mounting); retry in a moment")
)

// startBackground starts reclamation for a writer, the tombstone cleaner
// with it; trig is the fs.Events the engine was opened with, cs receives
// the cleaner's figures.
func startBackground(c *config.Config, e *fs.Engine, st objstore.Store, k *keys.Keys, trig *reclaim.Triggers, cs *reclaim.CleanerStats, log *slog.Logger) (*background, error) {
	// The test build's EBBFS_TEST_TIME_SCALE speeds up reclamation time;
	// a production build ignores it with a warning.
	clk, err := clock.FromEnv(clock.Real{}, log)
	if err != nil {
		return nil, err
	}
	r, err := reclaim.New(reclaim.Options{
		Host:                 e,
		Store:                st,
		Keys:                 k,
		FlushInterval:        c.Metadata.FlushInterval.D(),
		MinDeadPercent:       c.Reclaim.MinDeadPercent,
		MaxConcurrentRepacks: c.Reclaim.MaxConcurrentRepacks,
		Logger:               log,
		Clock:                clk,
		CleanerStats:         cs,
		CleanerDelay:         testCleanerDelay(log),
	})
	if err != nil {
		return nil, err
	}
	trig.Attach(r)
	r.Start()
	gc := reclaim.NewMetaGC(reclaim.MetaGCOptions{Store: st, DB: e.DB(), Logger: log, Clock: clk,
		StatePath: filepath.Join(c.Cache.Dir, reclaim.MetaGCStateFile)})
	gc.Start()
	return &background{r: r, gc: gc}, nil
}

// close stops new work and waits for admitted jobs.
func (b *background) close(log *slog.Logger) {
	if b == nil {
		return
	}
	start := time.Now()
	// A pass that is due runs before the engine closes, so that writers
	// that never live a whole interval still collect.
	b.gc.Stop(context.Background())
	if err := b.r.Close(); err != nil {
		log.Warn("reclaim: close", "err", err)
	}
	log.Debug("reclamation stopped", "took", time.Since(start).Round(time.Millisecond))
}
