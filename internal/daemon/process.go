package daemon

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/mirror"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

// process is the running writer or reader; it is the admin backend.
type process struct {
	c         *config.Config
	e         *fs.Engine
	k         *keys.Keys
	st        objstore.Store
	bg        atomic.Pointer[background]    // set once the mount is up; never for a reader
	mirror    atomic.Pointer[mirror.Mirror] // the writer's [mirror], once it runs
	mirrorDst objstore.Store                // its store, closed by stopMirror
	mp        string
	version   string
	started   time.Time
	cleanup   cleanupStack // what Run undoes at shutdown, last first

	triggers *reclaim.Triggers // the engine's events, for the writer's reclamation
	// standby watches the writer when this process runs --standby;
	// stopReader removes a reader's (and a standby's) checkpoint record.
	standby    atomic.Pointer[standby]
	stopReader func()
	adminURL   string           // the admin endpoint over TCP, if any
	traced     *objstore.Traced // the store's request tracer (trace.go)

	// What /metrics, /v1/monitor and the page show.
	src     *telemetry.Source
	sampler *telemetry.Sampler
	history *telemetry.History

	mu struct {
		sync.Mutex
		barriers  uint64
		last      time.Time
		lastErr   string
		nbdAddrs  []string
		adminAddr []string
	}
}

var _ admin.Backend = (*process)(nil)

func (p *process) Flush(ctx context.Context) error {
	err := p.e.Barrier(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.barriers++
	p.mu.last = time.Now()
	p.mu.lastErr = ""
	if err != nil {
		p.mu.lastErr = err.Error()
	}
	return err
}

func (p *process) Status(ctx context.Context) admin.Status {
	extra := map[string]any{}
	if p.src.Count != nil {
		n := p.src.Count.Snapshot()
		extra[telemetry.ExtraStoreRequests] = n.Requests()
		extra[telemetry.ExtraBytesUp] = n.BytesUp
		extra[telemetry.ExtraBytesDown] = n.BytesDown
	}
	if live, err := p.e.LiveBytes(); err == nil {
		extra[telemetry.ExtraLiveBytes] = live
	}
	if bg := p.bg.Load(); bg != nil {
		_, cycles := bg.r.LastCycle()
		extra[telemetry.ExtraReclaimCycles] = cycles
	}
	if p.src.Lag != nil {
		extra[telemetry.ExtraReplica] = p.src.Lag.Get(ctx)
	}
	if err := p.e.LocalFailure(); err != nil {
		extra[telemetry.ExtraMetadataFailed] = err.Error()
	}
	if free, floor, err := p.e.CacheDirSpace(); err == nil && !p.e.ReadOnly() {
		extra[telemetry.ExtraCacheDirFree] = free
		extra[telemetry.ExtraCacheDirFloor] = floor
		if p.e.CacheDirReserveReleased() {
			extra[telemetry.ExtraCacheDirReserveReleased] = true
		}
	}
	addDamage(extra, p.e)
	p.mirrorStatus(extra)
	if p.src.Timed != nil {
		if since, last := p.src.Timed.Health(); !since.IsZero() {
			extra[telemetry.ExtraStoreUnreachableSince] = since
			extra[telemetry.ExtraStoreLastError] = last
		}
	}
	h := p.sampler.Health(ctx)
	extra[telemetry.ExtraHealth] = h
	p.mu.Lock()
	defer p.mu.Unlock()
	return admin.Status{
		Extra:       extra,
		Version:     p.version,
		PID:         os.Getpid(),
		FSUUID:      UUIDString(p.k.UUID),
		Store:       p.c.Storage.URL,
		Mountpoint:  p.mp,
		ReadOnly:    p.e.ReadOnly(),
		StartedAt:   p.started,
		UptimeSec:   time.Since(p.started).Seconds(),
		NBD:         append([]string(nil), p.mu.nbdAddrs...),
		Admin:       append([]string(nil), p.mu.adminAddr...),
		Barriers:    h.Barriers,
		LastBarrier: h.LastBarrier,
		Flushes:     p.mu.barriers,
		LastFlush:   p.mu.last,
		LastError:   p.mu.lastErr,
	}
}

// reclamation returns the writer's reclamation once it runs.
func (p *process) reclamation() (*reclaim.Reclaimer, *reclaim.MetaGC) {
	bg := p.bg.Load()
	if bg == nil {
		return nil, nil
	}
	return bg.r, bg.gc
}

// nbdAddrs returns the NBD addresses served.
func (p *process) nbdAddrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.mu.nbdAddrs...)
}

// UUIDString formats a filesystem UUID.
func UUIDString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// addDamage puts the damage reads found, if any, into status's extra.
func addDamage(extra map[string]any, e *fs.Engine) {
	if d := e.Damage(); len(d) > 0 {
		extra[telemetry.ExtraDamage] = d
	}
	if rs := e.Reader().Stats(); rs.Corrupt > 0 {
		extra[telemetry.ExtraCorruptFrames] = rs.Corrupt
	}
}
