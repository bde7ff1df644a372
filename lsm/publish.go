package lsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// lockedBarrierTimeout bounds the barrier Publish runs while Commit is
// blocked, so a store outage cannot stall commits behind a publication.
const lockedBarrierTimeout = 10 * time.Second

// maxInlineBytes bounds the small files carried inside a manifest.
const maxInlineBytes = 256 << 20

func (db *DB) publishDueLocked() bool {
	if db.opts.DisableAutoPublish || db.mu.journalsSince == 0 {
		return false
	}
	return db.mu.journalsSince >= db.opts.ManifestEvery ||
		db.mu.bytesSince >= db.opts.ManifestBytes ||
		db.opts.Clock.Mono()-db.mu.lastPublish >= db.opts.ManifestInterval
}

// publishLoop publishes a manifest when a barrier finds one due, and on
// the ManifestInterval timer.
func (db *DB) publishLoop(w *worker.Worker) {
	postponed := false
	for db.loopWait(w, db.opts.ManifestInterval) {
		db.mu.Lock()
		due := db.publishDueLocked()
		db.mu.Unlock()
		if !due {
			continue
		}
		if db.Failed() != nil {
			return // logged once by failLocal
		}
		if seq, err := db.Publish(db.bgCtx); err != nil {
			full := errors.Is(err, ErrLocalFull)
			if db.bgCtx.Err() == nil && (!full || !postponed) {
				db.opts.Logger.Warn("lsm: background manifest publication failed; will retry", "err", err)
			}
			postponed = full // a full disk is logged once, not at every barrier
		} else {
			postponed = false
			db.opts.Logger.Info("lsm: manifest published", "seq", seq)
		}
	}
}

// closePublishTimeout bounds the publication a clean Close runs.
const closePublishTimeout = 30 * time.Second

// inheritUncovered counts the journals no manifest covers yet, this
// writer's epoch-start object and those of earlier writers, as written
// since the last publication: the publication rules (ManifestEvery,
// ManifestInterval) then hold across writers, so a writer that inherits
// journals publishes within ManifestInterval even if it writes nothing.
func (db *DB) inheritUncovered() {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.mu.appliedSeq > db.mu.latestManifest {
		db.mu.journalsSince = int(min(db.mu.appliedSeq-db.mu.latestManifest, 1<<30))
	}
}

// publishAtClose publishes a manifest at a clean Close when journals are
// not covered by the newest one (this writer's or inherited), so that
// writers that never live ManifestInterval still leave the store with a
// manifest covering everything: the next writer (on any machine)
// replays nothing, and the journals become deletable. The cost is a
// Pebble flush, the PUT of the tables it made (usually one), the
// manifest's PUT, and the LIST (and DELETE) of the covered journals that
// are old enough (Publish). A failure is logged: the journals stay and
// the next writer publishes them. Not with DisableAutoPublish (the
// caller publishes), nor for a fenced, failed or read-only DB, nor after
// a failed final barrier.
func (db *DB) publishAtClose() {
	if db.ro.Load() || db.opts.DisableAutoPublish || db.isFenced() || db.Failed() != nil {
		return
	}
	db.mu.Lock()
	// Batches still outside any journal mean the final barrier failed
	// (the store is unreachable): a publication would only wait on it.
	due := db.mu.appliedSeq > db.mu.latestManifest && len(db.mu.queue) == 0 && db.mu.unheard == nil
	db.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closePublishTimeout)
	defer cancel()
	if seq, err := db.Publish(ctx); err != nil {
		db.opts.Logger.Warn("lsm: manifest publication at close failed; the next writer publishes", "err", err)
	} else {
		db.opts.Logger.Info("lsm: manifest published at close", "seq", seq)
	}
}

func sstObjectName(epoch uint64, local string) string {
	return fmt.Sprintf("%s%016x-%s", sstPrefix, epoch, local)
}

func isTableFile(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// Publish ships a manifest: a barrier, then under the publication lock
// (Commit waits) a final barrier, Pebble flush and checkpoint; then the
// upload of every table not shipped yet and of the manifest, and finally
// the deletion of journal objects the manifest covers. It returns the
// manifest's sequence, which equals the journal sequence it covers.
func (db *DB) Publish(ctx context.Context) (uint64, error) {
	if db.ro.Load() {
		return 0, ErrReadOnly
	}
	db.publishMu.Lock()
	defer db.publishMu.Unlock()
	ctx = objstore.WithPurpose(ctx, objstore.PurposeMetadata)
	// Drain outside the lock so that only a short tail is journaled while
	// commits wait.
	if err := db.Barrier(ctx); err != nil {
		return 0, err
	}
	ckpt, seq, err := db.checkpoint(ctx)
	if err != nil || ckpt == "" {
		return seq, err
	}
	defer os.RemoveAll(ckpt)
	failpoint.Hit("lsm.publish.checkpointed")

	m := &Manifest{Format: 1, Seq: seq, Epoch: db.epoch.Load(), Created: db.opts.Clock.Now().UTC()}
	entries, err := os.ReadDir(ckpt)
	if err != nil {
		return 0, fmt.Errorf("lsm: publish: %w", err)
	}
	db.mu.Lock()
	shipped := copyMap(db.mu.shipped)
	db.mu.Unlock()
	next := map[string]string{}
	inline := 0
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		if isTableFile(name) {
			obj, size, err := db.shipTable(ctx, filepath.Join(ckpt, name), name, shipped[name])
			if err != nil {
				return 0, err
			}
			next[name] = obj
			db.mu.Lock()
			db.mu.shipped[name] = obj // a failed publish must not re-upload it
			db.mu.Unlock()
			m.Tables = append(m.Tables, ManifestTable{Name: name, Object: obj, Size: size})
			continue
		}
		data, err := os.ReadFile(filepath.Join(ckpt, name))
		if err != nil {
			return 0, fmt.Errorf("lsm: publish: %w", err)
		}
		if inline += len(data); inline > maxInlineBytes {
			return 0, fmt.Errorf("lsm: publish: checkpoint's non-table files exceed %d bytes", maxInlineBytes)
		}
		m.Files = append(m.Files, ManifestFile{Name: name, Data: data})
	}
	sort.Slice(m.Tables, func(i, j int) bool { return m.Tables[i].Name < m.Tables[j].Name })
	plain, err := encodeManifest(m)
	if err != nil {
		return 0, fmt.Errorf("lsm: publish: %w", err)
	}
	key := manifestKey(seq)
	sealed := db.opts.Keys.Meta.Seal(manifestAAD(db.opts.Keys, seq), plain)
	failpoint.Hit("lsm.publish.tables-shipped")
	err = db.retry(ctx, "put "+key, func() error {
		_, err := db.opts.Store.Put(ctx, key, sealed, objstore.PutOptions{IfAbsent: true})
		return err
	}, objstore.IsPreconditionFailed)
	if objstore.IsPreconditionFailed(err) {
		// Same covered sequence means the same logical state: an earlier
		// attempt of ours got through. Check that it is readable.
		b, gerr := db.opts.Store.Get(ctx, key)
		if gerr != nil {
			return 0, fmt.Errorf("lsm: publish: %s exists but cannot be read: %w", key, gerr)
		}
		if _, oerr := openManifest(db.opts.Keys, seq, b); oerr != nil {
			return 0, fmt.Errorf("lsm: publish: %s exists and is unreadable: %w", key, oerr)
		}
		err = nil
	}
	if err != nil {
		return 0, fmt.Errorf("lsm: publish: %s not written: %w", key, err)
	}
	failpoint.Hit("lsm.publish.manifest-written")
	db.mu.Lock()
	// Tables that left the LSM are dropped from the map; those still live
	// keep their object.
	for name, obj := range db.mu.shipped {
		if next[name] != obj {
			delete(db.mu.shipped, name)
		}
	}
	if seq > db.mu.latestManifest {
		db.mu.latestManifest = seq
	}
	db.mu.journalsSince = 0
	db.mu.bytesSince = 0
	db.mu.lastPublish = db.opts.Clock.Mono()
	db.mu.Unlock()
	db.deleteCoveredJournals(ctx, seq)
	failpoint.Hit("lsm.publish.journals-deleted")
	return seq, nil
}

// checkpoint runs the locked phase of Publish. It returns "" when the
// newest manifest already covers every journal.
func (db *DB) checkpoint(ctx context.Context) (dir string, seq uint64, err error) {
	db.commitMu.Lock()
	defer db.commitMu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, lockedBarrierTimeout)
	db.barrierMu.Lock()
	err = db.barrierLocked(bctx)
	db.barrierMu.Unlock()
	cancel()
	if err != nil {
		return "", 0, err
	}
	db.mu.Lock()
	seq = db.mu.appliedSeq
	latest := db.mu.latestManifest
	db.mu.Unlock()
	if seq == latest {
		return "", seq, nil
	}
	if err := db.localRoom(); err != nil {
		return "", 0, fmt.Errorf("lsm: publish postponed: %w", err)
	}
	// The flush rotates Pebble's log, which Pebble cannot survive failing
	// (failure.go).
	if err := db.probeLocal(); err != nil {
		return "", 0, fmt.Errorf("lsm: publish: %w", err)
	}
	db.sinceFlush = 0
	if err := os.MkdirAll(db.tmpDir(), 0o700); err != nil {
		return "", 0, fmt.Errorf("lsm: publish: %w", err)
	}
	dir = filepath.Join(db.tmpDir(), fmt.Sprintf("ckpt-%016x", seq))
	if err := os.RemoveAll(dir); err != nil {
		return "", 0, fmt.Errorf("lsm: publish: %w", err)
	}
	err = db.withPebble(func(p *pebble.DB) error {
		if err := p.Flush(); err != nil {
			return err
		}
		return p.Checkpoint(dir, pebble.WithFlushedWAL())
	})
	if err != nil {
		return "", 0, fmt.Errorf("lsm: publish: checkpoint: %w", err)
	}
	return dir, seq, nil
}

// shipTable uploads one table file unless it is already shipped (known).
func (db *DB) shipTable(ctx context.Context, path, name, known string) (string, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, fmt.Errorf("lsm: publish: %w", err)
	}
	if known != "" {
		return known, fi.Size(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", 0, fmt.Errorf("lsm: publish: %w", err)
	}
	obj := sstObjectName(db.epoch.Load(), name)
	sealed := sealSST(db.opts.Keys, obj, data, sstChunkSize)
	err = db.retry(ctx, "put "+obj, func() error {
		_, err := db.opts.Store.Put(ctx, obj, sealed, objstore.PutOptions{})
		return err
	}, nil)
	if err != nil {
		return "", 0, fmt.Errorf("lsm: publish: table %s not shipped: %w", obj, err)
	}
	failpoint.Hit("lsm.publish.table-uploaded")
	return obj, int64(len(data)), nil
}

// PruneJournals deletes the journal objects the newest manifest covers
// that are older than JournalRetention, as a publication does; metadata
// GC calls it, so that writers that never live to publish (short mounts)
// do not leave their journals behind. A reader deletes nothing.
func (db *DB) PruneJournals(ctx context.Context) {
	if db.opts.ReadOnly {
		return
	}
	if seq := db.LatestManifest(); seq > 0 {
		db.deleteCoveredJournals(ctx, seq)
	}
}

// deleteCoveredJournals removes journal objects at or below seq. Failures
// are logged: the next publication deletes them.
func (db *DB) deleteCoveredJournals(ctx context.Context, seq uint64) {
	objs, err := objstore.ListAll(ctx, db.opts.Store, journalPrefix)
	if err != nil {
		db.opts.Logger.Warn("lsm: cannot list journals for deletion", "err", err)
		return
	}
	// A covered journal is kept until Options.JournalRetention after it was
	// written, so that a replica probing journal by journal never misses
	// one (follow.go); a later publication deletes it.
	now, wall := db.opts.Clock.Mono(), db.opts.Clock.Now()
	var del []string
	db.mu.Lock()
	for _, o := range objs {
		s, ok := parseSeqKey(journalPrefix, o.Key)
		if !ok || s > seq {
			continue
		}
		at, mine := db.mu.journalAt[s]
		// Written before this process: as old as it, or as old as the
		// store's timestamp says if that is older (the journals of
		// writers that lived a few seconds each would otherwise wait
		// for one that lives past the retention).
		old := !mine && !o.ModTime.IsZero() && wall.Sub(o.ModTime) >= db.opts.JournalRetention
		if !mine {
			at = db.openedAt
		}
		if now-at < db.opts.JournalRetention && !old {
			continue
		}
		del = append(del, o.Key)
		delete(db.mu.journalAt, s)
	}
	db.mu.Unlock()
	if len(del) == 0 {
		return
	}
	if err := db.opts.Store.DeleteMany(ctx, del); err != nil {
		db.opts.Logger.Warn("lsm: cannot delete covered journals", "count", len(del), "err", err)
	}
}

// ReferencedMetaObjects returns the meta/ objects that must be kept: the
// newest manifest in the store, every table it references, and (for a
// writer) every table this process has shipped and may reference in its
// next manifest. Metadata GC deletes nothing in this set.
func (db *DB) ReferencedMetaObjects(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	seqs, err := listSeqs(ctx, db.opts.Store, manifestPrefix)
	if err != nil {
		return nil, err
	}
	if len(seqs) > 0 {
		seq := seqs[len(seqs)-1]
		m, err := db.fetchManifest(ctx, seq)
		if err != nil {
			return nil, err
		}
		out[manifestKey(seq)] = true
		for _, t := range m.Tables {
			out[t.Object] = true
		}
	}
	db.mu.Lock()
	for _, obj := range db.mu.shipped {
		out[obj] = true
	}
	db.mu.Unlock()
	return out, nil
}

// ManifestObjects returns the objects (manifest + tables) of manifest seq,
// for checkpoint records and metadata GC.
func (db *DB) ManifestObjects(ctx context.Context, seq uint64) ([]string, error) {
	m, err := db.fetchManifest(ctx, seq)
	if err != nil {
		return nil, err
	}
	out := []string{manifestKey(seq)}
	for _, t := range m.Tables {
		out = append(out, t.Object)
	}
	return out, nil
}
