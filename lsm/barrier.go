package lsm

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/retry"
	"ebbfs.dev/ebbfs/objstore"
)

// retry runs op until it succeeds, returns a permanent error (isPermanent),
// or ctx ends, backing off between transient failures.
func (db *DB) retry(ctx context.Context, what string, op func() error, isPermanent func(error) bool) error {
	return retry.Do(ctx, retry.Policy{Clock: db.opts.Clock, Logger: db.opts.Logger, Max: 2 * time.Second, Permanent: isPermanent}, what, op)
}

// Barrier uploads every batch committed so far as one journal object and
// returns once it is durable. Transient store errors are retried with
// backoff until ctx ends; after an error the batches stay queued. A fenced
// writer gets ErrFenced and never acknowledges.
func (db *DB) Barrier(ctx context.Context) error {
	if db.ro.Load() {
		return ErrReadOnly
	}
	db.barrierMu.Lock()
	defer db.barrierMu.Unlock()
	return db.barrierLocked(objstore.WithPurpose(ctx, objstore.PurposeBarrier))
}

func (db *DB) barrierLocked(ctx context.Context) error {
	if err := db.Failed(); err != nil {
		// What Pebble holds can no longer be trusted: acknowledge
		// nothing more (failure.go).
		return err
	}
	db.closeMu.RLock()
	closed := db.closed
	db.closeMu.RUnlock()
	if closed {
		return ErrClosed
	}
	for {
		db.mu.Lock()
		if db.mu.fenced != nil {
			err := db.mu.fenced
			db.mu.Unlock()
			return err
		}
		j := db.mu.unheard
		retried := j != nil
		if !retried {
			if len(db.mu.queue) == 0 {
				db.mu.Unlock()
				return nil
			}
			j = &unheardJournal{seq: db.mu.nextSeq, batches: len(db.mu.queue)}
			manifest := db.mu.latestManifest
			q := db.mu.queue[:j.batches:j.batches]
			db.mu.Unlock()
			j.sealed = sealJournal(db.opts.Keys, Journal{Seq: j.seq, Epoch: db.epoch.Load(), Manifest: manifest, Batches: q})
			db.mu.Lock()
			db.mu.unheard = j
		}
		db.mu.Unlock()

		if err := db.putJournal(ctx, j.seq, j.sealed); err != nil {
			return err
		}
		failpoint.Hit("lsm.barrier.journal-written")
		db.journaled(j)
		// A retried journal holds only the batches of the barrier that
		// first sealed it; the ones committed since still need their own.
		if !retried {
			return nil
		}
	}
}

// unheardJournal is a sealed journal not yet known to be in the store.
type unheardJournal struct {
	seq     uint64
	batches int // how many queued batches it holds, from the front
	sealed  []byte
}

// journaled drops the batches journal j made durable from the queue.
func (db *DB) journaled(j *unheardJournal) {
	db.mu.Lock()
	db.mu.unheard = nil
	rest := make([][]byte, len(db.mu.queue)-j.batches)
	copy(rest, db.mu.queue[j.batches:])
	db.mu.queue = rest
	db.mu.journalsSince++
	db.mu.bytesSince += int64(len(j.sealed))
	due := db.publishDueLocked()
	db.mu.Unlock()
	if err := db.setAppliedSeq(j.seq); err != nil {
		db.opts.Logger.Warn("lsm: journal durable but local applied-seq update failed", "journal", journalKey(j.seq), "err", err)
	}
	if due && db.publisher != nil {
		db.publisher.Notify()
	}
	db.lookForStandbys()
}

// putJournal creates journal object seq with put-if-absent. Losing the
// race to another writer's object fences this writer; finding our own
// bytes (an earlier attempt that succeeded unheard) is success.
func (db *DB) putJournal(ctx context.Context, seq uint64, sealed []byte) error {
	key := journalKey(seq)
	s := db.opts.Store
	err := db.retry(ctx, "put "+key, func() error {
		_, err := s.Put(ctx, key, sealed, objstore.PutOptions{IfAbsent: true})
		if !objstore.IsPreconditionFailed(err) {
			return err
		}
		cur, gerr := s.Get(ctx, key)
		if gerr != nil {
			return gerr // transient (or vanished): try again
		}
		if bytes.Equal(cur, sealed) {
			return nil
		}
		return err
	}, objstore.IsPreconditionFailed)
	if objstore.IsPreconditionFailed(err) {
		db.fence(fmt.Sprintf("journal %s was written by another writer", key))
		return db.Fenced()
	}
	if err != nil {
		return fmt.Errorf("lsm: barrier: journal %s not written, batches stay queued: %w", key, err)
	}
	db.mu.Lock()
	db.mu.journalAt[seq] = db.opts.Clock.Mono()
	db.mu.Unlock()
	return nil
}
