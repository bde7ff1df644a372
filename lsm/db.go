// Package lsm is the ebbfs metadata store: a local Pebble database holding
// metadata only, shipped to the object store as encrypted journal objects
// (one per durability barrier) and periodic manifests (a Pebble checkpoint),
// so that a machine with only the bucket and the password recovers every
// barrier'd batch. See docs/FORMAT.md, "Metadata store objects", for the
// byte formats.
package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"ebbfs.dev/ebbfs/internal/worker"
)

// ErrClosed is returned by operations on a closed DB.
var ErrClosed = errors.New("lsm: database is closed")

// DB is an open metadata store.
type DB struct {
	opts      Options
	pdb       *pebble.DB
	pebbleDir string
	// ro is set for a replica; a standby's promotion (ha.go) clears it
	// once the DB is a writer.
	ro     atomic.Bool
	pinned bool // OpenAt: a fixed manifest, never refreshed
	// epoch is the writer epoch from the lease (0 on a replica until a
	// promotion, ha.go).
	epoch atomic.Uint64

	// commitMu orders Commit (apply + enqueue); Publish holds it across the
	// final barrier, flush and checkpoint (the publication barrier).
	commitMu sync.Mutex
	// barrierMu serialises journal uploads.
	barrierMu sync.Mutex
	// publishMu serialises Publish.
	publishMu sync.Mutex
	// closeMu guards pdb against use after Close: users of pdb hold it
	// shared, Close holds it exclusively.
	closeMu sync.RWMutex
	closed  bool

	// changes counts the changes to the local state (Changes).
	changes atomic.Uint64

	// snaps are the open snapshots (snapshot.go), closed before the state
	// they view is.
	snapMu sync.Mutex
	snaps  map[*Snapshot]bool

	leaseMu   sync.Mutex
	lease     Lease
	leaseETag string
	// standbys are the standbys this writer heartbeats for (ha.go);
	// leaseWritten and leaseLooked are the Clock.Mono of its last write
	// and last write or read of the lease (all under leaseMu); beats
	// counts its heartbeats.
	standbys     map[string]standbySeen
	leaseWritten time.Duration
	leaseLooked  time.Duration
	beats        atomic.Uint64
	handover     atomic.Pointer[string] // a standby's request (HandoverRequested)

	mu struct {
		sync.Mutex
		queue   [][]byte // committed, not yet journaled batch reprs
		nextSeq uint64   // next journal sequence to create
		// unheard is the journal whose PUT ended without an answer: it may
		// exist in the store. Until it is known written, every barrier
		// sends exactly these bytes again at its sequence, so that finding
		// the object proves it ours rather than another writer's.
		unheard        *unheardJournal
		appliedSeq     uint64 // highest journal sequence contained locally
		fenced         error
		latestManifest uint64
		journalsSince  int
		bytesSince     int64
		lastPublish    time.Duration            // Clock.Mono of the last publication
		shipped        map[string]string        // local table file -> object key
		uploading      map[string]bool          // objects being shipped right now
		journalAt      map[uint64]time.Duration // Clock.Mono when this process wrote a journal
	}

	openedAt time.Duration // Clock.Mono at open: the age floor of older journals

	res        reserve // the emergency reserve of free space (reserve.go)
	fail       failure // set once Pebble failed with an I/O error (failure.go)
	sinceFlush int     // batch bytes committed since the last memtable flush (commitMu)
	vfs        vfs.FS  // Pebble's filesystem (probeLocal)

	// bgCtx is cancelled first by close and abort: it stops the
	// heartbeat and the publisher (loopWait), which close then waits for
	// unless Pebble has failed.
	bgCtx     context.Context
	bgCancel  context.CancelFunc
	heartbeat *worker.Worker // the lease heartbeat (lease.go), or nil
	publisher *worker.Worker // the manifest publisher (publish.go), or nil
	closeOnce sync.Once
	closeErr  error
}

// Epoch is the writer epoch taken from the lease (0 for a read-only DB).
func (db *DB) Epoch() uint64 { return db.epoch.Load() }

// LatestManifest is the sequence of the newest manifest this DB knows of
// (recovered from or published), 0 if none.
func (db *DB) LatestManifest() uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.mu.latestManifest
}

// AppliedSeq is the highest journal sequence the local database contains.
func (db *DB) AppliedSeq() uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.mu.appliedSeq
}

// Pending reports the number of committed batches not yet in a journal.
func (db *DB) Pending() int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return len(db.mu.queue)
}

func (db *DB) fence(reason string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.mu.fenced == nil {
		db.mu.fenced = fmt.Errorf("%w: %s", ErrFenced, reason)
		db.opts.Logger.Error("lsm: writer fenced; refusing all further writes", "reason", reason, "epoch", db.epoch.Load())
	}
}

func (db *DB) isFenced() bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.mu.fenced != nil
}

// Fenced returns the fencing error, or nil while this writer is current.
func (db *DB) Fenced() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.mu.fenced
}

// withPebble runs f with pdb guarded against Close. Once the local store
// failed it does not run f; an I/O error or a panic in f fails it
// (failure.go).
func (db *DB) withPebble(f func(p *pebble.DB) error) (err error) {
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed {
		return ErrClosed
	}
	if err := db.Failed(); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = db.failLocal(fmt.Errorf("pebble gave up: %v", r))
		}
	}()
	err = f(db.pdb)
	if isLocalFailure(err) {
		err = db.failLocal(err)
	}
	return err
}

// Get returns a copy of key's value.
func (db *DB) Get(key []byte) (val []byte, ok bool, err error) {
	err = db.withPebble(func(p *pebble.DB) error {
		v, c, err := p.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		val, ok = bytes.Clone(v), true
		if val == nil {
			val = []byte{}
		}
		return c.Close()
	})
	return val, ok, err
}

// NewIter returns a Pebble iterator over [lower, upper) (nil = unbounded).
// The caller must Close it before closing the DB.
func (db *DB) NewIter(lower, upper []byte) (*pebble.Iterator, error) {
	var it *pebble.Iterator
	err := db.withPebble(func(p *pebble.DB) error {
		var err error
		it, err = p.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		return err
	})
	return it, err
}

// ErrStopScan, returned by a Scan callback, ends the scan without error.
var ErrStopScan = errors.New("lsm: stop scan")

// Changes counts the changes to the keys: every Commit, journal batch
// applied and state swapped in, counted once readers can see it. A caller
// that read Changes before reading keys and finds it unchanged later knows
// that what it read is still what the keys hold.
func (db *DB) Changes() uint64 { return db.changes.Load() }

// Scan calls f for every key in [lower, upper) in order, in one iterator
// (a consistent view). The slices are valid only during the call. It
// stops at f's first error, which it returns (ErrStopScan: nil).
func (db *DB) Scan(lower, upper []byte, f func(k, v []byte) error) error {
	// The whole scan holds closeMu shared: a replica swapping in a newer
	// state (rebuild) waits for it.
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed {
		return ErrClosed
	}
	return scanWith(db.pdb.NewIter, lower, upper, f)
}

// scanWith is Scan over the iterators newIter makes (a DB's or a
// snapshot's).
func scanWith(newIter func(*pebble.IterOptions) (*pebble.Iterator, error), lower, upper []byte, f func(k, v []byte) error) error {
	it, err := newIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := f(it.Key(), it.Value()); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	return it.Error()
}

// Batch collects mutations applied atomically by Commit. A batch is used
// once: Commit or Close releases it.
type Batch struct {
	db *DB
	pb *pebble.Batch
}

// NewBatch returns a write-only batch.
func (db *DB) NewBatch() *Batch { return &Batch{db: db, pb: db.pdb.NewBatch()} }

// NewIndexedBatch returns a batch that can also read its own writes over
// the database (Get, NewIter).
func (db *DB) NewIndexedBatch() *Batch { return &Batch{db: db, pb: db.pdb.NewIndexedBatch()} }

var errBatchDone = errors.New("lsm: batch already committed or closed")

// Set sets key to value.
func (b *Batch) Set(key, value []byte) error {
	if b.pb == nil {
		return errBatchDone
	}
	return b.pb.Set(key, value, nil)
}

// Delete removes key.
func (b *Batch) Delete(key []byte) error {
	if b.pb == nil {
		return errBatchDone
	}
	return b.pb.Delete(key, nil)
}

// DeleteRange removes every key in [start, end).
func (b *Batch) DeleteRange(start, end []byte) error {
	if b.pb == nil {
		return errBatchDone
	}
	if bytes.Compare(start, end) >= 0 {
		return fmt.Errorf("lsm: DeleteRange with empty range [%q, %q)", start, end)
	}
	return b.pb.DeleteRange(start, end, nil)
}

// Merge adds a counter delta (CounterDelta) to a key under PrefixCounter.
func (b *Batch) Merge(key, delta []byte) error {
	if b.pb == nil {
		return errBatchDone
	}
	if err := checkCounterKey(key); err != nil {
		return err
	}
	if _, _, _, err := DecodeCounter(delta); err != nil {
		return err
	}
	return b.pb.Merge(key, delta, nil)
}

// AddCounter is Merge(key, CounterDelta(live, total, size)).
func (b *Batch) AddCounter(key []byte, live, total, size int64) error {
	return b.Merge(key, CounterDelta(live, total, size))
}

// Get reads key through an indexed batch (its own writes over the DB).
func (b *Batch) Get(key []byte) ([]byte, bool, error) {
	if b.pb == nil {
		return nil, false, errBatchDone
	}
	var (
		val []byte
		ok  bool
	)
	err := b.db.withPebble(func(*pebble.DB) error {
		v, c, err := b.pb.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		val, ok = bytes.Clone(v), true
		if val == nil {
			val = []byte{}
		}
		return c.Close()
	})
	return val, ok, err
}

// NewIter iterates an indexed batch merged over the DB.
func (b *Batch) NewIter(lower, upper []byte) (*pebble.Iterator, error) {
	if b.pb == nil {
		return nil, errBatchDone
	}
	var it *pebble.Iterator
	err := b.db.withPebble(func(*pebble.DB) error {
		var err error
		it, err = b.pb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		return err
	})
	return it, err
}

// Empty reports whether the batch holds no mutations.
func (b *Batch) Empty() bool { return b.pb == nil || b.pb.Empty() }

// Count is the number of mutations in the batch.
func (b *Batch) Count() uint32 {
	if b.pb == nil {
		return 0
	}
	return b.pb.Count()
}

// Len is the size of the batch representation in bytes.
func (b *Batch) Len() int {
	if b.pb == nil {
		return 0
	}
	return b.pb.Len()
}

// Close discards an uncommitted batch. Closing twice is harmless.
func (b *Batch) Close() error {
	if b.pb == nil {
		return nil
	}
	err := b.pb.Close()
	b.pb = nil
	return err
}

// Commit applies b locally (no fsync) and queues it for the next journal
// object. It is visible to readers at once and durable after the next
// successful Barrier. The batch is consumed either way.
func (db *DB) Commit(b *Batch) error {
	if b == nil || b.pb == nil {
		return errBatchDone
	}
	defer b.Close()
	if db.ro.Load() {
		return ErrReadOnly
	}
	if b.db != db {
		return errors.New("lsm: batch belongs to another DB")
	}
	db.commitMu.Lock()
	defer db.commitMu.Unlock()
	if err := db.Fenced(); err != nil {
		return err
	}
	if b.pb.Empty() {
		return nil
	}
	// Release the reserve before Pebble needs it, if the disk is full.
	// The commit goes on: callers refuse what adds metadata themselves
	// (MetadataRoom), and what they still commit must not be lost.
	db.checkReserve()
	repr := bytes.Clone(b.pb.Repr())
	err := db.withPebble(func(p *pebble.DB) error { return p.Apply(b.pb, pebble.NoSync) })
	db.changes.Add(1) // also on an error: Pebble may have applied it
	if err != nil {
		return err
	}
	db.mu.Lock()
	db.mu.queue = append(db.mu.queue, repr)
	db.mu.Unlock()
	db.flushIfDue(len(repr))
	return nil
}

// setAppliedSeq records seq in memory (so no later journal reuses it) and
// locally under KeyAppliedSeq.
func (db *DB) setAppliedSeq(seq uint64) error {
	db.mu.Lock()
	if seq > db.mu.appliedSeq {
		db.mu.appliedSeq = seq
	}
	if seq >= db.mu.nextSeq {
		db.mu.nextSeq = seq + 1
	}
	db.mu.Unlock()
	return db.withPebble(func(p *pebble.DB) error { return p.Set(KeyAppliedSeq, encodeU64(seq), pebble.NoSync) })
}

// Close stops the heartbeat and the publisher, closes Pebble and, when
// every committed batch is in a journal and the writer was not fenced,
// writes the clean-shutdown marker and releases the lease. The final
// Barrier is the caller's job: batches still queued are lost locally too
// (the next Open recovers from the store).
func (db *DB) Close() error {
	db.closeOnce.Do(func() { db.closeErr = db.close() })
	return db.closeErr
}

func (db *DB) close() error {
	db.bgCancel()
	db.unwatchReserve()
	if err := db.Failed(); err != nil {
		// Pebble, and a background goroutine of ours waiting on it, may
		// be stuck on a lock a panic or a parked goroutine holds: leave
		// them, and write no clean-shutdown marker (the next open
		// recovers from the store).
		return err
	}
	db.waitLoops()
	db.publishAtClose()

	db.commitMu.Lock()
	db.closeMu.Lock()
	db.closed = true
	db.mu.Lock()
	clean := db.mu.fenced == nil && len(db.mu.queue) == 0 && !db.pinned
	m := marker{Format: 1, UUID: fmt.Sprintf("%x", db.opts.Keys.UUID), Applied: db.mu.appliedSeq, Epoch: db.epoch.Load(), Shipped: copyMap(db.mu.shipped)}
	pending := len(db.mu.queue)
	db.mu.Unlock()
	db.releaseSnapshots(db.pdb)
	err := db.pdb.Close()
	db.closeMu.Unlock()
	db.commitMu.Unlock()
	if err != nil {
		clean = false
	}
	if pending > 0 {
		db.opts.Logger.Warn("lsm: closing with batches not in any journal; they are lost", "batches", pending)
	}
	if clean {
		if werr := writeMarker(db.opts.Dir, m); werr != nil {
			db.opts.Logger.Warn("lsm: cannot write clean-shutdown marker; next open recovers from the store", "err", werr)
		}
	}
	if !db.ro.Load() && !db.isFenced() {
		if lerr := db.renewLease(true); lerr != nil {
			db.opts.Logger.Warn("lsm: cannot release writer.lease; the next writer waits for its expiry", "err", lerr)
		}
	}
	return err
}

// loopWait is the heartbeat's and the publisher's w.Wait(d): it returns
// when d has passed on the DB's clock or w was notified, and reports
// false, when the loop must return, once the DB is closing. The loops
// stop on bgCtx, which close cancels first, rather than on w's own
// context alone: after a Pebble failure close tells them to stop but does
// not wait for them (waitLoops), as a loop may be stuck in Pebble.
func (db *DB) loopWait(w *worker.Worker, d time.Duration) bool {
	select {
	case <-db.bgCtx.Done():
		return false
	case <-w.Context().Done():
		return false
	case <-w.Woken():
	case <-w.After(d):
	}
	return true
}

// waitLoops waits for the heartbeat and the publisher to return; bgCtx
// is cancelled already.
func (db *DB) waitLoops() {
	for _, w := range []*worker.Worker{db.heartbeat, db.publisher} {
		if w != nil {
			w.Close()
		}
	}
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (db *DB) tmpDir() string { return filepath.Join(db.opts.Dir, "tmp") }
