package reclaim

import (
	"context"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// Host is what reclamation needs from the filesystem engine; *fs.Engine
// provides it (reclaim does not import fs). Every change reclamation makes
// to pointers and counters goes through Host, which holds the engine's
// pointer lock.
type Host interface {
	// Seal uploads and commits the dirty data (no journal write).
	Seal(ctx context.Context) error
	// Barrier makes everything committed so far durable.
	Barrier(ctx context.Context) error
	// Fenced reports why the engine may no longer write (its lease was
	// lost), or nil.
	Fenced() error
	// MetaScan calls f for each metadata record in [lower, upper), in key
	// order and one consistent view; the slices are valid during the call.
	MetaScan(lower, upper []byte, f func(k, v []byte) error) error
	// MetaGet returns a copy of one metadata record's value.
	MetaGet(key []byte) ([]byte, bool, error)
	// MetaGetAll calls f(i, value) for each of keys that exists, reading
	// all of them in one consistent view.
	MetaGetAll(keys [][]byte, f func(i int, v []byte) error) error
	// MetaPut sets one of reclamation's own records (LastSweepKey,
	// DeadlinesKey) to value, or deletes it if value is nil.
	MetaPut(key, value []byte) error
	// ForgetSegments tells the engine's caches that these segments'
	// objects are gone.
	ForgetSegments(ids ...uint64)
	// Relocated tells the engine's caches that the frames of moves now
	// live in the repack output obj.
	Relocated(obj []byte, moves []segment.Move)
	// BarrierCutoff runs the barrier and, under the same publication
	// barrier, returns the cycle's cutoff: every segment below it is
	// sealed, fully committed and durable; segments still in flight are
	// at or above it.
	BarrierCutoff(ctx context.Context) (uint64, error)
	// SweepHorizon is the id below which no segment of this process is
	// still being uploaded or committed.
	SweepHorizon() uint64
	// NewSegmentID allocates an id for a repack output; it stays in flight
	// (above the sweep horizon) until SegmentDone.
	NewSegmentID() uint64
	// SegmentDone ends the in-flight state of an id from NewSegmentID.
	SegmentDone(id uint64)
	// Repoint moves each extent whose pointer still equals Old to New, in
	// one transaction that credits outSeg (frameBytes, objSize) and debits
	// the sources. It returns how many pointers moved.
	Repoint(outSeg uint64, frameBytes, objSize int64, moves []segment.Move) (int, error)
	// DropCounter removes the counter of a segment whose object is gone.
	DropCounter(seg uint64) error
	// AdjustCounter adds a delta to a segment's counter.
	AdjustCounter(seg uint64, live, total, size int64) error
	// CleanTombstones runs one tombstone cleaner transaction (a bounded
	// batch of pointers of deleted files and truncated ranges, removed
	// with their counters debited) and says what it finished: tombstones
	// whose files are now empty, pointers removed and their frame bytes.
	// With an error, the counts are what was committed before it. It
	// does nothing while the engine cannot write safely (read-only,
	// metadata reserve in use, local store failed).
	CleanTombstones(ctx context.Context) (tombs, extents int, bytes int64, err error)
}

// CheckpointLister lists the checkpoint records. It must fail if any
// record cannot be read: a cycle that cannot see every checkpoint
// reclaims nothing. The default lists the store (checkpoint.List).
type CheckpointLister interface {
	List(ctx context.Context) ([]checkpoint.Record, error)
}

// CheckpointListerFunc adapts a function to CheckpointLister.
type CheckpointListerFunc func(ctx context.Context) ([]checkpoint.Record, error)

// List calls f.
func (f CheckpointListerFunc) List(ctx context.Context) ([]checkpoint.Record, error) { return f(ctx) }

// storeCheckpoints lists the records in the store through the
// Reclaimer's counting store.
type storeCheckpoints struct{ s objstore.Store }

func (c storeCheckpoints) List(ctx context.Context) ([]checkpoint.Record, error) {
	return checkpoint.List(ctx, c.s)
}
