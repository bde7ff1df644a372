package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/mirror"
	"ebbfs.dev/ebbfs/objstore"
)

// ExtraMirror is the admin.Status.Extra key of the writer's mirror
// (mirror.Status; docs/JSON.md).
const ExtraMirror = "mirror"

// startMirror starts the writer's mirror when [mirror] to is set. Its
// requests to the filesystem's store go through the writer's counted
// store. It waits up to storage.connect_timeout for the mirror store to
// answer; the caller runs the writer without a mirror when it fails.
func (p *process) startMirror(log *slog.Logger) error {
	mc := p.c.Mirror
	if mc.To == "" {
		return nil
	}
	dst, err := objstore.OpenProfile(context.Background(), mc.To, mc.Endpoint, mc.Region, mc.Profile)
	if err != nil {
		return fmt.Errorf("mirror.to: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.c.Storage.ConnectTimeout.D())
	defer cancel()
	m, err := mirror.Open(ctx, mirror.Options{Source: p.st, Dest: dst, Keys: p.k,
		Retention: mc.Retention.D(), Bandwidth: int64(mc.Bandwidth), PollInterval: mc.PollInterval.D(),
		Log: log.With("part", "mirror"), HoldName: mirror.HoldName(hostname(), mc.To), HoldTTL: testReaderTTL(log)})
	if err != nil {
		_ = objstore.Close(dst)
		return fmt.Errorf("mirror to %s: %w", mc.To, err)
	}
	if err := m.Start(ctx); err != nil {
		_ = objstore.Close(dst)
		return err
	}
	p.mirrorDst = dst // before the mirror is published: stopMirror reads it after loading p.mirror
	p.mirror.Store(m)
	log.Info("mirror: running", "to", mc.To, "retention", mc.Retention.D(), "bandwidth", int64(mc.Bandwidth))
	return nil
}

// stopMirror runs after the engine's close: the mirror copies what the
// final barrier and manifest made durable, saves its position and stops.
func (p *process) stopMirror(log *slog.Logger) {
	m := p.mirror.Load()
	if m == nil {
		return
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if err := m.Finish(cctx); err != nil {
		log.Warn("mirror: the last round at stop failed; the next run goes on from its saved position", "err", err)
	}
	_ = objstore.Close(p.mirrorDst)
}

// registerMirror exports the writer's mirror on /metrics once it runs.
func (p *process) registerMirror(adm *admin.Server, log *slog.Logger) {
	if p.c.Mirror.To == "" || p.e.ReadOnly() {
		return
	}
	if err := adm.Registry().Register(mirror.NewCollector(p.mirror.Load)); err != nil {
		log.Warn("metrics: mirror collector not registered", "err", err)
	}
}

// mirrorStatus adds the mirror's status to extra.
func (p *process) mirrorStatus(extra map[string]any) {
	if m := p.mirror.Load(); m != nil {
		extra[ExtraMirror] = m.Status()
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// MirrorHoldTTL is the lifetime of a mirror's hold record: the default,
// or EBBFS_TEST_READER_TTL in a test build.
func MirrorHoldTTL(log *slog.Logger) time.Duration { return testReaderTTL(log) }
