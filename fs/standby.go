package fs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"ebbfs.dev/ebbfs/lsm"
)

// A standby (Options.Standby) is a following replica that can become the
// writer in place (README "Standby writers"): Promote takes the lease,
// applies every journal the previous writer left, writes the new epoch's
// first journal (which fences the previous writer at its next barrier),
// and from then on the same engine, under the same mount and open files,
// accepts writes.

// Role is what the engine is: "writer", "standby", "replica" (a follower
// that will not take over, or a checkpoint reader) or "fenced" (a writer
// another took over from).
func (e *Engine) Role() string {
	switch {
	case e.db.Fenced() != nil:
		// A writer another took over from (read-only already while
		// Rejoin has not finished).
		return "fenced"
	case !e.ro.Load():
		return "writer"
	case e.standby.Load():
		return "standby"
	}
	return "replica"
}

// Promotable reports whether the engine is a standby that Promote may
// turn into the writer: its mount must not be read-only in the kernel.
func (e *Engine) Promotable() bool {
	return e.standby.Load() && e.ro.Load()
}

// Follows reports whether the engine follows a writer, or may (a writer
// may hand over and become a standby): every engine but a checkpoint
// reader's.
func (e *Engine) Follows() bool { return e.opts.PinManifest == 0 }

// Promote turns the standby into the writer, taking the lease with an
// IfMatch on etag (the record cur it judged dead): lsm.ErrLeaseMoved when
// it changed since (the writer is alive, or another standby won). The
// caller must have stopped its follow loop. Once the lease is taken,
// Promote keeps at the rest until ctx ends (a store outage then leaves
// this process holding the lease without serving writes; the caller may
// call FinishPromotion again).
func (e *Engine) Promote(ctx context.Context, cur lsm.Lease, etag string) error {
	if !e.Promotable() {
		return errors.New("fs: Promote is for a standby")
	}
	if e.db.Epoch() == 0 {
		if _, err := e.db.TakeLease(ctx, cur, etag); err != nil {
			return err
		}
	}
	return e.FinishPromotion(ctx)
}

// FinishPromotion is Promote after the lease was taken: catch up, start
// the epoch, start the writer's work.
func (e *Engine) FinishPromotion(ctx context.Context) error {
	if e.db.Epoch() == 0 || !e.ro.Load() {
		return errors.New("fs: FinishPromotion needs the lease and a standby")
	}
	for {
		_, err := e.Follow(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("fs: promotion: catching up: %w", err)
		}
		e.log.Warn("promotion: cannot read the previous writer's journals yet; retrying", "err", err)
		t := e.clk.After(time.Second)
		select {
		case <-ctx.Done():
			return fmt.Errorf("fs: promotion: catching up: %w", ctx.Err())
		case <-t:
		}
	}
	replayed, err := e.db.BecomeWriter(ctx)
	if err != nil {
		return fmt.Errorf("fs: promotion: %w", err)
	}
	// Journals replayed by the epoch start (the previous writer got one
	// in after the catch-up) changed what the kernel may cache.
	e.dropShrinks()
	e.applyChanges(nil, replayed > 0)
	if err := e.loadWriter(); err != nil {
		return fmt.Errorf("fs: promotion: %w", err)
	}
	// Writes as a writer opened on this store makes them (engine.go's
	// Open; a standby opened read-only). Set before ro: a write that
	// sees ro false sees this too.
	e.opts.patchWrites = e.opts.patchesWanted
	e.ro.Store(false)
	e.StartBackground()
	e.log.Info("promoted: this process is the writer; the mount accepts writes", "epoch", e.db.Epoch(), "applied_seq", e.db.AppliedSeq())
	return nil
}

// Demote ends this writer's term for a planned switch-over to the standby
// handoverTo: writes are refused from now on (EROFS), everything written
// is made durable, and the lease is released for the standby; the engine
// is then a standby itself (Promote may make it the writer again). On a
// failed barrier it stays the writer and returns the error. It returns
// how long writes were refused before the lease was released.
func (e *Engine) Demote(ctx context.Context, handoverTo string) (time.Duration, error) {
	if e.ro.Load() || e.opts.PinManifest != 0 {
		return 0, ErrReadOnly
	}
	e.ro.Store(true)
	start := e.clk.Mono()
	// A write that passed its check just before may still add data:
	// barrier until nothing is left.
	for attempt := 0; ; attempt++ {
		if err := e.groupBarrier(ctx); err != nil {
			e.ro.Store(false)
			return 0, fmt.Errorf("fs: handover: final barrier: %w", err)
		}
		if e.dirtyBytes.Load() == 0 && e.db.Pending() == 0 {
			break
		}
		if attempt == 20 {
			e.ro.Store(false)
			return 0, errors.New("fs: handover: writes kept arriving after they were refused")
		}
	}
	if w := e.flushW.Swap(nil); w != nil {
		w.Close()
	}
	if w := e.mergeW.Swap(nil); w != nil {
		w.Close()
	}
	e.started.Store(false)
	if err := e.db.Demote(handoverTo); errors.Is(err, lsm.ErrNotDemoted) {
		e.ro.Store(false)
		e.StartBackground()
		return 0, fmt.Errorf("fs: handover: %w", err)
	} else if err != nil {
		// Everything is durable and the heartbeat has stopped: the
		// standby takes over after its takeover_after instead.
		e.log.Warn("handover: the lease was not released; the standby takes over once the heartbeat is missed", "err", err)
	}
	e.standby.Store(true)
	pause := e.clk.Mono() - start
	e.log.Info("handed over: this process is a standby now", "to", handoverTo, "writes_refused_for", pause.Round(time.Millisecond))
	return pause, nil
}

// Rejoin turns a fenced writer (Role "fenced": another writer took the
// lease while this one was paused or cut off) into a standby in place:
// writes are refused from now on (EROFS), the flusher and merger stop,
// everything the engine held that no journal took (dirty data, unsealed
// or unjournaled changes, all refused by the fencing: nothing of it was
// acknowledged) is dropped, and the metadata is rebuilt from the store
// (lsm.DB.Rejoin), so that the engine serves the new writer's state and
// follows it. Loaded inodes are reloaded from their new records; those
// the new state does not hold (made by this writer after the takeover)
// read ESTALE. The caller starts following and tells the kernel
// (Follow's observer hears of everything). On an error (the store is out
// of reach) the engine stays read-only and fenced; Rejoin may be called
// again.
func (e *Engine) Rejoin(ctx context.Context) error {
	if e.opts.PinManifest != 0 || e.db.Fenced() == nil {
		return errors.New("fs: Rejoin is for a fenced writer")
	}
	e.ro.Store(true)
	if w := e.flushW.Swap(nil); w != nil {
		w.Close()
	}
	if w := e.mergeW.Swap(nil); w != nil {
		w.Close()
	}
	e.started.Store(false)
	e.hostMu.Lock() // no tombstone cleaner transaction meanwhile
	defer e.hostMu.Unlock()
	if e.closed.Load() {
		return ErrClosed
	}
	if err := e.lockFlush(ctx); err != nil {
		return err
	}
	defer e.unlockFlush()
	if err := e.db.Rejoin(ctx); err != nil {
		return fmt.Errorf("fs: rejoining as a standby: %w", err)
	}
	e.follow.view.Lock()
	e.ns.Lock()
	e.ptrMu.Lock()
	all := make(map[uint64]bool, len(e.ns.inodes))
	for ino := range e.ns.inodes {
		all[ino] = true
	}
	e.afterRestore(all) // reloads the reserved total too
	if d := e.dirtyBytes.Load(); d != 0 {
		e.dirtyDone(d) // flushing buffers afterRestore does not count
	}
	e.ptrMu.Unlock()
	e.ns.Unlock()
	e.follow.view.Unlock()
	e.dropShrinks()
	// The rebuild reset the follower's view of the store: the next
	// Follow catches up through the newest manifest first.
	e.follow.mu.Lock()
	e.follow.lastOK, e.follow.jumps = 0, e.follow.jumps+1
	e.follow.mu.Unlock()
	e.standby.Store(true)
	e.applyChanges(nil, true)
	e.log.Warn("rejoined: this fenced writer is a standby now, following the new writer; writes get EROFS", "applied_seq", e.db.AppliedSeq())
	return nil
}
