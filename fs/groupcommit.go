package fs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// Group commit. A barrier makes durable everything written before it
// began, so callers that arrive while one is running need the next one,
// and they can all share it: the first of them to get the flush lock runs
// it (the leader), and the others take its result without running
// another. N threads each doing write+fsync then cost about one barrier
// per round, not N, and get close to N times one thread's commits per
// second until the store's bandwidth is reached.
//
// An fsync of a file with nothing to make durable (Sync) costs no
// request: no barrier at all when the file has no dirty or in-flight data
// or attributes in memory and no committed metadata batch outside the
// store's journal touches its keys.

// groupCommit is the engine's shared barrier state.
type groupCommit struct {
	mu sync.Mutex
	// next is the barrier that will begin next, which every caller
	// arriving now waits for; nil until one does. Its leader detaches it
	// (sets next to nil) when it begins, under the flush lock.
	next *barrierRound

	// flushes counts lockFlush and unlockFlush calls: odd while a flush
	// or barrier holds the lock. Sync reads it before and after looking
	// at a file, so that a flush taking the file's dirty data meanwhile
	// (whose commit is not yet in the metadata queue) is not missed.
	flushes atomic.Uint64
}

// barrierRound is one barrier that several callers share.
type barrierRound struct {
	done chan struct{} // closed once err is set
	err  error
}

// join returns the barrier that begins next.
func (g *groupCommit) join() *barrierRound {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next == nil {
		g.next = &barrierRound{done: make(chan struct{})}
	}
	return g.next
}

// groupBarrier is Barrier: it runs the next barrier or waits for the
// caller that does.
func (e *Engine) groupBarrier(ctx context.Context) error {
	for {
		r := e.group.join()
		select {
		case e.flushMu <- struct{}{}:
			e.group.flushes.Add(1)
		case <-r.done:
			if !leaderCancelled(ctx, r.err) {
				e.opts.Stats.barrierJoined()
				return r.err
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		e.group.mu.Lock()
		lead := e.group.next == r
		if lead {
			e.group.next = nil // callers from now on need the barrier after this one
		}
		e.group.mu.Unlock()
		if !lead {
			// r ran while this caller waited for the lock.
			e.unlockFlush()
			<-r.done
			if !leaderCancelled(ctx, r.err) {
				e.opts.Stats.barrierJoined()
				return r.err
			}
			continue
		}
		start := time.Now()
		r.err = e.barrierLocked(ctx)
		e.opts.Stats.barrierDone(start, r.err)
		close(r.done)
		e.unlockFlush()
		return r.err
	}
}

// leaderCancelled reports whether a shared barrier failed only because
// its leader's context ended while the caller's has not: the caller then
// runs (or joins) another.
func leaderCancelled(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// Sync makes inode ino durable, as fsync(2) asks: when it has nothing
// that is not durable already it returns at once, without a request;
// otherwise it runs (or shares) a barrier, which makes everything written
// so far durable, this file included.
func (e *Engine) Sync(ctx context.Context, ino uint64) error {
	if e.ro.Load() {
		if e.dirtyBytes.Load() > 0 {
			// A writer that handed over with data it could not make
			// durable (Demote refuses to): never report it durable.
			return ErrReadOnly
		}
		return nil
	}
	if e.durable(ino) {
		e.opts.Stats.syncClean()
		return nil
	}
	return e.Barrier(ctx)
}

// durable reports whether everything of inode ino is in the store: no
// dirty or in-flight data, no attributes changed in memory only, and no
// committed metadata batch outside the journal touching its keys (its
// record, pointers, entries, xattrs). A flush running, or one that ran
// while it looked, makes it answer false.
func (e *Engine) durable(ino uint64) bool {
	before := e.group.flushes.Load()
	if before%2 != 0 {
		return false
	}
	if e.db.Failed() != nil || e.db.Fenced() != nil {
		return false // the barrier reports why
	}
	e.ns.Lock()
	n := e.ns.inodes[ino]
	busy := false
	if n != nil {
		n.mu.RLock()
		busy = len(n.dirty) > 0 || len(n.flushing) > 0 || n.attrDirty || n.psize != n.attr.Size
		n.mu.RUnlock()
	}
	e.ns.Unlock()
	if busy {
		return false
	}
	if e.db.Unjournaled(func(k []byte) bool { return touches(k, ino) }) {
		return false
	}
	return e.group.flushes.Load() == before
}

// touches reports whether metadata key k may be part of inode ino's
// durable state. Keys of no inode are segment counters and system keys;
// a key of any other kind (one a later format adds) counts for every
// inode: a barrier is never wrong.
func touches(k []byte, ino uint64) bool {
	if i, ok := schema.KeyInode(k); ok {
		return i == ino
	}
	if len(k) == 0 {
		return true
	}
	switch k[0] {
	case schema.PCounter, schema.PFsSystem, lsm.PrefixSystem:
		return false
	}
	return true
}
