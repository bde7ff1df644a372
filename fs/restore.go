package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// Restore (`ebbfs checkpoint restore NAME`) makes the filesystem's state
// the one a checkpoint's manifest holds, in place, as one ordinary change:
// a single batch, in a single journal object, that turns the current
// metadata into the checkpoint's. The batch
//
//   - sets, replaces or deletes every namespace and file key (inodes,
//     directory entries, extent pointers, tombstones, range tombstones,
//     orphan marks, xattrs, symlink targets) that differs between the two;
//   - moves each segment counter to what the checkpoint's state references:
//     the checkpoint's own counter for the segments it knows, 0 live bytes
//     for the segments written since (they become dead, and reclamation
//     gives them a deadline like any other dead segment), as merge deltas;
//   - keeps the system keys (the next inode number, the next segment id,
//     reclamation's records): inode numbers and segment ids are never
//     reused, so no frame's identity (inode, extent, generation) repeats.
//
// Either the journal object is written or it is not: a crash leaves the
// old state or the new one, never a mixture. A segment the checkpoint
// references with live bytes must still exist: the restore checks each
// one the current state holds dead (HEAD) and refuses otherwise.

// RestoreStats is what a restore changed.
type RestoreStats struct {
	Manifest        uint64        `json:"manifest"`
	KeysSet         int           `json:"keys_set"`
	KeysDeleted     int           `json:"keys_deleted"`
	InodesChanged   int           `json:"inodes_changed"`   // in both states, different
	InodesAdded     int           `json:"inodes_added"`     // only in the checkpoint's
	InodesRemoved   int           `json:"inodes_removed"`   // only in the replaced state
	SegmentsRevived int           `json:"segments_revived"` // dead before, live again
	SegmentsDead    int           `json:"segments_dead"`    // live before, dead now
	LiveBytesBefore int64         `json:"live_bytes_before"`
	LiveBytesAfter  int64         `json:"live_bytes_after"`
	Duration        time.Duration `json:"-"`
}

// ErrRestoreGone is returned when a segment the checkpoint's state
// references is no longer in the store (an expired ephemeral checkpoint's).
var ErrRestoreGone = errors.New("a segment the checkpoint references is gone")

// Restore makes the state of the manifest manifestSeq (a checkpoint's)
// the filesystem's current state and makes it durable. The caller makes
// sure that no reclamation cycle deletes or repacks segments while it
// runs (a persistent checkpoint of the state being replaced, and a cycle
// that saw it: internal/daemon). Open files whose inode the checkpoint's
// state does not hold read ESTALE from then on; fs/fuse refuses the
// handles of files it changed opened before it too (restore_marks.go).
func (e *Engine) Restore(ctx context.Context, manifestSeq uint64) (RestoreStats, error) {
	start := e.clk.Mono()
	if e.opts.ReadOnly {
		return RestoreStats{}, ErrReadOnly
	}
	dir := filepath.Join(e.opts.CacheDir, "meta-restore")
	if err := os.RemoveAll(dir); err != nil {
		return RestoreStats{}, fmt.Errorf("fs: restore: %w", err)
	}
	old, err := lsm.OpenAt(ctx, lsm.Options{Dir: dir, Store: e.opts.Store, Keys: e.opts.Keys,
		Clock: e.clk, Logger: e.log, ReadOnly: true, Space: e.db.Space()}, manifestSeq)
	if err != nil {
		return RestoreStats{}, fmt.Errorf("fs: restore: opening manifest %d: %w", manifestSeq, err)
	}
	defer func() {
		old.Close()
		os.RemoveAll(dir)
	}()

	e.hostMu.Lock() // no tombstone cleaner transaction meanwhile
	defer e.hostMu.Unlock()
	if e.closed.Load() {
		return RestoreStats{}, ErrClosed
	}
	if err := e.lockFlush(ctx); err != nil {
		return RestoreStats{}, err
	}
	defer e.unlockFlush()
	if err := e.barrierLocked(ctx); err != nil {
		return RestoreStats{}, err
	}
	ch, st, err := e.restoreLocked(ctx, old)
	if err != nil {
		return st, err
	}
	st.Manifest = manifestSeq
	failpoint.Hit("restore-before-journal")
	if err := e.barrierLocked(ctx); err != nil {
		return st, err
	}
	failpoint.Hit("restore-after-journal")
	if e.opts.Events != nil && st.SegmentsDead > 0 {
		e.opts.Events.DeadBytes()
	}
	e.tell(ch)
	st.Duration = e.clk.Mono() - start
	e.log.Info("restore: the checkpoint's state is the current one", "manifest", manifestSeq,
		"keys_set", st.KeysSet, "keys_deleted", st.KeysDeleted, "inodes_changed", st.InodesChanged,
		"inodes_added", st.InodesAdded, "inodes_removed", st.InodesRemoved,
		"segments_revived", st.SegmentsRevived, "segments_dead", st.SegmentsDead, "took", st.Duration)
	return st, nil
}

// restoreLocked builds and commits the batch and brings the loaded inodes
// to the new state. Caller holds hostMu and flushMu.
func (e *Engine) restoreLocked(ctx context.Context, old *lsm.DB) (Changes, RestoreStats, error) {
	var st RestoreStats
	e.ns.Lock()
	defer e.ns.Unlock()
	e.ptrMu.Lock()
	defer e.ptrMu.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	d := restoreDiff{b: b, inos: map[uint64]bool{}, st: &st}
	if err := d.keys(e.db, old); err != nil {
		return Changes{}, st, err
	}
	revived, err := d.counters(e.db, old)
	if err != nil {
		return Changes{}, st, err
	}
	for _, id := range revived {
		if _, err := e.opts.Store.Head(ctx, segment.Key(id)); err != nil {
			return Changes{}, st, fmt.Errorf("fs: restore: segment %016x: %w (%v); nothing was changed", id, ErrRestoreGone, err)
		}
	}
	if err := d.inodes(e.db, old); err != nil {
		return Changes{}, st, err
	}
	if err := b.Set(RestoreMarkKey, schema.U64(e.RestoreMark()+1)); err != nil {
		return Changes{}, st, err
	}
	failpoint.Hit("restore-before-commit")
	if err := e.commit(b); err != nil {
		return Changes{}, st, err
	}
	e.markRestored(d.inos)
	e.afterRestore(d.inos)
	ch := Changes{Entries: d.entries}
	for ino := range d.inos {
		ch.Inodes = append(ch.Inodes, ino)
	}
	return ch, st, nil
}

// afterRestore brings what the engine holds in memory to the restored
// state: loaded inodes the restore changed are reloaded from their new
// records (dirty data written meanwhile dropped), those it removed become
// stale (their open handles read ESTALE). Caller holds e.ns and e.ptrMu.
func (e *Engine) afterRestore(changed map[uint64]bool) {
	var freed int64
	for ino, n := range e.ns.inodes {
		if !changed[ino] {
			continue
		}
		rec, err := e.getRecord(ino)
		n.mu.Lock()
		freed += int64(len(n.dirty)) * int64(n.es())
		n.dirty, n.flushing = map[uint64][]byte{}, map[uint64]*flushEntry{}
		n.spans, n.rmw, n.attrDirty = nil, nil, false
		n.ptrWin.Store(nil)
		if err != nil {
			n.deleted, n.stale = true, true
			n.res, n.resPut = nil, 0
		} else {
			n.attr, n.psize, n.shift, n.parent = attrOf(ino, rec), rec.Size, rec.Shift(), rec.Parent
			n.res, n.resPut = rec.Reserved, reservedOf(rec.Reserved, rec.Shift())
		}
		wasDeleted := n.deleted && !n.stale
		n.mu.Unlock()
		if err == nil && wasDeleted {
			// Deleted in the replaced state, alive in the restored one:
			// the next use loads it afresh.
			delete(e.ns.inodes, ino)
		} else {
			e.maybeEvictLocked(n)
		}
	}
	if freed > 0 {
		e.dirtyDone(freed)
	}
	e.reloadRangeTombs(nil)
	if err := e.loadReserved(); err != nil {
		e.log.Error("restore: reloading the reserved total", "err", err)
	}
	e.space.mu.Lock()
	e.space.at = time.Time{}
	e.space.mu.Unlock()
}

// restoreDiff collects the batch that turns the current state into the
// checkpoint's.
type restoreDiff struct {
	b       *lsm.Batch
	inos    map[uint64]bool // inodes whose keys changed
	entries []EntryRef
	st      *RestoreStats
}

// restoredPrefix reports whether keys of this prefix are the filesystem's
// state, which a restore replaces; counters and system keys are not.
func restoredPrefix(p byte) bool {
	return p != schema.PCounter && p != schema.PFsSystem && p != lsm.PrefixSystem
}

// keys diffs every restored key of the two states, in key order.
func (d *restoreDiff) keys(cur, old *lsm.DB) error {
	ci, err := cur.NewIter(nil, nil)
	if err != nil {
		return err
	}
	defer ci.Close()
	oi, err := old.NewIter(nil, nil)
	if err != nil {
		return err
	}
	defer oi.Close()
	cok, ook := ci.First(), oi.First()
	for cok || ook {
		var c int
		switch {
		case !cok:
			c = 1
		case !ook:
			c = -1
		default:
			c = bytes.Compare(ci.Key(), oi.Key())
		}
		switch {
		case c < 0:
			if err := d.del(ci.Key()); err != nil {
				return err
			}
			cok = ci.Next()
		case c > 0:
			v, err := oi.ValueAndErr()
			if err != nil {
				return err
			}
			if err := d.set(oi.Key(), v); err != nil {
				return err
			}
			ook = oi.Next()
		default:
			cv, err := ci.ValueAndErr()
			if err != nil {
				return err
			}
			ov, err := oi.ValueAndErr()
			if err != nil {
				return err
			}
			if !bytes.Equal(cv, ov) {
				if err := d.set(oi.Key(), ov); err != nil {
					return err
				}
			}
			cok, ook = ci.Next(), oi.Next()
		}
	}
	return errors.Join(ci.Error(), oi.Error())
}

func (d *restoreDiff) del(k []byte) error {
	if len(k) == 0 || !restoredPrefix(k[0]) {
		return nil
	}
	d.note(k)
	d.st.KeysDeleted++
	return d.b.Delete(bytes.Clone(k))
}

func (d *restoreDiff) set(k, v []byte) error {
	if len(k) == 0 || !restoredPrefix(k[0]) {
		return nil
	}
	d.note(k)
	d.st.KeysSet++
	return d.b.Set(bytes.Clone(k), bytes.Clone(v))
}

func (d *restoreDiff) note(k []byte) {
	if ino, ok := schema.KeyInode(k); ok {
		d.inos[ino] = true
	}
	if k[0] == schema.PDirent {
		if parent, name, err := schema.ParseDirentKey(k); err == nil {
			d.entries = append(d.entries, EntryRef{parent, name})
		}
	}
}

// counters moves every segment counter to the checkpoint state's value
// (merge deltas) and returns the segments that come back to life.
func (d *restoreDiff) counters(cur, old *lsm.DB) ([]uint64, error) {
	type ctr struct{ live, total, size int64 }
	read := func(db *lsm.DB) (map[uint64]ctr, error) {
		m := map[uint64]ctr{}
		lo, hi := schema.PrefixRange(schema.PCounter)
		err := db.Scan(lo, hi, func(k, v []byte) error {
			id, err := schema.ParseU64Key(k, schema.PCounter)
			if err != nil {
				return err
			}
			live, total, size, err := lsm.DecodeCounter(v)
			m[id] = ctr{live, total, size}
			return err
		})
		return m, err
	}
	now, err := read(cur)
	if err != nil {
		return nil, fmt.Errorf("fs: restore: current counters: %w", err)
	}
	then, err := read(old)
	if err != nil {
		return nil, fmt.Errorf("fs: restore: the checkpoint's counters: %w", err)
	}
	var revived []uint64
	for id, o := range then {
		c, ok := now[id]
		if !ok {
			if o.live > 0 {
				return nil, fmt.Errorf("fs: restore: segment %016x holds %d live bytes of the checkpoint but has no counter: %w; nothing was changed", id, o.live, ErrRestoreGone)
			}
			continue // dead then, reclaimed since
		}
		if c.live <= 0 && o.live > 0 {
			revived = append(revived, id)
			d.st.SegmentsRevived++
		}
		d.st.LiveBytesAfter += o.live
		if o.live != c.live {
			if err := d.b.AddCounter(schema.CounterKey(id), o.live-c.live, 0, 0); err != nil {
				return nil, err
			}
		}
	}
	for id, c := range now {
		d.st.LiveBytesBefore += c.live
		if _, ok := then[id]; ok || c.live == 0 {
			continue
		}
		// Written since the checkpoint: nothing in its state references it.
		d.st.SegmentsDead++
		if err := d.b.AddCounter(schema.CounterKey(id), -c.live, 0, 0); err != nil {
			return nil, err
		}
	}
	for id, o := range then {
		if c, ok := now[id]; ok && c.live > 0 && o.live <= 0 {
			d.st.SegmentsDead++
		}
	}
	return revived, nil
}

// inodes counts the changed inodes by what happened to them.
func (d *restoreDiff) inodes(cur, old *lsm.DB) error {
	for ino := range d.inos {
		_, inCur, err := cur.Get(schema.InodeKey(ino))
		if err != nil {
			return err
		}
		_, inOld, err := old.Get(schema.InodeKey(ino))
		if err != nil {
			return err
		}
		switch {
		case inCur && inOld:
			d.st.InodesChanged++
		case inOld:
			d.st.InodesAdded++
		case inCur:
			d.st.InodesRemoved++
		}
	}
	return nil
}
