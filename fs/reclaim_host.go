package fs

import (
	"bytes"

	"ebbfs.dev/ebbfs/segment"
)

// The methods below, with Seal, Barrier, BarrierCutoff, SweepHorizon,
// NewSegmentID, SegmentDone, Repoint, DropCounter, AdjustCounter and
// CleanTombstones, are what reclamation (package reclaim, through
// reclaim.Host) asks of the engine. They read and write the metadata
// store directly, as reclamation did when it held the store itself.

// Fenced reports why the engine may no longer write (its lease was lost),
// or nil.
func (e *Engine) Fenced() error { return e.db.Fenced() }

// MetaScan calls f for each metadata record in [lower, upper), in key
// order and in one consistent view; the slices are valid only during the
// call.
func (e *Engine) MetaScan(lower, upper []byte, f func(k, v []byte) error) error {
	return e.db.Scan(lower, upper, f)
}

// MetaGet returns a copy of one metadata record's value.
func (e *Engine) MetaGet(key []byte) ([]byte, bool, error) { return e.db.Get(key) }

// MetaGetAll calls f(i, value) for each of keys that exists, reading all
// of them in one consistent view; value is valid only during the call.
func (e *Engine) MetaGetAll(keys [][]byte, f func(i int, v []byte) error) error {
	it, err := e.db.NewIter(nil, nil)
	if err != nil {
		return err
	}
	defer it.Close()
	for i, k := range keys {
		if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
			if err := it.Error(); err != nil {
				return err
			}
			continue
		}
		if err := f(i, it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// MetaPut sets a record of reclamation's own (not a pointer or counter)
// to value, or deletes it if value is nil, in a transaction of its own.
func (e *Engine) MetaPut(key, value []byte) error {
	b := e.db.NewBatch()
	defer b.Close()
	var err error
	if value == nil {
		err = b.Delete(key)
	} else {
		err = b.Set(key, value)
	}
	if err != nil {
		return err
	}
	return e.db.Commit(b)
}

// ForgetSegments tells the engine's caches that these segments' objects
// are gone.
func (e *Engine) ForgetSegments(ids ...uint64) {
	for _, id := range ids {
		e.rd.Forget(id)
	}
}

// Relocated tells the engine's caches that the frames of moves now live in
// the repack output obj, so what was cached stays cached at its new place.
func (e *Engine) Relocated(obj []byte, moves []segment.Move) { e.rd.Relocated(obj, moves) }
