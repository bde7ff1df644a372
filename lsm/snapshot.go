package lsm

import (
	"bytes"
	"errors"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// ErrSnapshotGone is returned by a Snapshot whose state was replaced (a
// replica moved to a newer manifest) or whose DB was closed.
var ErrSnapshotGone = errors.New("lsm: snapshot gone")

// Snapshot is a read-only view of the DB as it was when it was taken. A
// replica keeps one from before each journal that shrinks a file, to read
// the bytes a kernel may still ask for under the old size (fs/shrink.go).
// Its reads fail with ErrSnapshotGone once the DB swapped in a newer state
// or closed. Close releases it; it is safe for concurrent use.
type Snapshot struct {
	db  *DB
	pdb *pebble.DB // the state it was taken of
	mu  sync.RWMutex
	ps  *pebble.Snapshot // nil once closed
}

// NewSnapshot takes a snapshot of the current state.
func (db *DB) NewSnapshot() (*Snapshot, error) {
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.closed {
		return nil, ErrClosed
	}
	s := &Snapshot{db: db, pdb: db.pdb, ps: db.pdb.NewSnapshot()}
	db.snapMu.Lock()
	if db.snaps == nil {
		db.snaps = map[*Snapshot]bool{}
	}
	db.snaps[s] = true
	db.snapMu.Unlock()
	return s, nil
}

// with runs f on the Pebble snapshot while it is still valid.
func (s *Snapshot) with(f func(ps *pebble.Snapshot) error) error {
	s.db.closeMu.RLock()
	defer s.db.closeMu.RUnlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db.closed || s.db.pdb != s.pdb || s.ps == nil {
		return ErrSnapshotGone
	}
	return f(s.ps)
}

// Get returns a copy of key's value in the snapshot.
func (s *Snapshot) Get(key []byte) (val []byte, ok bool, err error) {
	err = s.with(func(ps *pebble.Snapshot) error {
		v, c, err := ps.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		val, ok = bytes.Clone(v), true
		return c.Close()
	})
	return val, ok, err
}

// Scan is DB.Scan on the snapshot.
func (s *Snapshot) Scan(lower, upper []byte, f func(k, v []byte) error) error {
	return s.with(func(ps *pebble.Snapshot) error {
		return scanWith(ps.NewIter, lower, upper, f)
	})
}

// Close releases the snapshot. Closing twice is harmless.
func (s *Snapshot) Close() {
	s.mu.Lock()
	ps := s.ps
	s.ps = nil
	s.mu.Unlock()
	s.db.snapMu.Lock()
	delete(s.db.snaps, s)
	s.db.snapMu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
}

// releaseSnapshots closes every open snapshot of pdb, ahead of closing
// it. Caller holds closeMu exclusively, so no snapshot read is running.
func (db *DB) releaseSnapshots(pdb *pebble.DB) {
	db.snapMu.Lock()
	var open []*Snapshot
	for s := range db.snaps {
		if s.pdb == pdb {
			open = append(open, s)
		}
	}
	db.snapMu.Unlock()
	for _, s := range open {
		s.Close()
	}
}
