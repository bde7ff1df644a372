package lsm

import "github.com/cockroachdb/pebble/v2"

// Unjournaled reports whether a committed batch not yet in a journal
// object that the store holds (one still queued, or in a journal being
// written) may change a key match accepts. A range deletion counts
// whatever its bounds: the caller then runs a barrier, which is never
// wrong. An fsync asks it to find out whether its file has anything to
// make durable.
func (db *DB) Unjournaled(match func(key []byte) bool) bool {
	db.mu.Lock()
	q := db.mu.queue // batches are immutable; Commit only appends
	db.mu.Unlock()
	for _, repr := range q {
		r, err := batchReader(repr)
		if err != nil {
			return true
		}
		for {
			kind, ukey, _, more, err := r.Next()
			if err != nil {
				return true
			}
			if !more {
				break
			}
			switch kind {
			case pebble.InternalKeyKindRangeDelete, pebble.InternalKeyKindRangeKeySet,
				pebble.InternalKeyKindRangeKeyUnset, pebble.InternalKeyKindRangeKeyDelete:
				return true
			}
			if match(ukey) {
				return true
			}
		}
	}
	return false
}
