package reclaim

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
)

// Defaults for Options.
const (
	DefaultFlushInterval        = time.Second
	DefaultMinDeadPercent       = 10
	DefaultMaxConcurrentRepacks = 4
	DefaultCoolTime             = 30 * time.Second
)

// Fixed numbers of DESIGN section 7 (not configurable).
const (
	// RetryDelay is when a failed cycle, or one blocked by a persistent
	// checkpoint, runs again.
	RetryDelay = 60 * time.Second
	// SmallSegment: a sealed segment below this triggers a cycle, and a
	// segment below it is a repack candidate.
	SmallSegment = 1 << 20
	// MinSelection: a repack selection frees at least this much, or
	// combines several sources holding at least this much live data.
	MinSelection = 1 << 20
	// JobBudget is the nominal live-byte budget of one repack job. A job
	// holds its live frames and its output in memory at once, so this and
	// RepackMemory bound what repack adds to the writer's memory.
	JobBudget = 32 << 20
	// RepackMemory bounds the live bytes of the repack jobs running at
	// once (a job larger than it runs alone).
	RepackMemory = 64 << 20
	// MaxOutput bounds the encoded size of a repack output.
	MaxOutput = 1 << 30
	// FetchParallel is how many coalesced frame runs one job fetches at once.
	FetchParallel = 20
	// MetaParallel bounds metadata lookups and repoint transactions in
	// flight across all jobs.
	MetaParallel = 20
	// DeleteParallel bounds dead segments verified and deleted at once.
	DeleteParallel = 20
	// SweepInterval is the period of the orphan sweep.
	SweepInterval = 24 * time.Hour
	// SweepRetryMax caps the back-off after a failed orphan sweep (which
	// starts at RetryDelay and doubles).
	SweepRetryMax = time.Hour
	// MaxRunBytes caps one coalesced ranged GET of a repack.
	MaxRunBytes = 16 << 20
	// RepointChunk is the most moves in one repoint transaction.
	RepointChunk = 1000
	// HotDeadPercent: a segment more than this share dead (or more than
	// MinDeadPercent, if that is higher) is repacked even while it is
	// still losing live bytes: copying it costs a ninth of what it frees.
	HotDeadPercent = 90
)

// Options configure a Reclaimer. Zero values take the documented defaults.
type Options struct {
	// Host is the filesystem engine (required).
	Host Host
	// Store is the filesystem's object store (required). The Reclaimer
	// wraps it in its own objstore.Counting to report its requests.
	Store objstore.Store
	// Keys are the filesystem keys (required).
	Keys *keys.Keys
	// Checkpoints lists the checkpoint records (default: checkpoint.List
	// on Store, counted with the cycle's requests).
	Checkpoints CheckpointLister
	// FlushInterval coalesces triggers: cycles start at most once per
	// interval ([metadata] flush_interval, default 1 s).
	FlushInterval time.Duration
	// MinDeadPercent: a segment with more than this share dead is a repack
	// candidate ([reclaim] min_dead_percent, default 10, 1..99).
	MinDeadPercent int
	// CoolTime: a segment between MinDeadPercent and HotDeadPercent dead
	// is repacked once it lost less than 1% of its frames over this long
	// (default 30 s; negative: at once, as before the cooling rule).
	CoolTime time.Duration
	// MaxConcurrentRepacks bounds repack jobs running at once
	// ([reclaim] max_concurrent_repacks, default 4, 1..64).
	MaxConcurrentRepacks int
	// Clock injects time (default clock.Real).
	Clock clock.Clock
	// Logger receives the per-cycle summary and problems (default
	// slog.Default()).
	Logger *slog.Logger
	// CleanerStats receives the tombstone cleaner's figures (may be nil).
	CleanerStats *CleanerStats
	// CleanerDelay (test builds only) makes the tombstone cleaner wait
	// this long after it is woken, so that tests can watch tombstones
	// pending. 0 in production.
	CleanerDelay time.Duration
	// DisableSweep turns the scheduled orphan sweep off (SweepNow still
	// works). For tools and tests.
	DisableSweep bool
}

// EnsureDefaults fills in zero fields.
func (o *Options) EnsureDefaults() {
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.MinDeadPercent == 0 {
		o.MinDeadPercent = DefaultMinDeadPercent
	}
	if o.MaxConcurrentRepacks == 0 {
		o.MaxConcurrentRepacks = DefaultMaxConcurrentRepacks
	}
	if o.CoolTime == 0 {
		o.CoolTime = DefaultCoolTime
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports missing or out-of-range options.
func (o *Options) Validate() error {
	switch {
	case o.Host == nil:
		return errors.New("reclaim: Options.Host is required")
	case o.Store == nil:
		return errors.New("reclaim: Options.Store is required")
	case o.Keys == nil || o.Keys.Data == nil:
		return errors.New("reclaim: Options.Keys is required")
	case o.MinDeadPercent < 1 || o.MinDeadPercent > 99:
		return fmt.Errorf("reclaim: min_dead_percent %d is outside 1..99", o.MinDeadPercent)
	case o.MaxConcurrentRepacks < 1 || o.MaxConcurrentRepacks > 64:
		return fmt.Errorf("reclaim: max_concurrent_repacks %d is outside 1..64", o.MaxConcurrentRepacks)
	case o.FlushInterval <= 0:
		return fmt.Errorf("reclaim: flush interval %s is not positive", o.FlushInterval)
	}
	return nil
}
