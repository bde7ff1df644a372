package fs

import (
	"time"

	"ebbfs.dev/ebbfs/lsm"
)

// Lease is the writer's lease as last renewed and its time to live; ok is
// false on a reader.
func (e *Engine) Lease() (l lsm.Lease, ttl time.Duration, ok bool) {
	return e.db.LeaseHeld()
}
