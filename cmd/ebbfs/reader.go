package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/objstore"
)

// readerCheckpointName is stable for one reader (host and cache directory),
// so a restarted reader takes over its previous record.
func readerCheckpointName(c *config.Config) string {
	host, _ := os.Hostname()
	var b strings.Builder
	for _, r := range host {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			b.WriteRune(r)
		}
	}
	h := b.String()
	if len(h) > 64 {
		h = h[:64]
	}
	if h == "" {
		h = "host"
	}
	sum := sha256.Sum256([]byte(c.Cache.Dir))
	return "reader-" + h + "-" + hex.EncodeToString(sum[:6])
}

// startReaderCheckpoint keeps the reader's ephemeral checkpoint alive, so
// the writer's reclamation waits for it (its span sets the grace). It
// returns a stop function; without a published manifest there is nothing
// to pin and the reader runs without one (logged).
func startReaderCheckpoint(ctx context.Context, c *config.Config, e *fs.Engine, st objstore.Store, log *slog.Logger) func() {
	r, err := checkpoint.NewRenewer(checkpoint.RenewerOptions{
		Store:       st,
		Name:        readerCheckpointName(c),
		ManifestSeq: e.DB().LatestManifest,
		Logger:      log,
	})
	if err == nil {
		err = r.Start(ctx)
	}
	if err != nil {
		log.Warn("reader runs without its ephemeral checkpoint; the writer may reclaim segments this reader still reads", "err", err)
		return func() {}
	}
	log.Info("reader checkpoint pinned", "name", r.Record().Name, "manifest", r.Record().ManifestSeq)
	return func() {
		if err := r.Close(); err != nil {
			log.Warn("reader checkpoint not removed", "err", err)
		}
	}
}
