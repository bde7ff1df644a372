package reclaim

import (
	"context"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
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
	// DB is the metadata store.
	DB() *lsm.DB
	// Reader is the engine's segment reader (its caches are told to forget
	// deleted segments).
	Reader() *segread.Reader
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
