package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// `ebbfs checkpoint restore NAME`: the running writer's route, and the
// same steps on a writer opened for the purpose when none runs.
//
// 1. The checkpoint must exist and not have expired (an expired one's
//    segments may be reclaimed; fs.Restore checks each it revives).
// 2. A persistent checkpoint pre-restore-<UTC time> of the current state
//    is made: it undoes the restore, and while it exists no reclamation
//    cycle deletes or repacks anything.
// 3. The running writer waits for one reclamation cycle that started
//    after that record: a cycle that read the checkpoint list before it
//    could still be deleting a segment the restored state references
//    again (one an ephemeral checkpoint kept only by its grace).
// 4. fs.Restore replaces the state in one journaled batch.

// restoreRoute registers POST /v1/checkpoints-restore.
func (p *process) restoreRoute(s *admin.Server) {
	s.HandleJSON("POST "+telemetry.RouteRestore, func(r *http.Request) (any, error) {
		bg, err := p.writerOnly()
		if err != nil {
			return nil, err
		}
		var req telemetry.RestoreRequest
		if err := readBody(r, &req); err != nil {
			return nil, err
		}
		wait := func(ctx context.Context) error {
			_, err := bg.r.RunNow(ctx)
			if errors.Is(err, reclaim.ErrClosed) || ctx.Err() != nil {
				return err
			}
			return nil // a cycle ran (its own failure deletes nothing)
		}
		rep, err := restoreWith(r.Context(), p.st, p.e, req.Name, wait)
		if err != nil {
			return nil, err
		}
		rep.Writer = "running"
		return rep, nil
	})
}

// restoreWith runs the restore on an open writer engine; wait, if set,
// waits for a reclamation cycle that sees the pre-restore checkpoint.
func restoreWith(ctx context.Context, st objstore.Store, e *fs.Engine, name string, wait func(context.Context) error) (telemetry.RestoreReply, error) {
	start := time.Now()
	rec, err := checkpoint.Get(ctx, st, name)
	if err != nil {
		return telemetry.RestoreReply{}, checkpointErr(fmt.Errorf("checkpoint %q: %w (ebbfs checkpoint list shows them)", name, err))
	}
	if checkpoint.Expired(rec, start) {
		return telemetry.RestoreReply{}, &admin.StatusError{Code: http.StatusConflict,
			Err: fmt.Errorf("checkpoint %q expired at %s; its segments may already be reclaimed", name, rec.ExpireTime.Format(time.RFC3339))}
	}
	pre, err := createPreRestore(ctx, st, e, start)
	if err != nil {
		return telemetry.RestoreReply{}, fmt.Errorf("making the pre-restore checkpoint (nothing was restored): %w", err)
	}
	if wait != nil {
		if err := wait(ctx); err != nil {
			return telemetry.RestoreReply{}, fmt.Errorf("waiting for reclamation to see %s (nothing was restored; delete %s): %w", pre, pre, err)
		}
	}
	stats, err := e.Restore(ctx, rec.ManifestSeq)
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, fs.ErrRestoreGone) {
			code = http.StatusConflict
		}
		return telemetry.RestoreReply{}, &admin.StatusError{Code: code,
			Err: fmt.Errorf("restoring %s: %w (checkpoint %s holds the state from before)", name, err, pre)}
	}
	return telemetry.RestoreReply{Checkpoint: name, PreRestore: pre, Seconds: time.Since(start).Seconds(), RestoreStats: stats}, nil
}

// createPreRestore makes the persistent checkpoint of the state about to
// be replaced, named after the time (a suffix if taken).
func createPreRestore(ctx context.Context, st objstore.Store, e *fs.Engine, now time.Time) (string, error) {
	base := "pre-restore-" + now.UTC().Format("20060102T150405Z")
	name := base
	for i := 2; ; i++ {
		_, err := checkpoint.Create(ctx, st, enginePublisher{e}, name, checkpoint.Persistent, 0, now)
		if !errors.Is(err, checkpoint.ErrExists) || i > 100 {
			return name, err
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
}

// RestoreOffline restores checkpoint name with no writer running: it
// opens the filesystem as the writer (taking the lease, so a writer
// elsewhere makes it fail), restores and closes it.
func RestoreOffline(ctx context.Context, o Options, name string) (telemetry.RestoreReply, error) {
	c := o.Config
	if err := os.MkdirAll(c.Cache.Dir, 0o700); err != nil {
		return telemetry.RestoreReply{}, fmt.Errorf("cache directory: %w", err)
	}
	st, k, err := o.Unlock(ctx, c)
	if err != nil {
		return telemetry.RestoreReply{}, err
	}
	defer objstore.Close(st)
	if _, err := checkpoint.Get(ctx, st, name); err != nil {
		return telemetry.RestoreReply{}, fmt.Errorf("checkpoint %q: %w (ebbfs checkpoint list shows them)", name, err)
	}
	fo := engineOptions(o, st, k, 0, fs.NewStats(), nil)
	fo.Events = nil
	fo.Holder = fmt.Sprintf("ebbfs checkpoint restore pid %d", os.Getpid())
	e, err := fs.Open(ctx, fo)
	if err != nil {
		return telemetry.RestoreReply{}, fmt.Errorf("opening the filesystem in %s: %w", c.Storage.URL, err)
	}
	rep, err := restoreWith(ctx, st, e, name, nil)
	if cerr := e.Close(context.WithoutCancel(ctx)); err == nil && cerr != nil {
		err = fmt.Errorf("closing after the restore: %w", cerr)
	}
	rep.Writer = "none"
	return rep, err
}
