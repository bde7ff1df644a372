package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// Open opens the metadata store. A writer takes writer.lease (or fails
// with ErrLeaseHeld), recovers, and writes its epoch-start journal object.
// A read-only DB recovers up to the newest journal and takes no lease.
func Open(ctx context.Context, o Options) (*DB, error) {
	return open(ctx, o, 0, false)
}

// OpenAt opens a read-only DB holding exactly the state of manifest
// manifestSeq (no journal replay). Dir must be private to it; its contents
// are replaced.
func OpenAt(ctx context.Context, o Options, manifestSeq uint64) (*DB, error) {
	o.ReadOnly = true
	return open(ctx, o, manifestSeq, true)
}

func open(ctx context.Context, o Options, pinSeq uint64, pinned bool) (*DB, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("lsm: %w", err)
	}
	db := &DB{
		opts:      o,
		pebbleDir: filepath.Join(o.Dir, "pebble"),
		pinned:    pinned,
	}
	db.ro.Store(o.ReadOnly)
	db.bgCtx, db.bgCancel = context.WithCancel(context.Background())
	db.mu.shipped = map[string]string{}
	db.mu.nextSeq = 1
	db.mu.lastPublish = o.Clock.Mono()
	db.mu.journalAt = map[uint64]time.Duration{}
	db.openedAt = o.Clock.Mono()
	_ = os.RemoveAll(db.tmpDir())

	db.initReserve()
	if !o.ReadOnly {
		l, etag, err := db.acquireLease(ctx)
		if err != nil {
			return nil, err
		}
		db.lease, db.leaseETag = l, etag
		db.noteStandbys(l.Standbys)
		db.leaseLooked, db.leaseWritten = o.Clock.Mono(), o.Clock.Mono()
		db.epoch.Store(l.Epoch)
		// Heartbeat from the start: recovery may outlast the TTL.
		db.heartbeat = worker.Start("lsm-heartbeat", o.Clock, db.heartbeatLoop)
	}
	if err := db.recover(ctx, pinSeq, pinned); err != nil {
		db.abort()
		return nil, err
	}
	if !o.ReadOnly {
		if err := db.startEpoch(ctx); err != nil {
			db.abort()
			return nil, err
		}
		db.inheritUncovered()
		db.publisher = worker.Start("lsm-publish", o.Clock, db.publishLoop)
		db.publisher.Notify() // publishes at once if the inherited journals make it due
		db.watchReserve()
	}
	o.Logger.Info("lsm: open", "epoch", db.epoch.Load(), "applied_seq", db.AppliedSeq(), "manifest", db.LatestManifest(), "read_only", o.ReadOnly)
	return db, nil
}

// abort undoes a failed open: stops the heartbeat, closes Pebble, and
// releases the lease so the next attempt need not wait for the TTL.
func (db *DB) abort() {
	db.bgCancel()
	db.waitLoops()
	db.closeMu.Lock()
	if db.pdb != nil {
		_ = db.pdb.Close()
	}
	db.closed = true
	db.closeMu.Unlock()
	if !db.ro.Load() && !db.isFenced() {
		_ = db.renewLease(true)
	}
}

// listSeqs lists journal or manifest sequences in ascending order,
// ignoring names it does not recognise.
func listSeqs(ctx context.Context, s objstore.Store, prefix string) ([]uint64, error) {
	objs, err := objstore.ListAll(ctx, s, prefix)
	if err != nil {
		return nil, fmt.Errorf("lsm: list %s: %w", prefix, err)
	}
	var out []uint64
	for _, o := range objs {
		if v, ok := parseSeqKey(prefix, o.Key); ok {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// getObject fetches key, retrying transient errors until ctx ends.
func (db *DB) getObject(ctx context.Context, key string) ([]byte, error) {
	var b []byte
	err := db.retry(ctx, "get "+key, func() error {
		var err error
		b, err = db.opts.Store.Get(ctx, key)
		return err
	}, objstore.IsNotFound)
	if err != nil {
		return nil, fmt.Errorf("lsm: %s: %w", key, err)
	}
	return b, nil
}

func (db *DB) fetchManifest(ctx context.Context, seq uint64) (*Manifest, error) {
	b, err := db.getObject(ctx, manifestKey(seq))
	if err != nil {
		return nil, err
	}
	return openManifest(db.opts.Keys, seq, b)
}

func (db *DB) openPebble(mustExist bool) error {
	po := &pebble.Options{
		Merger:             counterMerger,
		Logger:             pebbleLogger{l: db.opts.Logger, onFatal: db.fatal},
		EventListener:      &pebble.EventListener{BackgroundError: db.backgroundError},
		FormatMajorVersion: pebble.FormatNewest,
		ErrorIfNotExists:   mustExist,
		MemTableSize:       memTableSize,
	}
	if db.opts.Tune != nil {
		db.opts.Tune(po)
		po.Merger = counterMerger
	}
	db.vfs = po.FS
	if db.vfs == nil {
		db.vfs = vfs.Default
	}
	p, err := pebble.Open(db.pebbleDir, po)
	if err != nil {
		return fmt.Errorf("lsm: open local pebble %s: %w", db.pebbleDir, err)
	}
	db.pdb = p
	db.changes.Add(1)
	return nil
}

func (db *DB) localAppliedSeq() (uint64, error) {
	v, ok, err := db.Get(KeyAppliedSeq)
	if err != nil || !ok {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("lsm: local %q has %d bytes", KeyAppliedSeq, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// recover brings Dir/pebble to the newest durable state (or to manifest
// pinSeq when pinned).
func (db *DB) recover(ctx context.Context, pinSeq uint64, pinned bool) error {
	o := &db.opts
	manifests, err := listSeqs(ctx, o.Store, manifestPrefix)
	if err != nil {
		return err
	}
	var mseq uint64
	if pinned {
		found := false
		for _, s := range manifests {
			found = found || s == pinSeq
		}
		if !found {
			return fmt.Errorf("lsm: %s: %w", manifestKey(pinSeq), objstore.ErrNotFound)
		}
		mseq = pinSeq
	} else if len(manifests) > 0 {
		mseq = manifests[len(manifests)-1]
	}
	var run []uint64 // contiguous journals after mseq
	if !pinned {
		journals, err := listSeqs(ctx, o.Store, journalPrefix)
		if err != nil {
			return err
		}
		expect := mseq + 1
		for i, s := range journals {
			if s <= mseq {
				continue
			}
			if s != expect {
				msg := fmt.Sprintf("journal gap: %s is missing but %s exists", journalKey(expect), journalKey(s))
				if !o.ReadOnly {
					return fmt.Errorf("lsm: %w: %s; refusing to write over that history", ErrCorrupt, msg)
				}
				o.Logger.Warn("lsm: "+msg+"; replay stops at the gap", "later", len(journals)-i)
				break
			}
			run = append(run, s)
			expect++
		}
	}
	newest := mseq
	if len(run) > 0 {
		newest = run[len(run)-1]
	}

	if !pinned && db.tryFastRestart(ctx, mseq, newest, run) {
		return nil
	}

	// Full recovery from the store.
	if err := os.RemoveAll(db.pebbleDir); err != nil {
		return fmt.Errorf("lsm: wipe %s: %w", db.pebbleDir, err)
	}
	if err := removeMarker(o.Dir); err != nil {
		return fmt.Errorf("lsm: %w", err)
	}
	if err := os.MkdirAll(db.pebbleDir, 0o700); err != nil {
		return fmt.Errorf("lsm: %w", err)
	}
	if err := db.loadManifest(ctx, mseq); err != nil {
		return err
	}
	failpoint.Hit("lsm.recover.manifest-loaded")
	if err := db.replay(ctx, run); err != nil {
		return err
	}
	failpoint.Hit("lsm.recover.journals-replayed")
	return nil
}

// loadManifest builds db.pebbleDir from manifest mseq (0: an empty
// database) and opens it.
func (db *DB) loadManifest(ctx context.Context, mseq uint64) error {
	if mseq > 0 {
		m, err := db.fetchManifest(ctx, mseq)
		if err != nil {
			return err
		}
		if err := db.materialise(ctx, m); err != nil {
			return err
		}
		for _, t := range m.Tables {
			db.mu.shipped[t.Name] = t.Object
		}
		db.mu.latestManifest = mseq
	}
	if err := db.openPebble(mseq > 0); err != nil {
		return err
	}
	if mseq > 0 {
		got, err := db.localAppliedSeq()
		if err != nil {
			return err
		}
		if got != mseq {
			return fmt.Errorf("lsm: %w: %s: checkpoint contains journal %d, manifest claims %d", ErrCorrupt, manifestKey(mseq), got, mseq)
		}
		db.mu.appliedSeq, db.mu.nextSeq = mseq, mseq+1
	}
	return nil
}

// tryFastRestart reopens Dir/pebble as it is when a clean-shutdown marker
// says it holds journal A with mseq <= A <= newest; journals after A are
// replayed. It returns false (having closed anything it opened) when the
// local state cannot be used.
func (db *DB) tryFastRestart(ctx context.Context, mseq, newest uint64, run []uint64) bool {
	o := &db.opts
	mk, err := readMarker(o.Dir)
	if err != nil {
		o.Logger.Warn("lsm: ignoring local state", "err", err)
		return false
	}
	if mk == nil {
		return false
	}
	if mk.UUID != fmt.Sprintf("%x", o.Keys.UUID) || mk.Applied < mseq || mk.Applied > newest {
		o.Logger.Info("lsm: local state does not match the store; full recovery",
			"local_applied", mk.Applied, "store_manifest", mseq, "store_newest", newest)
		return false
	}
	// From here on the local state is about to change: the marker goes first.
	if err := removeMarker(o.Dir); err != nil {
		o.Logger.Warn("lsm: cannot remove clean-shutdown marker", "err", err)
		return false
	}
	if err := db.openPebble(true); err != nil {
		o.Logger.Warn("lsm: fast restart failed; full recovery", "err", err)
		return false
	}
	fail := func(msg string, err error) bool {
		o.Logger.Warn("lsm: fast restart failed; full recovery", "step", msg, "err", err)
		db.closeMu.Lock()
		_ = db.pdb.Close()
		db.pdb = nil
		db.closeMu.Unlock()
		db.mu.appliedSeq, db.mu.nextSeq, db.mu.latestManifest = 0, 1, 0
		db.mu.shipped = map[string]string{}
		return false
	}
	got, err := db.localAppliedSeq()
	if err != nil || got != mk.Applied {
		return fail("applied seq", fmt.Errorf("local %d, marker %d, err %v", got, mk.Applied, err))
	}
	db.mu.appliedSeq, db.mu.nextSeq, db.mu.latestManifest = got, got+1, mseq
	// Keep only the shipped tables the newest manifest still references:
	// metadata GC may have deleted the others.
	if mseq > 0 && !o.ReadOnly {
		if m, err := db.fetchManifest(ctx, mseq); err == nil {
			for _, t := range m.Tables {
				if mk.Shipped[t.Name] == t.Object {
					db.mu.shipped[t.Name] = t.Object
				}
			}
		} else {
			o.Logger.Warn("lsm: cannot read newest manifest; all tables will be re-shipped", "err", err)
		}
	}
	var tail []uint64
	for _, s := range run {
		if s > got {
			tail = append(tail, s)
		}
	}
	if err := db.replay(ctx, tail); err != nil {
		return fail("replay", err)
	}
	o.Logger.Info("lsm: fast restart from local state", "applied_seq", got, "replayed", len(tail))
	return true
}

// materialise writes a manifest's files into the (empty) pebble dir.
func (db *DB) materialise(ctx context.Context, m *Manifest) error {
	for _, t := range m.Tables {
		sealed, err := db.getObject(ctx, t.Object)
		if err != nil {
			return fmt.Errorf("lsm: %s references %s: %w", manifestKey(m.Seq), t.Object, err)
		}
		plain, err := openSST(db.opts.Keys, t.Object, sealed)
		if err != nil {
			return err
		}
		if int64(len(plain)) != t.Size {
			return fmt.Errorf("lsm: %w: %s: %d bytes, %s says %d", ErrCorrupt, t.Object, len(plain), manifestKey(m.Seq), t.Size)
		}
		if err := os.WriteFile(filepath.Join(db.pebbleDir, t.Name), plain, 0o600); err != nil {
			return fmt.Errorf("lsm: %w", err)
		}
	}
	for _, f := range m.Files {
		if err := os.WriteFile(filepath.Join(db.pebbleDir, f.Name), f.Data, 0o600); err != nil {
			return fmt.Errorf("lsm: %w", err)
		}
	}
	return nil
}

// replay applies journal objects seqs (ascending, contiguous) in order.
func (db *DB) replay(ctx context.Context, seqs []uint64) error {
	for _, seq := range seqs {
		sealed, err := db.getObject(ctx, journalKey(seq))
		if err != nil {
			return err
		}
		j, err := openJournal(db.opts.Keys, seq, sealed)
		if err != nil {
			return err
		}
		if err := db.applyJournal(j); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) applyJournal(j Journal) error {
	name := journalKey(j.Seq)
	err := db.withPebble(func(p *pebble.DB) error {
		for i, repr := range j.Batches {
			b := p.NewBatch()
			if err := b.SetRepr(bytes.Clone(repr)); err != nil {
				b.Close()
				return fmt.Errorf("%w: %s: batch %d: %v", ErrCorrupt, name, i, err)
			}
			err := p.Apply(b, pebble.NoSync)
			b.Close()
			db.changes.Add(1)
			if err != nil {
				return fmt.Errorf("lsm: replay %s batch %d: %w", name, i, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if db.ro.Load() && !db.pinned && j.Manifest < j.Seq {
		// A follower's state is now past that manifest: its reader
		// checkpoint may pin it instead of an older one.
		db.mu.Lock()
		db.mu.latestManifest = max(db.mu.latestManifest, j.Manifest)
		db.mu.Unlock()
	}
	return db.setAppliedSeq(j.Seq)
}

// startEpoch creates this writer's epoch-start journal object at the next
// sequence. Losing put-if-absent means a fenced writer got there first:
// its object is replayed (it may have acknowledged it) and the next
// sequence is tried, until this writer owns one.
func (db *DB) startEpoch(ctx context.Context) error {
	for range 10000 {
		seq := db.mu.nextSeq
		key := journalKey(seq)
		sealed := sealJournal(db.opts.Keys, Journal{Seq: seq, Epoch: db.epoch.Load()})
		var lost bool
		err := db.retry(ctx, "put "+key, func() error {
			_, err := db.opts.Store.Put(ctx, key, sealed, objstore.PutOptions{IfAbsent: true})
			if objstore.IsPreconditionFailed(err) {
				cur, gerr := db.opts.Store.Get(ctx, key)
				if gerr != nil {
					return gerr
				}
				if bytes.Equal(cur, sealed) {
					return nil
				}
				j, oerr := openJournal(db.opts.Keys, seq, cur)
				if oerr != nil {
					return oerr
				}
				if aerr := db.applyJournal(j); aerr != nil {
					return aerr
				}
				lost = true
				db.opts.Logger.Warn("lsm: replayed a journal object written by a previous writer during takeover", "journal", key, "its_epoch", j.Epoch)
				return nil
			}
			return err
		}, func(err error) bool { return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrClosed) })
		if err != nil {
			return fmt.Errorf("lsm: epoch-start journal %s: %w", key, err)
		}
		if lost {
			continue
		}
		if err := db.setAppliedSeq(seq); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("lsm: epoch-start journal: another writer keeps writing journals")
}
