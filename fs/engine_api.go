package fs

import (
	"context"
	"log/slog"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
)

// Options configure an Engine.
type Options struct {
	Store            objstore.Store
	Keys             *keys.Keys
	CacheDir         string        // local Pebble and disk cache live here
	MemoryCacheBytes int64         // plaintext frame cache (default 256 MiB)
	DiskCacheBytes   int64         // encrypted frame cache on disk (default 10 GiB; always off for a local-directory store; < 0 disables)
	FlushInterval    time.Duration // periodic barrier (default 1s)
	SegmentTarget    int64         // seal the open segment at this size (default 32 MiB)
	DirtyLimit       int64         // writes block above this many dirty bytes (default 128 MiB)
	MaxSize          int64         // capacity ([filesystem] max_size); writes past it fail with ErrNoSpace. 0: none
	ReadOnly         bool
	// PinManifest, if not 0, serves exactly the state of that published
	// manifest (a checkpoint), read-only, without following the writer.
	PinManifest uint64
	Holder      string // lease holder description
	Logger      *slog.Logger
	Clock       clock.Clock
	Events      Events // reclamation hooks; may be nil
	Stats       *Stats // counters of tombstones written and barriers; may be nil
	// JournalRetention is how long the writer keeps journal objects a
	// manifest covers, and what a replica relies on (lsm.Options; 0: the
	// default, 5 minutes). Writer and replicas must agree; only the test
	// build lets it be changed.
	JournalRetention time.Duration
	// ManifestInterval is the longest time between metadata manifests
	// (lsm.Options; 0: the default, 10 minutes). Only the test build lets
	// it be changed.
	ManifestInterval time.Duration
	// TakeOver takes the writer lease at once from a holder that may still
	// run (lsm.Options.TakeOver).
	TakeOver bool
	// Standby opens a read-only replica that Promote may turn into the
	// writer (standby.go); StandbyID is its entry in the lease's standbys.
	Standby   bool
	StandbyID string
	// DeferBackground leaves the flusher to a later StartBackground (ebbfs run starts them once the mount is up).
	DeferBackground bool

	tuneLSM func(*lsm.Options) // tests: adjust the metadata store's options
	// patchWrites stores writes into part of an extent as patches
	// (patch.go, docs/PATCHES.md): when set, or when patchesByDefault,
	// unless wholeWrites, and only on a filesystem whose descriptor
	// format allows patches (keys.Keys.Patches). patchesWanted is that
	// choice; patchWrites is it on a writer (a standby takes it up when
	// promoted).
	patchWrites, patchesWanted bool
	// wholeWrites turns patches off (tests and benchmarks comparing with
	// whole-extent writes).
	wholeWrites bool
	// patchLimit, mergePatches and mergeEighths are the patch bounds
	// (patch.go, merge.go); 0: the defaults. Benchmarks sweep them.
	patchLimit, mergePatches, mergeEighths int
}

// Events lets the reclamation stages hear about engine activity without fs
// importing reclaim. Calls must not block.
type Events interface {
	// DeadBytes is called after a committed batch debited segment counters.
	DeadBytes()
	// Sealed is called after a segment was uploaded and committed.
	Sealed(segID uint64, size int64)
	// Tombstoned is called after an unlink wrote a tombstone (it wakes
	// the tombstone cleaner).
	Tombstoned()
}

var _ = context.Background
