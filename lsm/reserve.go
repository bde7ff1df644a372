package lsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"ebbfs.dev/ebbfs/internal/diskspace"

	"golang.org/x/sys/unix"
)

// The emergency reserve. LocalFloor keeps new data and names out of a
// nearly full filesystem, but what the writer still accepts there
// (deletes, renames, attribute changes, the barrier committing extents of
// data accepted earlier) goes to Pebble's write-ahead log and memtable;
// when the memtable fills, Pebble rotates the log and flushes the
// memtable into a table. Pebble cannot survive failing some of those
// writes: a failed log close or create panics, a failed MANIFEST write or
// commit calls Fatalf. When something outside ebbfs takes all the free
// space, that is where the writer would die.
//
// So a writer keeps ReserveSize bytes allocated in Dir/RESERVE. When the
// free space drops below reserveCritical (after the MakeRoom hook, the
// disk cache, gave back what it could) the file is deleted, which gives
// Pebble room to finish a log rotation and a memtable flush, and from then
// on the writer refuses everything that adds metadata (ReserveReleased,
// MetadataRoom) until there is room for the reserve again above the floor,
// when the file is created anew. Publication waits meanwhile (localRoom).

// memTableSize is Pebble's memtable size (Pebble's default, set
// explicitly because the reserve is sized from it).
const memTableSize = 4 << 20

// ReserveSize is the reserve: a memtable flush writes a table of at most
// a memtable, a new log preallocates 1.1 memtables, and the MANIFEST and
// log tails need a little more: three memtables (12 MiB).
const ReserveSize = 3 * memTableSize

// reserveCritical: with less than this free (a memtable), the reserve is
// released. It is below LocalFloor (at least 8 MiB), so new data and
// names are refused before the reserve is needed.
const reserveCritical = memTableSize

// reserveName is the reserve's file in Dir.
const reserveName = "RESERVE"

// ErrReserveReleased means the emergency reserve is released: the
// filesystem of the local metadata had no room left.
var ErrReserveReleased = fmt.Errorf("%w: its emergency reserve is in use", ErrLocalFull)

type reserve struct {
	mu       sync.Mutex // one check at a time
	path     string
	own      *diskspace.Watcher // the watcher started for want of Options.Space
	unwatch  func()             // stops the periodic check
	released atomic.Bool        // deleted for lack of room, not re-created yet
	created  bool               // made once (under mu): a later making is a return
	free     atomic.Int64
}

// reservePath is the reserve's file.
func (db *DB) reservePath() string { return filepath.Join(db.opts.Dir, reserveName) }

// initReserve creates the reserve at open (writers only), or marks it
// released when there is no room for it.
func (db *DB) initReserve() {
	if db.ro.Load() {
		return
	}
	db.res.path = db.reservePath()
	if fi, err := os.Stat(db.res.path); err == nil && fi.Size() == ReserveSize {
		db.res.mu.Lock()
		db.res.created = true
		db.res.mu.Unlock()
		return
	}
	db.res.released.Store(true)
	db.checkReserve()
	if db.res.released.Load() {
		db.opts.Logger.Warn("lsm: no room for the emergency reserve of the metadata store; everything that adds metadata fails with ENOSPC until there is",
			"dir", db.opts.Dir, "reserve", ReserveSize)
	}
}

// checkReserve looks at the free space and releases or re-creates the
// reserve. It reports whether the reserve is released.
func (db *DB) checkReserve() bool {
	if db.ro.Load() || db.res.path == "" {
		return false
	}
	db.res.mu.Lock()
	defer db.res.mu.Unlock()
	total, avail, err := StatfsDir(db.opts.Dir)
	if err != nil {
		return db.res.released.Load()
	}
	db.res.free.Store(avail)
	if !db.res.released.Load() {
		if avail >= reserveCritical {
			return false
		}
		if db.opts.MakeRoom != nil {
			// Trust what the hook freed: a filesystem may count freed
			// blocks as free only at its next journal commit.
			avail += db.opts.MakeRoom(LocalFloor(total) - avail)
		}
		if avail >= reserveCritical {
			return false
		}
		// Blocks freed since the filesystem's last journal commit may
		// not count as free yet: commit it and look again before
		// taking the reserve for a shortage that is not there.
		db.syncfs()
		if _, a, err := StatfsDir(db.opts.Dir); err == nil && a >= reserveCritical {
			db.res.free.Store(a)
			return false
		}
		db.releaseReserve(avail)
		return true
	}
	if avail < LocalFloor(total)+ReserveSize {
		return true
	}
	if err := db.makeReserve(); err != nil {
		db.opts.Logger.Warn("lsm: cannot re-create the emergency reserve of the metadata store", "dir", db.opts.Dir, "err", err)
		return true
	}
	// Logged before it takes effect, so that the log says it first.
	if db.res.created {
		db.opts.Logger.Info("lsm: the emergency reserve of the metadata store is back; metadata changes are accepted again",
			"dir", db.opts.Dir, "free", avail-ReserveSize)
	}
	db.res.released.Store(false)
	db.res.created = true
	return false
}

// releaseReserve deletes the reserve and makes the filesystem count its
// blocks as free at once (syncfs commits the filesystem's journal).
func (db *DB) releaseReserve(avail int64) {
	db.res.released.Store(true)
	err := os.Remove(db.res.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		// Give what can be given: a truncate frees the blocks too.
		err = os.Truncate(db.res.path, 0)
	}
	db.syncfs()
	db.opts.Logger.Error("lsm: the cache directory's filesystem has no room left: released the emergency reserve of the metadata store so that it can finish its writes; everything that adds metadata (creates, writes, renames, deletes, attribute changes) fails with ENOSPC until there is room again (fsync of data accepted before goes on)",
		"dir", db.opts.Dir, "free", avail, "reserve", ReserveSize, "err", err)
}

// syncfs commits the journal of Dir's filesystem, so that blocks freed
// before count as free.
func (db *DB) syncfs() {
	if d, err := os.Open(db.opts.Dir); err == nil {
		_ = unix.Syncfs(int(d.Fd()))
		d.Close()
	}
}

// makeReserve allocates ReserveSize bytes in a new file and renames it
// into place.
func (db *DB) makeReserve() error {
	tmp := db.res.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, ReserveSize)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		// No fallocate here: write the bytes.
		buf := make([]byte, 1<<20)
		err = nil
		for off := int64(0); off < ReserveSize && err == nil; off += int64(len(buf)) {
			_, err = f.WriteAt(buf, off)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, db.res.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// watchReserve has the reserve checked every diskspace.Every (on the
// injected clock) by Options.Space, or a watcher of the DB's own, so that
// it is released when the disk fills while nothing is committed.
func (db *DB) watchReserve() {
	space := db.opts.Space
	if space == nil {
		db.res.own = diskspace.Start(db.opts.Clock)
		space = db.res.own
	}
	db.res.unwatch = space.Add(func() { db.checkReserve() })
}

// Space returns the watcher of the free space on Dir's filesystem that
// the DB's reserve check runs on (Options.Space, or its own; nil for a
// read-only DB), for others that watch the same filesystem to share. The
// DB's own watcher stops when the DB closes.
func (db *DB) Space() *diskspace.Watcher {
	if db.opts.Space != nil || db.ro.Load() {
		return db.opts.Space
	}
	return db.res.own
}

// unwatchReserve stops the periodic check, waiting for one in progress.
func (db *DB) unwatchReserve() {
	if db.res.unwatch != nil {
		db.res.unwatch()
	}
	if db.res.own != nil {
		db.res.own.Close()
	}
}

// ReserveReleased reports whether the emergency reserve is released (the
// filesystem of Dir ran out of room), after a fresh look at the free
// space. While it is, callers must not commit anything that adds metadata
// except what makes earlier accepted data durable.
func (db *DB) ReserveReleased() bool { return db.checkReserve() }

// MetadataRoom fails with ErrReserveReleased while the reserve is
// released.
func (db *DB) MetadataRoom() error {
	if db.checkReserve() {
		return fmt.Errorf("%w (%d bytes free in %s; metadata changes resume once %d more are free)",
			ErrReserveReleased, db.res.free.Load(), db.opts.Dir, ReserveSize)
	}
	return nil
}
