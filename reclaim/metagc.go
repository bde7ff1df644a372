package reclaim

// Stage 3 of reclamation: metadata object GC (DESIGN section 7).
//
// A pass deletes meta/manifest/ and meta/sst/ objects that no manifest
// anyone may still open references. The rules, all of which must hold:
//
//   - Reachability: not referenced by the current manifest, by a table
//     this writer has shipped (lsm ReferencedMetaObjects), by any
//     checkpoint's manifest, or by any manifest the pass keeps (at or
//     above the horizon, young, or superseded only recently): a pass
//     never leaves a manifest whose tables are gone.
//   - Horizon: the latest manifest sequence is captured at the start of
//     the pass; only manifests below it are deleted, and only once the
//     manifest that superseded them is itself MetaGCMinAge old (so a
//     checkpoint whose record is written within checkpoint.
//     MaxPublishToRecord of its publication always finds its manifest).
//     SSTs of a newer writer epoch are never touched.
//   - Age: the listing's ModTime is at least MetaGCMinAge old.
//
// Age is a margin on top of reachability, never a reason on its own. Any
// doubt (an unreadable checkpoint list or checkpoint manifest, a failed
// listing, a fenced or read-only DB) makes the pass delete nothing. A pass
// first removes the records of ephemeral checkpoints expired for longer
// than their span (checkpoint.Prune): a killed replica's record would
// otherwise pin its manifest for ever. Names
// the pass does not recognise are kept. Journal objects belong to the
// writer's publication path and are not looked at.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
)

const (
	// DefaultMetaGCInterval is how often the worker runs a pass.
	DefaultMetaGCInterval = 30 * time.Minute
	// MetaGCMinAge is the minimum age (listing ModTime) of a deleted object
	// and of the successor of a deleted manifest. A safety margin, not a
	// tuning knob.
	MetaGCMinAge = time.Minute
	// metaGCPassTimeout bounds one pass.
	metaGCPassTimeout = 10 * time.Minute
	// metaGCRetry is the wait after a failed pass, if shorter than Interval.
	metaGCRetry = 5 * time.Minute

	metaPrefix         = "meta/"
	metaManifestPrefix = "meta/manifest/"
	metaSSTPrefix      = "meta/sst/"
)

// MetaDB is what the metadata GC asks of the writer's metadata store
// (*lsm.DB is one): its writer epoch (0: read-only), whether it lost the
// lease, its latest manifest, the objects a manifest references, and
// those its shipped tables reference.
type MetaDB interface {
	Epoch() uint64
	Fenced() error
	LatestManifest() uint64
	ManifestObjects(ctx context.Context, seq uint64) ([]string, error)
	ReferencedMetaObjects(ctx context.Context) (map[string]bool, error)
}

var _ MetaDB = (*lsm.DB)(nil)

// journalPruner is what a MetaDB may also do: delete the journal objects
// its newest manifest covers (lsm.DB.PruneJournals). A pass asks for it
// after it succeeds, so that journals do not outlive short-lived writers.
type journalPruner interface{ PruneJournals(ctx context.Context) }

var _ journalPruner = (*lsm.DB)(nil)

// MetaGCOptions configure a MetaGC. Zero values take the defaults.
type MetaGCOptions struct {
	Store objstore.Store // required: the filesystem's store
	DB    MetaDB         // required: the writer's metadata store (an *lsm.DB)
	Clock clock.Clock    // default clock.Real
	// Logger gets one info line per pass (default: discard).
	Logger *slog.Logger
	// Interval between passes (default DefaultMetaGCInterval).
	Interval time.Duration
	// StatePath, if set, is the file that keeps the schedule across
	// restarts (metagc_schedule.go; the daemon puts MetaGCStateFile in
	// the cache directory). Without it the first pass is an Interval
	// after Start.
	StatePath string
}

// EnsureDefaults fills in zero fields.
func (o *MetaGCOptions) EnsureDefaults() {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Interval <= 0 {
		o.Interval = DefaultMetaGCInterval
	}
}

// Validate reports missing fields.
func (o *MetaGCOptions) Validate() error {
	switch {
	case o.Store == nil:
		return errors.New("reclaim: MetaGCOptions.Store is required")
	case o.DB == nil:
		return errors.New("reclaim: MetaGCOptions.DB is required")
	}
	return nil
}

// MetaGCStats summarises one pass.
type MetaGCStats struct {
	Deleted int   // objects deleted
	Bytes   int64 // their stored bytes
	Kept    int   // listed meta/manifest/ and meta/sst/ objects kept
}

// MetaGCPass is the outcome of the last pass the worker ran.
type MetaGCPass struct {
	Stats MetaGCStats
	Err   error
	At    time.Time // wall-clock start
}

// MetaGC deletes unreferenced metadata objects, every Interval once
// started, or on demand with RunOnce.
type MetaGC struct {
	o      MetaGCOptions
	optErr error
	runMu  sync.Mutex // one pass at a time

	mu struct {
		sync.Mutex
		started, closed bool
		w               *worker.Worker // the timed passes' loop, once started
		triggered       bool           // Trigger was called before Start
		last            MetaGCPass
		passes          int
		totals          MetaGCTotals
		next            time.Time // wall time of the next timed pass (zero: not started)
		due             time.Time // when the schedule wants the next pass (metagc_schedule.go)
		lastHorizon     uint64    // the newest manifest the last pass saw, plus one (0: unknown)
		// prunable is when the first ephemeral record the last pass saw
		// may be pruned (zero: none): an idle writer's timed passes run
		// again from then on.
		prunable time.Time
	}
}

// NewMetaGC returns a MetaGC that has not started. Invalid options are
// reported by every RunOnce.
func NewMetaGC(o MetaGCOptions) *MetaGC {
	o.EnsureDefaults()
	return &MetaGC{o: o, optErr: o.Validate()}
}

// Start starts the worker: a pass every Interval (sooner after a failed
// one). Starting twice, or after Close, does nothing.
func (g *MetaGC) Start() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.started || g.mu.closed {
		return
	}
	g.mu.started = true
	g.mu.w = worker.Start("reclaim-metagc", g.o.Clock, g.loop)
	if g.mu.triggered {
		g.mu.w.Notify()
	}
}

// Trigger asks the worker for a pass now (without waiting for it); before
// Start, for a pass as soon as it starts.
func (g *MetaGC) Trigger() {
	g.mu.Lock()
	w := g.mu.w
	g.mu.triggered = w == nil
	g.mu.Unlock()
	if w != nil {
		w.Notify()
	}
}

// Close cancels a pass in progress, stops the worker and waits for it.
func (g *MetaGC) Close() {
	g.mu.Lock()
	g.mu.closed = true
	w := g.mu.w
	g.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// MetaGCTotals are cumulative counts over every pass since start.
type MetaGCTotals struct {
	Passes  map[string]uint64 `json:"passes"` // by result: ok, error
	Deleted uint64            `json:"deleted"`
	Bytes   uint64            `json:"bytes"`
}

// Totals returns the cumulative counts and when the next timed pass is due
// (zero if the worker is not running).
func (g *MetaGC) Totals() (MetaGCTotals, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.mu.totals
	t.Passes = map[string]uint64{ResultOK: 0, ResultError: 0}
	for k, v := range g.mu.totals.Passes {
		t.Passes[k] = v
	}
	return t, g.mu.next
}

// LastPass returns the worker's last pass and how many it has run.
func (g *MetaGC) LastPass() (MetaGCPass, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.last, g.mu.passes
}

// loop is the worker: a pass every Interval, or at once when triggered,
// until Close cancels its context (and the pass in progress).
func (g *MetaGC) loop(w *worker.Worker) {
	ctx := w.Context()
	wait := g.firstWait()
	// An idle filesystem sends no requests: once two passes in a row have
	// succeeded at the same manifest horizon, nothing new can have become
	// unreferenced (tables and manifests appear only with a new manifest;
	// a deleted checkpoint calls Trigger), so timed passes are skipped
	// until the horizon moves, or until a reader's record seen by the
	// last pass may have expired for longer than its span (a killed
	// replica's record is then pruned).
	var lastHorizon uint64
	cleanPasses := 0
	for {
		g.mu.Lock()
		g.mu.next = g.o.Clock.Now().Add(wait)
		g.mu.Unlock()
		triggered := false
		select {
		case <-ctx.Done():
			return
		case <-w.Woken():
			if ctx.Err() != nil {
				return
			}
			triggered = true
		case <-w.After(wait):
		}
		horizon := g.o.DB.LatestManifest()
		if horizon != lastHorizon {
			lastHorizon, cleanPasses = horizon, 0
		}
		g.mu.Lock()
		prunable := g.mu.prunable
		g.mu.Unlock()
		if !triggered && cleanPasses >= 2 && (prunable.IsZero() || g.o.Clock.Now().Before(prunable)) {
			wait = g.o.Interval
			continue
		}
		at := g.o.Clock.Now()
		st, err := g.RunOnce(ctx)
		if err == nil {
			cleanPasses++
		} else {
			cleanPasses = 0
		}
		if ctx.Err() != nil {
			return
		}
		g.mu.Lock()
		g.mu.last = MetaGCPass{Stats: st, Err: err, At: at}
		g.mu.passes++
		g.mu.Unlock()
		wait = g.o.Interval
		if err != nil {
			wait = min(wait, metaGCRetry)
		}
	}
}

// RunOnce runs one pass now and returns what it did. On an error the
// pass has deleted nothing, or (for a failure while deleting) only
// objects that were safe to delete; the stats count those.
func (g *MetaGC) RunOnce(ctx context.Context) (MetaGCStats, error) {
	ctx = objstore.WithPurpose(ctx, objstore.PurposeMetaGC)
	if g.optErr != nil {
		return MetaGCStats{}, g.optErr
	}
	g.runMu.Lock()
	defer g.runMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, metaGCPassTimeout)
	defer cancel()
	at := g.o.Clock.Now()
	start := g.o.Clock.Mono()
	p, err := g.plan(ctx)
	var st MetaGCStats
	if err == nil {
		st.Kept = p.listed - len(p.del)
		err = g.delete(ctx, p, &st)
	}
	g.count(st, err)
	if err == nil {
		if jp, ok := g.o.DB.(journalPruner); ok {
			jp.PruneJournals(ctx)
		}
		g.passDone(at, p.horizon)
	}
	log := g.o.Logger.Info
	switch {
	case err != nil:
		log = g.o.Logger.Warn
	case st.Deleted == 0:
		log = g.o.Logger.Debug // a pass that removed nothing is not news
	}
	log("reclaim: metadata gc pass", "deleted", st.Deleted, "bytes", st.Bytes, "kept", st.Kept,
		"horizon", p.horizon, "checkpoints", p.checkpoints, "duration", g.o.Clock.Mono()-start, "err", err)
	return st, err
}

// count adds a pass to the totals.
func (g *MetaGC) count(st MetaGCStats, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.totals.Passes == nil {
		g.mu.totals.Passes = map[string]uint64{}
	}
	res := ResultOK
	if err != nil {
		res = ResultError
	}
	g.mu.totals.Passes[res]++
	g.mu.totals.Deleted += uint64(st.Deleted)
	g.mu.totals.Bytes += uint64(st.Bytes)
}

// metaPlan is what a pass decided to delete.
type metaPlan struct {
	horizon     uint64
	checkpoints int
	listed      int
	del         []objstore.ObjectInfo // manifests (ascending) then SSTs
}

// metaKeep collects, for one planning pass, the metadata objects that
// must stay: those of the manifests checkpoints pin and of the manifests
// that stay.
type metaKeep struct {
	g    *MetaGC
	db   MetaDB
	s    objstore.Store
	keep map[string]bool
	read map[uint64]bool // manifests whose objects are in keep
}

// addManifest keeps the objects of manifest seq; why names it in errors.
func (k *metaKeep) addManifest(ctx context.Context, seq uint64, why string) error {
	if k.read[seq] {
		return nil
	}
	objs, err := k.db.ManifestObjects(ctx, seq)
	if err != nil {
		return fmt.Errorf("reclaim: metadata gc: %s: cannot read manifest %d; deleting nothing: %w", why, seq, err)
	}
	for _, o := range objs {
		k.keep[o] = true
	}
	k.read[seq] = true
	return nil
}

// addCheckpoints keeps the manifests of every checkpoint record, notes
// when the next expired reader record becomes prunable, and counts the
// records in p.
func (k *metaKeep) addCheckpoints(ctx context.Context, p *metaPlan) error {
	recs, err := checkpoint.List(ctx, k.s)
	if err != nil {
		return fmt.Errorf("reclaim: metadata gc: checkpoint list unreadable; deleting nothing: %w", err)
	}
	p.checkpoints = len(recs)
	var prunable time.Time
	for _, r := range recs {
		if at := r.ExpireTime.Add(r.Span()); r.Kind == checkpoint.Ephemeral && !r.ExpireTime.IsZero() && (prunable.IsZero() || at.Before(prunable)) {
			prunable = at
		}
	}
	k.g.mu.Lock()
	k.g.mu.prunable = prunable
	k.g.mu.Unlock()
	for _, r := range recs {
		if err := k.addManifest(ctx, r.ManifestSeq, "checkpoint "+strconv.Quote(r.Name)); err != nil {
			return err
		}
	}
	return nil
}

func (g *MetaGC) plan(ctx context.Context) (metaPlan, error) {
	db, s := g.o.DB, g.o.Store
	var p metaPlan
	if db.Epoch() == 0 {
		return p, errors.New("reclaim: metadata gc runs only in the writer (read-only DB)")
	}
	if err := db.Fenced(); err != nil {
		return p, fmt.Errorf("reclaim: metadata gc: %w", err)
	}
	now := g.o.Clock.Now()
	p.horizon = db.LatestManifest()
	if p.horizon == 0 {
		return p, nil // nothing published yet: nothing can be garbage
	}
	// A reader that stopped renewing long ago (killed, or gone for good)
	// would pin its manifest for ever: its record goes once it has been
	// expired for longer than its span (checkpoint.Prune), after which it
	// protects nothing. A reader that comes back writes a new one.
	pruned, err := checkpoint.Prune(ctx, s, now)
	if len(pruned) > 0 {
		g.o.Logger.Info("reclaim: metadata gc: removed expired reader checkpoints", "names", pruned)
	}
	if err != nil {
		g.o.Logger.Warn("reclaim: metadata gc: pruning expired checkpoints", "err", err)
	}
	k := &metaKeep{g: g, db: db, s: s, keep: map[string]bool{}, read: map[uint64]bool{}}
	keep := k.keep
	if err := k.addCheckpoints(ctx, &p); err != nil {
		return p, err
	}
	manifests, err := objstore.ListAll(ctx, s, metaManifestPrefix)
	if err != nil {
		return p, fmt.Errorf("reclaim: metadata gc: list %s: %w", metaManifestPrefix, err)
	}
	ssts, err := objstore.ListAll(ctx, s, metaSSTPrefix)
	if err != nil {
		return p, fmt.Errorf("reclaim: metadata gc: list %s: %w", metaSSTPrefix, err)
	}
	p.listed = len(manifests) + len(ssts)
	failpoint.Hit("metagc-after-listing")
	// Taken after the listings, so that a table shipped before them is in
	// the writer's shipped set by now.
	ref, err := db.ReferencedMetaObjects(ctx)
	if err != nil {
		return p, fmt.Errorf("reclaim: metadata gc: referenced objects: %w", err)
	}
	for o := range ref {
		keep[o] = true
	}
	type seqObj struct {
		seq uint64
		obj objstore.ObjectInfo
	}
	var seqs []seqObj
	for _, o := range manifests {
		seq, ok := parseMetaSeq(o.Key)
		if !ok {
			continue // not ours to judge
		}
		seqs = append(seqs, seqObj{seq, o})
	}
	// Records written while this pass listed.
	if err := k.addCheckpoints(ctx, &p); err != nil {
		return p, err
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i].seq < seqs[j].seq })
	old := func(o objstore.ObjectInfo) bool {
		return !o.ModTime.IsZero() && now.Sub(o.ModTime) >= MetaGCMinAge
	}
	for i, m := range seqs {
		if m.seq >= p.horizon || keep[m.obj.Key] || !old(m.obj) || i+1 >= len(seqs) || !old(seqs[i+1].obj) {
			// A manifest that stays keeps its tables: no pass leaves a
			// manifest that cannot be opened.
			if err := k.addManifest(ctx, m.seq, "kept manifest"); err != nil {
				return p, err
			}
			continue
		}
		p.del = append(p.del, m.obj)
	}
	epoch := db.Epoch()
	for _, o := range ssts {
		e, ok := parseSSTEpoch(o.Key)
		if !ok || e > epoch || keep[o.Key] || !old(o) {
			continue
		}
		p.del = append(p.del, o)
	}
	return p, nil
}

func (g *MetaGC) delete(ctx context.Context, p metaPlan, st *MetaGCStats) error {
	if len(p.del) == 0 {
		return nil
	}
	if err := g.o.DB.Fenced(); err != nil {
		return fmt.Errorf("reclaim: metadata gc: %w", err)
	}
	for i, o := range p.del {
		if i > 0 {
			failpoint.Hit("metagc-mid")
			if strings.HasPrefix(o.Key, metaSSTPrefix) && !strings.HasPrefix(p.del[i-1].Key, metaSSTPrefix) {
				failpoint.Hit("metagc-between-manifests-and-ssts")
			}
		}
		if err := ctx.Err(); err != nil {
			st.Kept += len(p.del) - i
			return fmt.Errorf("reclaim: metadata gc: stopped after %d of %d deletes: %w", i, len(p.del), err)
		}
		if err := g.o.Store.Delete(ctx, o.Key); err != nil {
			st.Kept += len(p.del) - i
			return fmt.Errorf("reclaim: metadata gc: delete %s: %w", o.Key, err)
		}
		st.Deleted++
		st.Bytes += o.Size
	}
	return nil
}

// Footprint counts the objects and bytes under meta/ (journal, manifests,
// SSTs), for `ebbfs space`.
func (g *MetaGC) Footprint(ctx context.Context) (objects int, bytes int64, err error) {
	if g.optErr != nil {
		return 0, 0, g.optErr
	}
	objs, err := objstore.ListAll(ctx, g.o.Store, metaPrefix)
	if err != nil {
		return 0, 0, fmt.Errorf("reclaim: metadata footprint: %w", err)
	}
	for _, o := range objs {
		bytes += o.Size
	}
	return len(objs), bytes, nil
}

// parseMetaSeq parses meta/manifest/<16 hex digits>.
func parseMetaSeq(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, metaManifestPrefix)
	if !ok || len(rest) != 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(rest, 16, 64)
	return v, err == nil
}

// parseSSTEpoch parses meta/sst/<16 hex epoch>-<local name>.
func parseSSTEpoch(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, metaSSTPrefix)
	if !ok || len(rest) < 18 || rest[16] != '-' {
		return 0, false
	}
	local := rest[17:]
	if strings.ContainsAny(local, "/\\") || local == "." || local == ".." ||
		!(strings.HasSuffix(local, ".sst") || strings.HasSuffix(local, ".blob")) {
		return 0, false
	}
	v, err := strconv.ParseUint(rest[:16], 16, 64)
	return v, err == nil
}
