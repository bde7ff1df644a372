package mirror

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
)

// The mirror's hold on the source: an ephemeral checkpoint record in the
// source store, like a replica's (checkpoint.Renewer), pinning the newest
// manifest the mirror holds and renewed with the time the mirror last
// held everything durable. Its span is the TTL plus the mirror's lag, so
// the writer's grace for dead segments (at least the longest span plus
// 30 s) outlasts the lag: a segment that dies while the mirror is behind
// stays in the source until the mirror has read the journals that name
// it. Without it, a mirror lagging more than 60 s could find segments of
// points it copies already gone (counted as missing).

// HoldName is the name of the hold record of a mirror from this host into
// the store at to: "reader-mirror-" and 12 hex digits of a hash of both.
// The reader- prefix makes it a replica's record to every part of ebbfs
// (the writer's grace, metadata GC of expired ones, mirrors not copying
// it).
func HoldName(host, to string) string {
	h := sha256.Sum256([]byte(host + "\x00" + to))
	return fmt.Sprintf("%smirror-%x", checkpoint.ReaderPrefix, h[:6])
}

type hold struct {
	r        *checkpoint.Renewer
	manifest atomic.Uint64
	caught   atomic.Int64 // unix ns
}

func (m *Mirror) startHold(ctx context.Context) error {
	if m.opts.HoldName == "" {
		return nil
	}
	h := &hold{}
	r, err := checkpoint.NewRenewer(checkpoint.RenewerOptions{
		Store:       m.opts.Source,
		Name:        m.opts.HoldName,
		TTL:         m.opts.HoldTTL,
		ManifestSeq: h.manifest.Load,
		ViewTime: func() time.Time {
			if n := h.caught.Load(); n != 0 {
				return time.Unix(0, n)
			}
			return time.Time{}
		},
		Logger: m.opts.Log,
	})
	if err != nil {
		return fmt.Errorf("mirror: its hold on the source: %w", err)
	}
	h.r = r
	m.hold = h
	m.updateHold()
	if err := r.Start(ctx); err != nil {
		m.hold = nil
		return fmt.Errorf("mirror: writing its hold on the source (%s): %w", m.opts.HoldName, err)
	}
	return nil
}

func (m *Mirror) updateHold() {
	if m.hold == nil {
		return
	}
	m.hold.manifest.Store(m.st.newestManifest())
	if !m.st.CaughtUp.IsZero() {
		m.hold.caught.Store(m.st.CaughtUp.UnixNano())
	}
}

func (m *Mirror) stopHold() {
	if m.hold == nil {
		return
	}
	if err := m.hold.r.Close(); err != nil {
		m.opts.Log.Warn("mirror: its hold on the source was not removed; it expires by itself", "err", err)
	}
	m.hold = nil
}
