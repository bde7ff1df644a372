package lsm

import (
	"errors"
	"fmt"

	"ebbfs.dev/ebbfs/internal/diskspace"
)

// The local Pebble directory needs room on its filesystem: a memtable
// flush writes a table, and rotating the write-ahead log (every
// publication flushes, so rotates it) must write the old log's tail,
// which Pebble cannot survive failing. Below LocalFloor the DB publishes
// no manifest (the publication is retried later) and the engine accepts
// no new data (fs/cachedisk.go).

// LocalFloor is the free space kept for the local metadata on a
// filesystem of total bytes: a fiftieth of it, between 8 MiB and
// 256 MiB.
func LocalFloor(total int64) int64 {
	return min(max(total/50, 8<<20), 256<<20)
}

// ErrLocalFull means the filesystem holding the local metadata is below
// LocalFloor.
var ErrLocalFull = errors.New("lsm: the filesystem of the local metadata directory is full")

// StatfsDir reports the size of dir's filesystem and the bytes free for
// use. Tests replace it to fake a full disk.
var StatfsDir = diskspace.Statfs

// localRoom fails with ErrLocalFull when Dir's filesystem is below
// LocalFloor. A statfs failure passes (the write reports its own error).
func (db *DB) localRoom() error {
	if db.checkReserve() {
		return fmt.Errorf("%w: %d bytes free in %s", ErrReserveReleased, db.res.free.Load(), db.opts.Dir)
	}
	total, avail, err := StatfsDir(db.opts.Dir)
	if err != nil {
		return nil
	}
	if floor := LocalFloor(total); avail < floor {
		return fmt.Errorf("%w: %d bytes free in %s, a publication needs %d", ErrLocalFull, avail, db.opts.Dir, floor)
	}
	return nil
}
