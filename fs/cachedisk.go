package fs

import (
	"ebbfs.dev/ebbfs/internal/diskspace"
	"ebbfs.dev/ebbfs/lsm"
)

// The cache directory's filesystem holds the local metadata (Pebble) and
// the disk cache of frames. Pebble cannot lose a write it accepted: a
// failed write-ahead log or manifest write stops the process. So before
// it accepts new data (write, fallocate), a new name (create, mkdir,
// mknod, symlink) or a new extended attribute, the engine makes sure
// that filesystem has at least cacheDiskFloor free, first by asking the
// disk cache to give space back, and otherwise fails the operation with
// ErrNoSpace (ENOSPC) before it changes anything. What was accepted
// before is still flushed and made durable: the floor is the room for
// that. (The metadata store publishes no manifest below the same floor.)
// Reads, deletes, renames and fsync go on; writes work again as soon as
// there is room, without a remount.
//
// When something takes all the free space, down to nothing, the metadata
// store releases its emergency reserve (lsm/reserve.go) so that Pebble can
// finish the writes it started, and from then on every operation that
// adds metadata (writable: writes, creates, renames, deletes, setattr,
// xattrs, reclamation) fails with ErrNoSpace until there is room for the
// reserve again. Only the barrier still commits: the extents of data
// accepted before, so that fsync keeps its promise.

// cacheDiskFloor is the free space kept for the metadata on a cache
// filesystem of total bytes (lsm.LocalFloor: a fiftieth of it, between
// 8 MiB and 256 MiB; less than the disk cache's own reserve, so the cache
// gives way first).
func cacheDiskFloor(total int64) int64 { return lsm.LocalFloor(total) }

// statfsCacheDir reports the size of the cache directory's filesystem and
// the bytes free for use; tests replace it.
var statfsCacheDir = diskspace.Statfs

// cacheDiskRoom fails with ErrNoSpace when the cache directory's
// filesystem stays below its floor after the disk cache gave back what it
// could. A statfs failure admits the operation (the metadata write will
// report its own error).
func (e *Engine) cacheDiskRoom() error {
	total, avail, err := statfsCacheDir(e.opts.CacheDir)
	if err != nil {
		return nil
	}
	floor := cacheDiskFloor(total)
	if avail < floor && e.rd != nil {
		// A filesystem may count freed blocks as free only at its next
		// journal commit: trust what the eviction freed.
		avail += e.rd.ShrinkDiskCache(floor - avail)
	}
	if avail < floor {
		if !e.space.cacheLow.Swap(true) {
			e.log.Warn("fs: the cache directory's filesystem is full; new writes fail with ENOSPC until it has room (reads, deletes and fsync go on)",
				"dir", e.opts.CacheDir, "free", avail, "needed", floor)
		}
		return ErrNoSpace
	}
	if e.space.cacheLow.Swap(false) {
		e.log.Info("fs: the cache directory's filesystem has room again; writes are accepted", "dir", e.opts.CacheDir, "free", avail)
	}
	return nil
}

// An I/O error on the cache disk: a disk-cache frame that cannot be
// written or read only costs a store request (segread/diskcache.go). The
// metadata store cannot go on after one (lsm/failure.go): the engine then
// refuses every operation that changes anything with that error (EIO to
// applications), metadata reads fail the same way, no barrier succeeds
// (fsync fails with EIO: nothing more is acknowledged), and the
// background flusher and cleaner stand still. Everything acknowledged
// before is in the store; a restart with a healthy cache directory
// recovers it.

// LocalFailure returns the metadata store's failure, or nil.
func (e *Engine) LocalFailure() error { return e.db.Failed() }

// metadataRoom fails with ErrNoSpace while the metadata store's
// emergency reserve is released.
func (e *Engine) metadataRoom() error {
	if e.db.ReserveReleased() {
		return ErrNoSpace
	}
	return nil
}

// CacheDirReserveReleased reports whether the metadata store's emergency
// reserve is in use: everything that adds metadata fails with ENOSPC.
func (e *Engine) CacheDirReserveReleased() bool {
	return !e.ro.Load() && e.db.ReserveReleased()
}

// CacheDirSpace reports the bytes free on the cache directory's
// filesystem and the floor below which new writes fail with ENOSPC.
func (e *Engine) CacheDirSpace() (free, floor int64, err error) {
	total, avail, err := statfsCacheDir(e.opts.CacheDir)
	if err != nil {
		return 0, 0, err
	}
	return avail, cacheDiskFloor(total), nil
}
