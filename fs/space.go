package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// Space accounting: statfs and the optional quota ([filesystem] max_size,
// Options.MaxSize).
//
// The space a filesystem uses is its live data: the live-byte counters of
// all segments (frame bytes, after compression, as stored), plus the dirty
// data in memory (counted by whole extents) that the next barrier stores,
// plus what fallocate reserved and no data fills yet (whole extents,
// reserved.go). Space still held by dead bytes that reclamation has not
// freed yet is not counted: a delete gives its space back at once, as on
// a local filesystem (a write the quota refuses first runs the tombstone
// cleaner, whose debits of a large deleted file's pointers may not have
// run yet: cleanForSpace).
//
// With a quota, a write or an allocation that would take the used space
// past it fails with ErrNoSpace (ENOSPC) before it changes anything; what
// was accepted before stays accepted and is flushed as usual. A write into
// extents fallocate reserved needs no more room: they are counted already.
// Because ebbfs writes copy-on-write, an overwrite near the limit can fail
// too: the old bytes are freed only once the new ones are committed.
//
// Without a quota, writes are not limited (an object store has no fixed
// size), but fallocate still promises only what the capacity statfs
// reports, nominalCapacity: a reservation that would take the used space
// past it fails with ErrNoSpace, so a program that fallocates what df
// says is free gets it, and one that asks for more is told there is none.

// nominalCapacity is the capacity statfs reports without a quota, and the
// bound of fallocate reservations then: an object store has no fixed size.
const nominalCapacity = 1 << 50 // 1 PiB

// capacity is what statfs reports as the filesystem's size.
func (e *Engine) capacity() int64 {
	if e.opts.MaxSize > 0 {
		return e.opts.MaxSize
	}
	return nominalCapacity
}

// statBlockSize is statfs's block size.
const statBlockSize = 4096

// spaceRefresh bounds how stale the cached live-byte total may be.
const spaceRefresh = time.Second

// spaceCache caches the sum of the live-byte counters (a scan of every
// counter) for the quota check of each write.
type spaceCache struct {
	mu      sync.Mutex
	at      time.Time
	used    int64 // used bytes at `at` (usedExact)
	written int64 // bytes admitted since `at`

	cacheLow atomic.Bool // the cache directory's filesystem is below its floor (cachedisk.go)
}

// usedExact returns the used space now: live bytes (a counter scan),
// dirty data and reservations.
func (e *Engine) usedExact() (int64, error) {
	live, err := e.LiveBytes()
	if err != nil {
		return 0, err
	}
	res, err := e.reservedTotal()
	if err != nil {
		return 0, err
	}
	return live + e.dirtyBytes.Load() + res, nil
}

// reserveSpace admits n more bytes of data under the quota, or fails with
// ErrNoSpace; it also fails so when the cache directory's filesystem is
// full (cacheDiskRoom). Without a quota it checks nothing else.
func (e *Engine) reserveSpace(n int64) error {
	if n > 0 {
		if err := e.cacheDiskRoom(); err != nil {
			return err
		}
	}
	if e.opts.MaxSize <= 0 || n <= 0 {
		return nil
	}
	return e.admit(n, e.opts.MaxSize)
}

// reserveAlloc admits n more bytes of fallocate reservations: against the
// quota if there is one, against nominalCapacity otherwise.
func (e *Engine) reserveAlloc(n int64) error {
	if n <= 0 {
		return nil
	}
	if err := e.cacheDiskRoom(); err != nil {
		return err
	}
	return e.admit(n, e.capacity())
}

// admit fails with ErrNoSpace if n more bytes would take the used space
// past limit. Far from the limit it decides from a cached total and an
// upper bound on what changed since; near it, from an exact scan.
func (e *Engine) admit(n, limit int64) error {
	c := &e.space
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < spaceRefresh {
		// Every byte used now was used at the last scan, or was admitted
		// since: an upper bound.
		if c.used+c.written+n <= limit-limit/64 {
			c.written += n
			return nil
		}
	}
	used, err := e.usedExact()
	if err != nil {
		return err
	}
	c.at, c.used, c.written = time.Now(), used, 0
	if used+n > limit {
		return ErrNoSpace
	}
	c.written = n
	return nil
}

// cleanForSpace runs the tombstone cleaner here and now, for a write that
// the quota refused: the bytes of a file deleted a moment ago count as
// live until the cleaner removes its pointers, and a delete is to give its
// space back at once. It reports whether it removed anything (the write
// may then fit). The caller holds no lock.
func (e *Engine) cleanForSpace(ctx context.Context) bool {
	if e.opts.MaxSize <= 0 || e.cacheDiskRoom() != nil {
		return false
	}
	removed := false
	for range 1000 { // bounded: each round removes up to CleanerBatch pointers
		_, n, _, err := e.CleanTombstones(ctx)
		if err != nil || n == 0 {
			break
		}
		removed = true
	}
	return removed
}

// StatFS reports the capacity: [filesystem] max_size if set, else a
// nominal 1 PiB; free is that minus the used space (see above).
func (e *Engine) StatFS(ctx context.Context) (StatFS, error) {
	capacity := e.capacity()
	e.ns.Lock()
	next := e.ns.nextIno
	e.ns.Unlock()
	used, err := e.usedExact()
	if err != nil {
		return StatFS{}, err
	}
	total := uint64(capacity) / statBlockSize
	usedBlocks := (uint64(used) + statBlockSize - 1) / statBlockSize
	return StatFS{BlockSize: statBlockSize, Blocks: total, BlocksFree: total - min(usedBlocks, total),
		Files: 1 << 40, FilesFree: 1<<40 - next, NameLen: MaxNameLen}, nil
}

// LiveBytes sums the live-byte counters of all segments.
func (e *Engine) LiveBytes() (int64, error) {
	var sum int64
	lo, hi := schema.PrefixRange(schema.PCounter)
	err := e.scan(lo, hi, func(_, v []byte) error {
		live, _, _, err := decodeCounter(v)
		if err == nil {
			sum += live
		}
		return nil
	})
	return sum, err
}
