package lsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2/batchrepr"

	"ebbfs.dev/ebbfs/objstore"
)

// How a read-only replica follows the writer (DESIGN sections 5 and 9).
//
// The replica probes the next journal sequence with one GET (FollowNext):
// a NotFound means nothing new, an object is applied and its keys are
// returned so that the caller can invalidate what they name. No LIST is
// needed while the replica keeps up, because the writer keeps every
// journal object for at least Options.JournalRetention after writing it, even
// once a manifest covers it: a replica whose last probe is less than
// FollowGap old cannot have missed one. After a longer gap (a
// pause, a partition) the replica calls CatchUp, which lists the
// manifests and, when the journals it needs are gone, rebuilds its local
// state from the newest manifest and swaps it in under its readers.

// DefaultJournalRetention is how long the writer keeps a journal object
// after writing it, covered by a manifest or not. Both sides measure it on
// their own monotonic clocks; no clocks are compared.
const DefaultJournalRetention = 5 * time.Minute

// FollowGap is the longest time between two successful probes after which
// a replica must CatchUp rather than trust the next probe: half the
// journal retention.
func (db *DB) FollowGap() time.Duration { return db.opts.JournalRetention / 2 }

// FollowNext applies the journal object after the applied one, if it
// exists: one GET. It returns the user keys the object's batches wrote
// (sets, merges and deletes; range deletions yield their start key), or
// ok=false when there is no such object yet.
func (db *DB) FollowNext(ctx context.Context) (keys [][]byte, ok bool, err error) {
	return db.FollowNextWith(ctx, nil)
}

// FollowNextWith is FollowNext with the application of the journal (not
// its GET) run by around, which is given the keys the journal writes: the
// caller can make the application and its own refresh of what those keys
// mean one step for its readers. nil: apply directly.
func (db *DB) FollowNextWith(ctx context.Context, around func(keys [][]byte, apply func() error) error) (keys [][]byte, ok bool, err error) {
	if !db.ro.Load() || db.pinned {
		return nil, false, errors.New("lsm: FollowNext is for read-only followers")
	}
	seq := db.AppliedSeq() + 1
	key := journalKey(seq)
	sealed, err := db.opts.Store.Get(objstore.WithPurpose(ctx, objstore.PurposeReplicaPoll), key)
	if objstore.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("lsm: %s: %w", key, err)
	}
	j, err := openJournal(db.opts.Keys, seq, sealed)
	if err != nil {
		return nil, false, err
	}
	for i, repr := range j.Batches {
		r, err := batchReader(repr)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s: batch %d: %v", ErrCorrupt, key, i, err)
		}
		for {
			_, ukey, _, more, err := r.Next()
			if err != nil {
				return nil, false, fmt.Errorf("%w: %s: batch %d: %v", ErrCorrupt, key, i, err)
			}
			if !more {
				break
			}
			keys = append(keys, append([]byte(nil), ukey...))
		}
	}
	apply := func() error { return db.applyJournal(j) }
	if around != nil {
		err = around(keys, apply)
	} else {
		err = apply()
	}
	if err != nil {
		return nil, false, err
	}
	return keys, true, nil
}

func batchReader(repr []byte) (batchrepr.Reader, error) {
	if _, ok := batchrepr.ReadHeader(repr); !ok {
		return nil, errors.New("batch header")
	}
	return batchrepr.Read(repr), nil
}

// CatchUp brings a replica that may have missed journal objects (its last
// probe is older than FollowGap) to the newest durable state. It returns
// jumped=true when it had to rebuild from a newer manifest: every cached
// view of the metadata is then stale. Otherwise the caller goes on with
// FollowNext.
func (db *DB) CatchUp(ctx context.Context) (jumped bool, err error) {
	if !db.ro.Load() || db.pinned {
		return false, errors.New("lsm: CatchUp is for read-only followers")
	}
	manifests, err := listSeqs(ctx, db.opts.Store, manifestPrefix)
	if err != nil {
		return false, err
	}
	applied := db.AppliedSeq()
	if len(manifests) == 0 || manifests[len(manifests)-1] <= applied {
		return false, nil
	}
	// A newer manifest exists. If the next journal is still there, the
	// replica can follow journal by journal.
	if _, err := db.opts.Store.Head(ctx, journalKey(applied+1)); err == nil {
		return false, nil
	} else if !objstore.IsNotFound(err) {
		return false, err
	}
	return true, db.rebuild(ctx)
}

// rebuild recovers the newest durable state into a fresh directory and
// swaps it in: readers see the old state until the swap and the new one
// after, never a mix.
func (db *DB) rebuild(ctx context.Context) error {
	fresh := &DB{opts: db.opts, pebbleDir: filepath.Join(db.opts.Dir, fmt.Sprintf("pebble-%d", time.Now().UnixNano()))}
	fresh.ro.Store(true)
	fresh.mu.shipped = map[string]string{}
	fresh.mu.nextSeq = 1
	if err := os.RemoveAll(fresh.pebbleDir); err != nil {
		return err
	}
	if err := fresh.recoverFull(ctx); err != nil {
		if fresh.pdb != nil {
			_ = fresh.pdb.Close()
		}
		_ = os.RemoveAll(fresh.pebbleDir)
		return err
	}
	db.closeMu.Lock()
	if db.closed {
		db.closeMu.Unlock()
		_ = fresh.pdb.Close()
		_ = os.RemoveAll(fresh.pebbleDir)
		return ErrClosed
	}
	old, oldDir := db.pdb, db.pebbleDir
	db.releaseSnapshots(old)
	db.pdb, db.pebbleDir = fresh.pdb, fresh.pebbleDir
	db.changes.Add(1)
	db.mu.Lock()
	db.mu.appliedSeq = fresh.mu.appliedSeq
	db.mu.nextSeq = fresh.mu.nextSeq
	db.mu.latestManifest = fresh.mu.latestManifest
	db.mu.shipped = fresh.mu.shipped
	db.mu.Unlock()
	db.closeMu.Unlock()
	if err := old.Close(); err != nil {
		db.opts.Logger.Warn("lsm: closing the replaced replica state", "err", err)
	}
	if err := os.RemoveAll(oldDir); err != nil {
		db.opts.Logger.Warn("lsm: removing the replaced replica state", "dir", oldDir, "err", err)
	}
	db.opts.Logger.Info("lsm: replica moved to a newer manifest", "manifest", db.LatestManifest(), "applied_seq", db.AppliedSeq())
	return nil
}

// recoverFull is recover without a fast restart, into db.pebbleDir.
func (db *DB) recoverFull(ctx context.Context) error {
	if err := os.MkdirAll(db.pebbleDir, 0o700); err != nil {
		return err
	}
	manifests, err := listSeqs(ctx, db.opts.Store, manifestPrefix)
	if err != nil {
		return err
	}
	var mseq uint64
	if len(manifests) > 0 {
		mseq = manifests[len(manifests)-1]
	}
	if err := db.loadManifest(ctx, mseq); err != nil {
		return err
	}
	// Journals after the manifest, one GET each, until the first gap.
	for {
		_, ok, err := db.FollowNext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
	}
}
