package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/config"
	"ebbfs.dev/ebbfs/objstore"
)

// readerCheckpointName is stable for one reader (host and cache directory,
// and the checkpoint it serves), so a restarted reader takes over its
// previous record. A reader serving checkpoint NAME (run --checkpoint)
// names its record checkpoint.ServingReaderName, which says NAME, so that
// `checkpoint delete NAME` knows it is in use.
func readerCheckpointName(c *config.Config, serves string) string {
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
	if serves != "" {
		id := sha256.Sum256([]byte(h + "\x00" + c.Cache.Dir))
		if n, ok := checkpoint.ServingReaderName(hex.EncodeToString(id[:6]), serves); ok {
			return n
		}
	}
	return checkpoint.ReaderPrefix + h + "-" + hex.EncodeToString(sum[:6])
}

// startReaderCheckpoint keeps the reader's ephemeral checkpoint alive, so
// the writer's reclamation waits for it (its span sets the grace). It
// returns a stop function. Before the writer has published a manifest
// there is nothing to pin: the renewer pins the first one the replica
// learns of (each journal names the newest manifest, lsm.Journal), and
// moves its record to newer ones as the replica follows, so that a long
// running replica does not keep an old manifest's tables alive.
//
// Span and renewal: the record lives checkpoint.DefaultReaderTTL (3 min)
// and is renewed every third of that (1 min). A following replica's
// renewal re-pins with CreateTime = the wall time of its last probe that
// found nothing newer (FollowStatus.UpToDate), so the span is the TTL plus
// the replica's lag: the writer's grace for a segment that dies now is
// max(60 s, span + 30 s), which outlasts every read this replica can
// still make from its older view. A replica that stops renewing (paused,
// partitioned, killed) lets the record expire; when it comes back its next
// renewal revives or re-creates it, and reads of segments reclaimed
// meanwhile re-resolve from the newer state (fs.Engine.Read).
func startReaderCheckpoint(ctx context.Context, c *config.Config, serves string, e *fs.Engine, st objstore.Store, log *slog.Logger) func() {
	name := readerCheckpointName(c, serves)
	r, err := checkpoint.NewRenewer(checkpoint.RenewerOptions{
		Store:       st,
		Name:        name,
		ManifestSeq: e.DB().LatestManifest,
		ViewTime:    func() time.Time { return e.FollowStatus().UpToDate },
		TTL:         testReaderTTL(log),
		Logger:      log,
	})
	if err == nil {
		err = r.Start(ctx)
	}
	if err != nil {
		log.Warn("reader runs without its ephemeral checkpoint; the writer may reclaim segments this reader still reads", "err", err)
		return func() {}
	}
	if seq := r.Record().ManifestSeq; seq != 0 {
		log.Info("reader checkpoint pinned", "name", name, "manifest", seq)
	} else {
		log.Info("no manifest published yet; the reader checkpoint pins the first one this replica learns of", "name", name)
	}
	return func() {
		if err := r.Close(); err != nil {
			log.Warn("reader checkpoint not removed", "err", err)
		}
	}
}
