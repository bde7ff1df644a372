package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

func badRequest(err error) error {
	return &admin.StatusError{Code: http.StatusBadRequest, Err: err}
}

// writerOnly returns the writer's reclamation, or an error for a reader
// (and for a writer whose mount is not up yet).
func (p *process) writerOnly() (*background, error) {
	if p.e.ReadOnly() {
		return nil, &admin.StatusError{Code: http.StatusConflict, Err: errReadOnly}
	}
	bg := p.bg.Load()
	if bg == nil {
		return nil, &admin.StatusError{Code: http.StatusServiceUnavailable, Err: errNotStarted}
	}
	return bg, nil
}

// routes registers the writer's commands on the admin endpoint.
func (p *process) routes(s *admin.Server) {
	p.haRoutes(s)
	s.HandleJSON("POST "+telemetry.RouteReclaimRun, func(r *http.Request) (any, error) {
		bg, err := p.writerOnly()
		if err != nil {
			return nil, err
		}
		return bg.r.RunNow(r.Context())
	})
	s.HandleJSON("POST "+telemetry.RouteReclaimSweep, func(r *http.Request) (any, error) {
		bg, err := p.writerOnly()
		if err != nil {
			return nil, err
		}
		return bg.r.SweepNow(r.Context())
	})
	s.HandleJSON("GET "+telemetry.RouteSpace, func(r *http.Request) (any, error) {
		bg, err := p.writerOnly()
		if err != nil {
			return nil, err
		}
		rep, err := bg.r.Space(r.Context())
		if err != nil {
			return nil, err
		}
		out := telemetry.SpaceReply{SpaceReport: rep}
		if n, b, err := bg.gc.Footprint(r.Context()); err != nil {
			out.MetaError = err.Error()
		} else {
			out.MetaObjects, out.MetaBytes = n, b
		}
		return out, nil
	})
	s.HandleJSON("GET "+telemetry.RouteMonitor, func(r *http.Request) (any, error) {
		return p.sampler.State(r.Context()), nil
	})
	s.HandleJSON("GET "+telemetry.RouteHistory, func(r *http.Request) (any, error) {
		out := telemetry.HistoryReply{BucketSeconds: telemetry.HistoryBucket.Seconds(), NowMs: time.Now().UnixMilli(),
			Tombstones: []telemetry.TombPoint{}, Cycles: []telemetry.CyclePoint{}}
		if p.history != nil {
			out.Tombstones = p.history.Points()
		}
		if bg := p.bg.Load(); bg != nil {
			for _, c := range bg.r.Activity().Recent {
				out.Cycles = append(out.Cycles, telemetry.CyclePoint{End: c.End, BytesFreed: c.BytesFreed, Deleted: c.Deleted, Repacks: c.Repacks, Trigger: c.Trigger})
			}
		}
		return out, nil
	})
	s.HandleJSON("GET "+telemetry.RouteCheckpoints, func(r *http.Request) (any, error) {
		recs, err := checkpoint.List(r.Context(), p.st)
		if recs == nil {
			recs = []checkpoint.Record{}
		}
		return recs, err
	})
	s.HandleJSON("GET "+telemetry.RouteCheckpoints+"/{name}", func(r *http.Request) (any, error) {
		return getCheckpoint(r, p)
	})
	s.HandleJSON("DELETE "+telemetry.RouteCheckpoints+"/{name}", func(r *http.Request) (any, error) {
		if err := checkpoint.Delete(r.Context(), p.st, r.PathValue("name")); err != nil {
			return nil, checkpointErr(err)
		}
		return map[string]bool{"ok": true}, nil
	})
	s.HandleJSON("POST "+telemetry.RouteCheckpoints, func(r *http.Request) (any, error) {
		if _, err := p.writerOnly(); err != nil {
			return nil, err
		}
		var req telemetry.CheckpointRequest
		if err := readBody(r, &req); err != nil {
			return nil, err
		}
		if req.Kind != checkpoint.Persistent && req.Kind != checkpoint.Ephemeral {
			return nil, badRequest(fmt.Errorf("checkpoint kind %q: want %q or %q", req.Kind, checkpoint.Persistent, checkpoint.Ephemeral))
		}
		ttl := time.Duration(req.TTLSeconds * float64(time.Second))
		rec, err := checkpoint.Create(r.Context(), p.st, enginePublisher{p.e}, req.Name, req.Kind, ttl, time.Now())
		if err != nil {
			return nil, checkpointErr(err)
		}
		return rec, nil
	})
}

// readBody decodes a request's JSON body (at most 1 MiB) into v.
func readBody(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return badRequest(err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest(fmt.Errorf("bad request body: %w", err))
	}
	return nil
}

func getCheckpoint(r *http.Request, p *process) (any, error) {
	rec, err := checkpoint.Get(r.Context(), p.st, r.PathValue("name"))
	if err != nil {
		return nil, checkpointErr(err)
	}
	return rec, nil
}

// checkpointErr gives checkpoint errors their HTTP status.
func checkpointErr(err error) error {
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return &admin.StatusError{Code: http.StatusNotFound, Err: err}
	case errors.Is(err, checkpoint.ErrExists):
		return &admin.StatusError{Code: http.StatusConflict, Err: err}
	case errors.Is(err, checkpoint.ErrInvalidName):
		return badRequest(err)
	}
	return err
}
