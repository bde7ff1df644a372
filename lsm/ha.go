package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// Standby writers (README "Standby writers", FORMAT "Lease record").
//
// A standby is a read-only follower that announces itself in the lease's
// standbys list (AnnounceStandby, an IfMatch PUT). A writer learns of it
// when its own next lease write fails its IfMatch (the announcement
// changed the record): it re-reads the record, adopts the list and from
// then on heartbeats every takeover_after/4 of the most impatient standby
// attached (HeartbeatEvery). With no standby attached it heartbeats every
// LeaseTTL/3 as before. A writer whose barriers run looks at the lease's
// ETag (one HEAD) at most every standbyLookEvery, so that a standby
// attached to a busy writer is heard of within seconds; an idle writer
// with no standby sends nothing.
//
// A standby that sees no sign of life (a new journal, or a changed lease
// heartbeat) for its takeover_after takes the lease with an IfMatch PUT on
// the ETag of the record it judged dead (TakeLease): of several standbys
// exactly one wins; the others see the new epoch and follow its writer.
// Safety does not rest on that judgement: the new writer's epoch-start
// journal (BecomeWriter) fences the old one at its next journal write.

const (
	// DefaultTakeoverAfter is [ha] takeover_after's default.
	DefaultTakeoverAfter = 10 * time.Second
	// MinTakeoverAfter is the shortest takeover_after accepted.
	MinTakeoverAfter = 2 * time.Second
	// StandbyRenewEvery is how often a standby renews its entry.
	StandbyRenewEvery = 5 * time.Minute
	// StandbyExpiry is how long a writer heartbeats for a standby that
	// stopped renewing its entry (by the writer's monotonic clock).
	StandbyExpiry = 3 * StandbyRenewEvery
	// standbyLookEvery bounds how often a writer whose barriers run
	// looks for a new standby (one HEAD of the lease).
	standbyLookEvery = 10 * time.Second
	// minHeartbeat bounds the heartbeat interval from below.
	minHeartbeat = 500 * time.Millisecond
)

// ErrLeaseMoved is TakeLease's answer when the lease changed since the
// standby read it: the writer showed a sign of life, or another standby
// took over first.
var ErrLeaseMoved = errors.New("lsm: the lease changed since it was read; another writer holds it")

// StandbyEntry is one standby in the lease's standbys list.
type StandbyEntry struct {
	ID     string `json:"id"`
	Holder string `json:"holder"`
	// TakeoverAfterMS is the standby's takeover_after in milliseconds.
	TakeoverAfterMS int64 `json:"takeover_after_ms"`
	// Renewal is bumped by the standby every StandbyRenewEvery.
	Renewal uint64 `json:"renewal"`
}

type standbySeen struct {
	e  StandbyEntry
	at time.Duration // Clock.Mono when this renewal was first seen
}

func withoutStandby(list []StandbyEntry, id string) []StandbyEntry {
	var out []StandbyEntry
	for _, e := range list {
		if e.ID != id {
			out = append(out, e)
		}
	}
	return out
}

// noteStandbys takes list, read from the stored lease, as the standbys
// attached. Caller holds leaseMu (or is the only user of the DB).
func (db *DB) noteStandbys(list []StandbyEntry) {
	now := db.opts.Clock.Mono()
	seen := map[string]standbySeen{}
	for _, e := range list {
		if e.ID == "" || e.ID == db.opts.StandbyID {
			continue
		}
		if old, ok := db.standbys[e.ID]; ok && old.e == e {
			seen[e.ID] = old
			continue
		}
		seen[e.ID] = standbySeen{e: e, at: now}
	}
	db.standbys = seen
}

// liveStandbys is the list to write: entries renewed within
// StandbyExpiry. Caller holds leaseMu.
func (db *DB) liveStandbys() []StandbyEntry {
	now := db.opts.Clock.Mono()
	var out []StandbyEntry
	for id, s := range db.standbys {
		if now-s.at > StandbyExpiry {
			db.opts.Logger.Info("lsm: standby stopped renewing its entry; no longer heartbeating for it", "standby", s.e.Holder)
			delete(db.standbys, id)
			continue
		}
		out = append(out, s.e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// HeartbeatEvery is the writer's heartbeat interval now: a quarter of the
// shortest takeover_after of the standbys attached, LeaseTTL/3 without.
func (db *DB) HeartbeatEvery() time.Duration {
	db.leaseMu.Lock()
	defer db.leaseMu.Unlock()
	return db.heartbeatEveryLocked()
}

func (db *DB) heartbeatEveryLocked() time.Duration {
	d := db.opts.LeaseTTL / 3
	for _, s := range db.standbys {
		d = min(d, max(time.Duration(s.e.TakeoverAfterMS)*time.Millisecond/4, minHeartbeat))
	}
	return d
}

// heartbeatWait is the heartbeat loop's wait: until the next write is due.
func (db *DB) heartbeatWait() time.Duration {
	db.leaseMu.Lock()
	defer db.leaseMu.Unlock()
	return max(db.heartbeatEveryLocked()-(db.opts.Clock.Mono()-db.leaseWritten), 0)
}

// Standbys lists the standbys this writer heartbeats for.
func (db *DB) Standbys() []StandbyEntry {
	db.leaseMu.Lock()
	defer db.leaseMu.Unlock()
	out := make([]StandbyEntry, 0, len(db.standbys))
	for _, s := range db.standbys {
		out = append(out, s.e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Heartbeats counts the lease writes of this writer.
func (db *DB) Heartbeats() uint64 { return db.beats.Load() }

// heartbeatDue reports whether the heartbeat loop, woken, must write the
// lease now. Woken early by a barrier (lookForStandbys) with no standby
// attached, it looks at the lease's ETag instead: a changed one means a
// standby announced itself, and the lease is written (which adopts it).
func (db *DB) heartbeatDue() bool {
	db.leaseMu.Lock()
	every := db.heartbeatEveryLocked()
	now := db.opts.Clock.Mono()
	written, looked := now-db.leaseWritten, now-db.leaseLooked
	etag := db.leaseETag
	db.leaseMu.Unlock()
	if written >= every-every/8 {
		return true
	}
	if looked < standbyLookEvery {
		return false
	}
	ctx, cancel := context.WithTimeout(objstore.WithPurpose(context.Background(), objstore.PurposeHeartbeat), standbyLookEvery)
	defer cancel()
	info, err := db.opts.Store.Head(ctx, leaseKey)
	db.leaseMu.Lock()
	db.leaseLooked = db.opts.Clock.Mono()
	db.leaseMu.Unlock()
	return err == nil && info.ETag != etag
}

// lookForStandbys is called after a barrier wrote a journal: a writer
// that has no standby and has not looked at the lease for
// standbyLookEvery wakes its heartbeat loop to look.
func (db *DB) lookForStandbys() {
	w := db.heartbeat
	if w == nil {
		return
	}
	db.leaseMu.Lock()
	due := len(db.standbys) == 0 && db.opts.Clock.Mono()-db.leaseLooked >= standbyLookEvery
	db.leaseMu.Unlock()
	if due {
		w.Notify()
	}
}

// ReadLeaseTag reads the lease record and its ETag (HEAD, then GET). The
// two may describe different versions when the record changes in
// between; a conditional write on the ETag then fails, which is safe.
func ReadLeaseTag(ctx context.Context, st objstore.Store) (l Lease, etag string, found bool, err error) {
	info, err := st.Head(ctx, leaseKey)
	if objstore.IsNotFound(err) {
		return Lease{}, "", false, nil
	}
	if err != nil {
		return Lease{}, "", false, fmt.Errorf("lsm: read %s: %w", leaseKey, err)
	}
	b, err := st.Get(ctx, leaseKey)
	if objstore.IsNotFound(err) {
		return Lease{}, "", false, nil
	}
	if err != nil {
		return Lease{}, "", false, fmt.Errorf("lsm: read %s: %w", leaseKey, err)
	}
	l, err = ParseLease(b)
	if err != nil {
		return Lease{}, "", false, err
	}
	return l, info.ETag, true, nil
}

// AnnounceStandby writes e into the lease's standbys list (replacing an
// entry with its ID), or removes the entry when remove is set. It returns
// the record written and its ETag. With no lease record (no writer has
// run) there is nothing to announce to: found is false.
func AnnounceStandby(ctx context.Context, st objstore.Store, e StandbyEntry, remove bool) (l Lease, etag string, found bool, err error) {
	return updateLease(ctx, st, "announce standby", func(cur *Lease) {
		cur.Standbys = withoutStandby(cur.Standbys, e.ID)
		if !remove {
			cur.Standbys = append(cur.Standbys, e)
		}
	})
}

// RequestHandover asks the writer for a planned switch-over to the
// standby id (`ebbfs promote`): it sets the lease's handover_to.
func RequestHandover(ctx context.Context, st objstore.Store, id string) (Lease, string, error) {
	l, tag, found, err := updateLease(ctx, st, "request a handover", func(cur *Lease) { cur.HandoverTo = id })
	if err == nil && !found {
		err = fmt.Errorf("lsm: no %s: no writer has run", leaseKey)
	}
	return l, tag, err
}

// updateLease rewrites the lease record with change applied, with an
// IfMatch on the ETag it read; a writer's heartbeat meanwhile makes it
// read again.
func updateLease(ctx context.Context, st objstore.Store, what string, change func(*Lease)) (l Lease, etag string, found bool, err error) {
	for range 5 {
		cur, tag, ok, err := ReadLeaseTag(ctx, st)
		if err != nil || !ok {
			return Lease{}, "", ok, err
		}
		change(&cur)
		body := cur.marshal()
		newTag, err := st.Put(ctx, leaseKey, body, objstore.PutOptions{IfMatch: tag})
		if objstore.IsPreconditionFailed(err) {
			if got, gerr := st.Get(ctx, leaseKey); gerr == nil && bytes.Equal(got, body) {
				info, herr := st.Head(ctx, leaseKey)
				if herr == nil {
					return cur, info.ETag, true, nil
				}
			}
			continue // the writer heartbeated meanwhile: read again
		}
		if err != nil {
			return Lease{}, "", true, fmt.Errorf("lsm: %s in %s: %w", what, leaseKey, err)
		}
		return cur, newTag, true, nil
	}
	return Lease{}, "", true, fmt.Errorf("lsm: %s keeps changing; could not %s yet", leaseKey, what)
}

// ErrNotDemoted: Demote changed nothing; the DB is still the writer.
var ErrNotDemoted = errors.New("lsm: not demoted")

// HandoverRequested is the standby a planned switch-over was asked for,
// "" if none: the writer heard of it at its last lease write.
func (db *DB) HandoverRequested() string {
	if p := db.handover.Load(); p != nil {
		return *p
	}
	return ""
}

// Demote ends this writer's term for a planned switch-over: with
// everything committed in a journal (the caller's final barrier), it
// stops the heartbeat and the publisher and releases the lease with
// handover_to set to the standby, which takes it at once. The DB is then
// a following replica again (a later TakeLease may promote it anew).
func (db *DB) Demote(handoverTo string) error {
	if db.ro.Load() {
		return fmt.Errorf("%w: %w", ErrNotDemoted, ErrReadOnly)
	}
	if n := db.Pending(); n > 0 {
		return fmt.Errorf("%w: %d batches are not in a journal yet; run a barrier first", ErrNotDemoted, n)
	}
	db.stopWriterLoops()
	db.leaseMu.Lock()
	db.lease.HandoverTo = handoverTo
	db.leaseMu.Unlock()
	err := db.renewLease(true)
	db.dropWriterState()
	if err != nil {
		return fmt.Errorf("lsm: releasing the lease for the handover: %w", err)
	}
	db.opts.Logger.Info("lsm: handed the lease over; following as a replica", "to", handoverTo)
	return nil
}

// TakeLease is a standby's takeover: it writes a lease of the next epoch
// for this process with an IfMatch on etag, the ETag of cur, the record
// it judged dead. ErrLeaseMoved: the record changed since (the writer is
// alive, or another standby won). On success the heartbeat starts; the
// caller applies every journal it can find and then calls BecomeWriter.
func (db *DB) TakeLease(ctx context.Context, cur Lease, etag string) (Lease, error) {
	if !db.ro.Load() || db.pinned || db.epoch.Load() != 0 {
		return Lease{}, errors.New("lsm: TakeLease is for a following standby")
	}
	o := &db.opts
	mine := Lease{Format: 1, Epoch: cur.Epoch + 1, Holder: o.Holder, Host: o.Host, PID: o.PID, Instance: processInstance,
		Heartbeat: o.Clock.Now().UTC(), Standbys: withoutStandby(cur.Standbys, o.StandbyID)}
	body := mine.marshal()
	pctx := objstore.WithPurpose(ctx, objstore.PurposeHeartbeat)
	newTag, err := o.Store.Put(pctx, leaseKey, body, objstore.PutOptions{IfMatch: etag})
	if objstore.IsPreconditionFailed(err) {
		// A lost answer to our own write reads as ours.
		got, gerr := o.Store.Get(pctx, leaseKey)
		if gerr != nil || !bytes.Equal(got, body) {
			return Lease{}, ErrLeaseMoved
		}
		info, herr := o.Store.Head(pctx, leaseKey)
		if herr != nil {
			return Lease{}, fmt.Errorf("lsm: read %s after taking it: %w", leaseKey, herr)
		}
		newTag, err = info.ETag, nil
	}
	if err != nil {
		return Lease{}, fmt.Errorf("lsm: take over %s: %w", leaseKey, err)
	}
	db.leaseMu.Lock()
	db.lease, db.leaseETag = mine, newTag
	db.noteStandbys(mine.Standbys)
	db.leaseLooked, db.leaseWritten = o.Clock.Mono(), o.Clock.Mono()
	db.leaseMu.Unlock()
	db.epoch.Store(mine.Epoch)
	db.heartbeat = worker.Start("lsm-heartbeat", o.Clock, db.heartbeatLoop)
	o.Logger.Warn("lsm: standby TOOK OVER the writer lease; the previous writer is fenced at its next journal write",
		"previous", cur.Holder, "epoch", mine.Epoch)
	return mine, nil
}

// BecomeWriter turns a following standby that holds the lease (TakeLease)
// and has applied every journal it found into the writer: it writes its
// epoch-start journal (replaying any the previous writer got in first,
// which fences that writer), then starts what a writer runs. It returns
// the journal sequences replayed during the epoch start (their changes
// reached the local state without the caller's refresh).
func (db *DB) BecomeWriter(ctx context.Context) (replayed int, err error) {
	if !db.ro.Load() || db.epoch.Load() == 0 {
		return 0, errors.New("lsm: BecomeWriter needs the lease first (TakeLease)")
	}
	o := &db.opts
	before := db.AppliedSeq()
	db.mu.Lock()
	db.mu.nextSeq = db.mu.appliedSeq + 1
	db.mu.lastPublish = o.Clock.Mono()
	db.mu.Unlock()
	db.openedAt = o.Clock.Mono()
	if err := db.startEpoch(ctx); err != nil {
		return 0, err
	}
	replayed = int(db.AppliedSeq() - before - 1)
	db.ro.Store(false)
	db.initReserve()
	db.inheritUncovered()
	db.publisher = worker.Start("lsm-publish", o.Clock, db.publishLoop)
	db.publisher.Notify()
	db.watchReserve()
	o.Logger.Info("lsm: promoted to writer", "epoch", db.epoch.Load(), "applied_seq", db.AppliedSeq(), "manifest", db.LatestManifest())
	return replayed, nil
}

// Rejoin turns a fenced writer (another writer took the lease) into a
// following replica again, in place: it stops the heartbeat and the
// publisher, drops the batches no journal took (never acknowledged: the
// barrier that would have made them durable failed with ErrFenced), and
// rebuilds the local state from the store's newest manifest and journals
// (the new writer's), so that nothing this writer committed locally after
// the takeover survives. The first part runs once; when the rebuild fails
// (the store is out of reach) the DB stays read-only and fenced, and
// Rejoin may be called again. A later TakeLease may promote it anew.
func (db *DB) Rejoin(ctx context.Context) error {
	if db.Fenced() == nil || db.pinned {
		return errors.New("lsm: Rejoin is for a fenced writer")
	}
	if !db.ro.Load() {
		db.stopWriterLoops()
		db.dropWriterState()
		db.mu.Lock()
		dropped := len(db.mu.queue)
		db.mu.queue, db.mu.unheard = nil, nil
		db.mu.journalAt = map[uint64]time.Duration{}
		db.mu.Unlock()
		db.opts.Logger.Warn("lsm: fenced writer stepping down; its unjournaled batches are dropped (never acknowledged)", "batches", dropped)
	}
	if err := db.rebuild(ctx); err != nil {
		return fmt.Errorf("lsm: rejoining as a replica: rebuilding from the store: %w", err)
	}
	db.mu.Lock()
	db.mu.fenced = nil
	db.mu.Unlock()
	db.opts.Logger.Info("lsm: the fenced writer follows the new writer as a replica", "applied_seq", db.AppliedSeq(), "manifest", db.LatestManifest())
	return nil
}

// stopWriterLoops stops a writer's background loops (heartbeat,
// publisher) and its watch of the disk reserve: the first step of a
// handover and of a rejoin.
func (db *DB) stopWriterLoops() {
	db.bgCancel()
	db.waitLoops()
	db.unwatchReserve()
}

// dropWriterState makes db read-only and forgets what it held as the
// writer (epoch, lease, standbys, a pending handover, the reserve), with
// a fresh background context for what it runs next as a follower.
func (db *DB) dropWriterState() {
	db.bgCtx, db.bgCancel = context.WithCancel(context.Background())
	db.heartbeat, db.publisher = nil, nil
	db.ro.Store(true)
	db.epoch.Store(0)
	db.leaseMu.Lock()
	db.lease, db.leaseETag, db.standbys = Lease{}, "", nil
	db.leaseMu.Unlock()
	db.handover.Store(nil)
	db.res.unwatch, db.res.own = nil, nil
}
