package lsm

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A failed local metadata store. Pebble cannot go on after an I/O error
// on its directory (the cache disk returning EIO, or its filesystem gone
// read-only): a failed write-ahead log write panics inside the commit, a
// failed MANIFEST write calls Fatalf, and what Pebble holds may no longer
// match what it wrote. Nothing of it is the only copy of anything durable
// (journals and manifests in the store are), so the writer stops using it:
// the first such error marks the DB failed (ErrLocalFailed), logs one
// clear line; from then on every use of Pebble
// fails with that error without touching Pebble (whose locks a panic may
// have left held), no journal is written, so no barrier (no fsync)
// succeeds, no manifest is published, and Close neither closes Pebble nor
// writes the clean-shutdown marker. A restart with a healthy cache
// directory recovers everything durable from the store.

// Pebble panics when it cannot close or create a write-ahead log while it
// rotates it (a memtable flush), and there that panic passes a deferred
// unlock of a mutex Pebble had already unlocked: the Go runtime ends the
// process, and no recover can stop it. So before Pebble rotates its log
// the DB makes sure the directory can be written (probeLocal), and does
// the rotation itself: Publish flushes after a probe, and Commit starts a
// flush after a probe every flushAhead bytes of batches, a fraction of
// what fills a memtable, so Pebble never rotates on its own in a commit.
// (A disk that fails between the probe and the rotation still ends the
// process; everything acknowledged is in the store all the same.)

// flushAhead is the batch bytes after which Commit flushes the memtable:
// an eighth of it, as a memtable holds its entries with up to four times
// their size in a batch (skiplist nodes, small keys).
const flushAhead = memTableSize / 8

// probeName is the file probeLocal writes.
const probeName = "PROBE"

// probeLocal writes and syncs a small file in Dir. An I/O error fails the
// DB; running out of room only returns the error.
func (db *DB) probeLocal() error {
	if err := db.Failed(); err != nil {
		return err
	}
	err := func() error {
		// Through Pebble's own filesystem layer (what tests may wrap).
		f, err := db.vfs.Create(filepath.Join(db.opts.Dir, probeName), vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		_, err = f.Write(make([]byte, 4096))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}()
	if isLocalFailure(err) {
		return db.failLocal(fmt.Errorf("probe: %w", err))
	}
	if err != nil {
		return fmt.Errorf("lsm: probe of %s: %w", db.opts.Dir, err)
	}
	return nil
}

// flushIfDue starts a memtable flush once flushAhead bytes were committed
// since the last one (commitMu held).
func (db *DB) flushIfDue(n int) {
	db.sinceFlush += n
	if db.sinceFlush < flushAhead {
		return
	}
	db.sinceFlush = 0
	if db.probeLocal() != nil {
		return
	}
	_ = db.withPebble(func(p *pebble.DB) error {
		_, err := p.AsyncFlush()
		return err
	})
}

// ErrLocalFailed means the local metadata store failed with an I/O error.
var ErrLocalFailed = errors.New("lsm: the local metadata store failed")

type failure struct {
	mu  sync.Mutex
	err error
}

// Failed returns the failure, or nil while the local store works.
func (db *DB) Failed() error {
	db.fail.mu.Lock()
	defer db.fail.mu.Unlock()
	return db.fail.err
}

// failLocal marks the DB failed (the first cause wins) and returns the
// failure.
func (db *DB) failLocal(cause error) error {
	db.fail.mu.Lock()
	first := db.fail.err == nil
	if first {
		db.fail.err = fmt.Errorf("%w (%s): %v", ErrLocalFailed, db.pebbleDir, cause)
	}
	err := db.fail.err
	db.fail.mu.Unlock()
	if first {
		db.opts.Logger.Error("lsm: the local metadata store failed; this writer acknowledges nothing more (every operation fails with EIO): stop it and start it with a healthy cache directory; everything fsynced is in the store",
			"dir", db.pebbleDir, "err", cause)
	}
	return err
}

// isLocalFailure reports whether a Pebble error means its directory (or
// what Pebble wrote there) can no longer be trusted: an I/O error, a
// read-only filesystem, corruption. Running out of space is not one
// (reserve.go), nor is a closed DB or a missing key.
func isLocalFailure(err error) bool {
	if err == nil || errors.Is(err, pebble.ErrNotFound) || errors.Is(err, ErrClosed) {
		return false
	}
	if pebble.IsCorruptionError(err) {
		return true
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno == syscall.EIO || errno == syscall.EROFS || errno == syscall.EUCLEAN
	}
	return false
}

// backgroundError is Pebble's EventListener.BackgroundError: a failed
// flush or compaction. Pebble retries those; an I/O error fails the DB.
func (db *DB) backgroundError(err error) {
	if isLocalFailure(err) {
		db.failLocal(fmt.Errorf("background: %w", err))
		return
	}
	db.opts.Logger.Error("pebble: background error", "err", err)
}

// fatal is Pebble's Logger.Fatalf: Pebble cannot go on. The DB fails.
// Pebble expects Fatalf not to return: inside Commit it panics (Commit
// recovers, fails the operation and the DB is never used again); in
// Pebble's own goroutines (a flush, a compaction) it parks that goroutine
// for good rather than crash the process, which then stops in order.
func (db *DB) fatal(msg string) {
	db.failLocal(errors.New("pebble: " + msg))
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "ebbfs.dev/ebbfs/lsm.(*DB).withPebble") {
			panic("pebble: " + msg)
		}
		if !more {
			break
		}
	}
	select {}
}
