package fs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// A read-only replica follows the writer journal by journal (lsm/follow.go)
// and tells whoever caches what the engine serves (the kernel, through
// fs/fuse) exactly what each journal changed.

// Changes is what a followed journal changed.
type Changes struct {
	// Inodes whose attributes, content, symlink target or xattrs changed.
	Inodes []uint64
	// Entries: directory entries added, replaced or removed.
	Entries []EntryRef
	// All: the replica moved to a newer manifest; anything may have changed.
	All bool
}

// EntryRef names one directory entry.
type EntryRef struct {
	Parent uint64
	Name   string
}

// FollowStatus is where a replica stands.
type FollowStatus struct {
	AppliedSeq uint64    // newest journal applied
	Manifest   uint64    // newest manifest known
	UpToDate   time.Time // when a probe last found nothing newer (zero: never)
	LastError  string    // the last failed probe, if the latest one failed
	Jumps      int       // moves to a newer manifest
}

type follower struct {
	// run serialises Follow: the poll loop and a read that found its
	// segment gone may both call it, and two followers of one journal
	// sequence would apply a journal twice, or an older one after a newer.
	run sync.Mutex
	// view makes a journal's application and the refresh of the in-memory
	// attributes it changes one step for readers (Engine.Read holds it for
	// reading): a read must not see a truncation's missing extents under
	// the size from before it, which reads as zeroes.
	view     sync.RWMutex
	mu       sync.Mutex
	observe  func(Changes)
	upToDate time.Time
	lastOK   time.Duration // Clock.Mono of the last probe that reached the store
	lastErr  string
	jumps    int
	// shrinks keeps the bytes past recent shrinks (shrink.go);
	// pastShrink counts the reads that needed them.
	shrinks    shrinks
	pastShrink atomic.Int64
}

// SetFollowObserver registers f to hear of every change a followed
// journal makes (fs/fuse invalidates the kernel's caches with it).
func (e *Engine) SetFollowObserver(f func(Changes)) {
	e.follow.mu.Lock()
	e.follow.observe = f
	e.follow.mu.Unlock()
}

// Follow brings a read-only replica up to the newest durable state: after
// a gap longer than the store's journal retention allows (a pause, a
// partition) it first catches up, through a newer manifest if needed;
// then it applies journal objects one GET each until a probe finds none.
// It returns the number of journals applied. A probe that fails leaves
// the replica serving what it has.
func (e *Engine) Follow(ctx context.Context) (int, error) {
	if !e.ro.Load() || e.opts.PinManifest != 0 {
		return 0, errors.New("fs: Follow is for read-only replicas")
	}
	e.follow.run.Lock()
	defer e.follow.run.Unlock()
	e.follow.mu.Lock()
	stale := e.follow.lastOK == 0 || e.clk.Mono()-e.follow.lastOK > e.db.FollowGap()
	e.follow.mu.Unlock()
	if stale {
		jumped, err := e.db.CatchUp(ctx)
		if err != nil {
			return 0, e.followFailed(err)
		}
		if jumped {
			e.follow.mu.Lock()
			e.follow.jumps++
			e.follow.mu.Unlock()
			e.dropShrinks()
			e.applyChanges(nil, true)
		}
	}
	applied := 0
	for {
		sent, wall := e.clk.Mono(), e.clk.Now()
		var ch Changes
		_, ok, err := e.db.FollowNextWith(ctx, func(keys [][]byte, apply func() error) error {
			e.follow.view.Lock()
			defer e.follow.view.Unlock()
			sizes, snap := e.beforeApply(keys)
			if err := apply(); err != nil {
				if snap != nil {
					snap.Close()
				}
				return err
			}
			ch = e.refresh(keys, false)
			e.afterApply(sizes, snap)
			return nil
		})
		if err != nil {
			return applied, e.followFailed(err)
		}
		e.follow.mu.Lock()
		e.follow.lastOK, e.follow.lastErr = sent, ""
		if !ok {
			e.follow.upToDate = wall
		}
		e.follow.mu.Unlock()
		if !ok {
			return applied, nil
		}
		applied++
		e.tell(ch)
	}
}

func (e *Engine) followFailed(err error) error {
	e.follow.mu.Lock()
	e.follow.lastErr = err.Error()
	e.follow.mu.Unlock()
	return err
}

// FollowStatus reports where the replica stands.
func (e *Engine) FollowStatus() FollowStatus {
	e.follow.mu.Lock()
	defer e.follow.mu.Unlock()
	return FollowStatus{AppliedSeq: e.db.AppliedSeq(), Manifest: e.db.LatestManifest(),
		UpToDate: e.follow.upToDate, LastError: e.follow.lastErr, Jumps: e.follow.jumps}
}

// applyChanges refreshes what the engine keeps in memory about the keys a
// journal wrote (all of it when all is set) and tells the observer.
func (e *Engine) applyChanges(keys [][]byte, all bool) {
	e.follow.view.Lock()
	ch := e.refresh(keys, all)
	e.follow.view.Unlock()
	e.tell(ch)
}

// refresh is applyChanges without telling the observer. Caller holds
// e.follow.view.
func (e *Engine) refresh(keys [][]byte, all bool) Changes {
	var ch Changes
	ch.All = all
	inos := map[uint64]bool{}
	ranges := map[uint64]bool{}
	restored := false
	for _, k := range keys {
		restored = restored || bytes.Equal(k, RestoreMarkKey)
		if len(k) < 9 {
			continue
		}
		switch k[0] {
		case schema.PInode, schema.PSymlink, schema.PXattr, schema.PExtent:
			inos[binary.BigEndian.Uint64(k[1:])] = true
		case schema.PRangeTomb:
			ino := binary.BigEndian.Uint64(k[1:])
			inos[ino], ranges[ino] = true, true
		case schema.PDirent:
			if parent, name, err := schema.ParseDirentKey(k); err == nil {
				ch.Entries = append(ch.Entries, EntryRef{parent, name})
				inos[parent] = true
			}
		}
	}
	if all {
		e.reloadRangeTombs(nil)
	} else if len(ranges) > 0 {
		e.reloadRangeTombs(ranges)
	}
	e.ns.Lock()
	if restored {
		e.markRestored(inos)
	}
	for ino, n := range e.ns.inodes {
		if !all && !inos[ino] {
			continue
		}
		rec, err := e.getRecord(ino)
		if err != nil {
			continue // gone: an open file keeps what it had
		}
		n.mu.Lock()
		n.attr, n.psize = attrOf(ino, rec), rec.Size
		n.shift = rec.Shift() // an empty file's may have changed
		n.mu.Unlock()
	}
	e.ns.Unlock()
	for ino := range inos {
		ch.Inodes = append(ch.Inodes, ino)
	}
	return ch
}

// tell hands ch to the observer, if there is anything in it.
func (e *Engine) tell(ch Changes) {
	e.follow.mu.Lock()
	observe := e.follow.observe
	e.follow.mu.Unlock()
	if observe != nil && (ch.All || len(ch.Inodes) > 0 || len(ch.Entries) > 0) {
		observe(ch)
	}
}

// reloadRangeTombs reloads the range tombstones of the given inodes (nil:
// all of them) from the metadata.
func (e *Engine) reloadRangeTombs(inos map[uint64]bool) {
	e.ranges.mu.Lock()
	if inos == nil {
		e.ranges.m = nil
	} else {
		for ino := range inos {
			delete(e.ranges.m, ino)
		}
	}
	e.ranges.mu.Unlock()
	lo, hi := schema.PrefixRange(schema.PRangeTomb)
	_ = e.scan(lo, hi, func(k, v []byte) error {
		ino, from, to, err := schema.ParseRangeTombKey(k)
		if err != nil || (inos != nil && !inos[ino]) {
			return nil
		}
		if mark, err := schema.ParseU64(v); err == nil {
			e.ranges.add(ino, rangeTomb{from: from, to: to, mark: mark})
		}
		return nil
	})
}

// goneOnWriter reports, on a following replica, that ino is deleted in the
// state it serves: its record is gone, or a tombstone says its extents are
// being removed. A file the writer deleted keeps no data for the replica's
// open descriptors (the writer's orphan handling knows only its own), so a
// read of it fails with ErrStale (ESTALE, as NFS does) rather than return
// zeroes where the file's bytes were.
func (e *Engine) goneOnWriter(ino uint64) bool {
	if _, err := e.getRecord(ino); errors.Is(err, ErrNotExist) {
		return true
	}
	_, ok, err := e.get(schema.TombstoneKey(ino))
	return err == nil && ok
}
