package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/nbd"
	"ebbfs.dev/ebbfs/objstore"
)

// A standby (`ebbfs run --standby`) is a replica that watches the writer's
// liveness and becomes the writer in place when the writer has shown no
// sign of life for [ha] takeover_after (README "Standby writers"). Signs
// of life: a new journal applied by the follow loop, or a change of the
// lease's epoch or heartbeat, both seen on this process's monotonic clock
// (no clocks are compared). Until the writer has answered its
// announcement (armed), the writer heartbeats only every LeaseTTL/3, so
// the standby waits the lease TTL as `run` would.

// standby is the watcher of a standby process.
type standby struct {
	p      *process
	log    *slog.Logger
	after  time.Duration
	entry  lsm.StandbyEntry
	follow func() func() // starts the follow loop, returns its stop
	w      *worker.Worker

	mu struct {
		sync.Mutex
		st telemetry.HAStatus
	}

	// The loop's own state (only its goroutine touches it).
	stopFollow  func()
	lastApplied uint64
	lifeMono    time.Time // monotonic reading of the last sign of life
	seen        lsm.Lease
	seenTag     string
	announcedAt time.Time // when the entry was last written
	announced   lsm.Lease // the record our announcement wrote
	armed       bool

	// rejoin: once fenced, this writer turns into a standby (started
	// with --standby, or [ha] rejoin); rejoinTried is
	// when it last tried.
	rejoin      bool
	rejoinTried time.Time

	// planned is a promote request (ebbfs promote) under way.
	planned  *plannedPromote
	requests chan *plannedPromote
}

// plannedPromote is one `ebbfs promote`: the loop asks the writer for a
// handover and takes the lease once the writer released it for us.
type plannedPromote struct {
	start     time.Time
	requested bool
	done      chan PromoteResult
}

// PromoteResult is what POST /v1/promote answers.
type PromoteResult struct {
	// TookSec is the time from the request to this process accepting
	// writes: an upper bound of the time writes waited.
	TookSec float64 `json:"took_seconds"`
	Epoch   uint64  `json:"epoch"`
	Error   string  `json:"error,omitempty"`
}

// startStandby starts the watcher of a standby, or of a writer (which
// hands over when a standby asks); the follow loop is its to stop and
// start again.
func startStandby(p *process, follow func() func(), rejoin bool, log *slog.Logger) *standby {
	host, _ := os.Hostname()
	s := &standby{p: p, log: log, after: p.c.HA.TakeoverAfter.D(), follow: follow, rejoin: rejoin,
		entry: lsm.StandbyEntry{ID: readerCheckpointName(p.c, ""), Holder: fmt.Sprintf("ebbfs run --standby pid %d on %s", os.Getpid(), host),
			TakeoverAfterMS: p.c.HA.TakeoverAfter.D().Milliseconds(), Renewal: uint64(time.Now().UnixNano())}}
	s.mu.st = telemetry.HAStatus{Role: p.e.Role(), TakeoverAfterSec: s.after.Seconds()}
	s.requests = make(chan *plannedPromote)
	if p.e.Promotable() {
		s.stopFollow = follow()
	}
	s.lifeMono = time.Now()
	s.w = worker.Start("standby", nil, s.loop)
	return s
}

func (s *standby) close() {
	s.w.Close()
	if p := s.planned; p != nil {
		p.done <- PromoteResult{Error: "the process is stopping"}
	}
	if s.stopFollow != nil {
		s.stopFollow()
	}
	if s.p.stopReader != nil {
		s.p.stopReader()
	}
	if s.p.e.Promotable() {
		// Still a standby: the writer need not heartbeat for it any more.
		ctx, cancel := context.WithTimeout(objstore.WithPurpose(context.Background(), objstore.PurposeHeartbeat), 10*time.Second)
		defer cancel()
		if _, _, _, err := lsm.AnnounceStandby(ctx, s.p.st, s.entry, true); err != nil {
			s.log.Warn("standby: could not remove its entry from the lease; the writer heartbeats for it until the entry expires", "err", err)
		}
	}
}

// status is the standby's telemetry.HAStatus now.
func (s *standby) status() telemetry.HAStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.st
	if st.Role == "standby" && !st.LastSignOfLife.IsZero() {
		st.SinceSignOfLifeSec = time.Since(st.LastSignOfLife).Seconds()
	}
	return st
}

func (s *standby) every() time.Duration { return max(s.after/4, 500*time.Millisecond) }

func (s *standby) loop(w *worker.Worker) {
	ctx := w.Context()
	for {
		wait := 250 * time.Millisecond // a writer looks for a handover request in memory
		switch {
		case s.p.e.Promotable() && s.planned != nil:
			s.plannedStep(ctx)
			wait = 100 * time.Millisecond
		case s.p.e.Promotable():
			s.check(ctx)
			wait = s.every()
		case s.p.e.Role() == "writer":
			if id := s.p.e.DB().HandoverRequested(); id != "" {
				s.handOver(ctx, id)
			}
		case s.p.e.Role() == "fenced" && s.rejoin && time.Since(s.rejoinTried) >= rejoinRetry:
			s.rejoinAfterFence(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case p := <-s.requests:
			switch {
			case s.planned != nil:
				p.done <- PromoteResult{Error: "a promote is under way already"}
			case !s.p.e.Promotable():
				p.done <- PromoteResult{Error: "this process is not a standby (role " + s.p.e.Role() + ")"}
			default:
				s.planned = p
			}
		case <-w.After(wait):
		}
	}
}

// requestPromote is POST /v1/promote: a planned switch-over to this
// standby.
func (s *standby) requestPromote(ctx context.Context) PromoteResult {
	p := &plannedPromote{start: time.Now(), done: make(chan PromoteResult, 1)}
	select {
	case s.requests <- p:
	case <-ctx.Done():
		return PromoteResult{Error: ctx.Err().Error()}
	}
	select {
	case r := <-p.done:
		return r
	case <-ctx.Done():
		return PromoteResult{Error: "gave up waiting: " + ctx.Err().Error()}
	}
}

// plannedStep runs a promote request one step: ask the writer, then take
// the lease it released for us.
func (s *standby) plannedStep(ctx context.Context) {
	p := s.planned
	finish := func(r PromoteResult) {
		s.planned = nil
		p.done <- r
	}
	rctx := objstore.WithPurpose(ctx, objstore.PurposeHeartbeat)
	if !p.requested {
		if _, _, err := lsm.RequestHandover(rctx, s.p.st, s.entry.ID); err != nil {
			finish(PromoteResult{Error: err.Error()})
			return
		}
		p.requested = true
		s.log.Info("standby: asked the writer for a handover (ebbfs promote)")
		return
	}
	l, tag, found, err := lsm.ReadLeaseTag(rctx, s.p.st)
	switch {
	case err != nil || !found:
		if time.Since(p.start) > 2*time.Minute {
			finish(PromoteResult{Error: fmt.Sprintf("reading the lease: %v", err)})
		}
		return
	case l.Released && l.HandoverTo == s.entry.ID:
	case l.HandoverTo != s.entry.ID:
		finish(PromoteResult{Error: "another standby asked for the handover, or a new writer took over"})
		return
	case time.Since(p.start) > 2*time.Minute:
		finish(PromoteResult{Error: "the writer did not hand over within 2 minutes (is it reachable, and is it making its writes durable?)"})
		return
	default:
		return
	}
	s.seen, s.seenTag = l, tag
	if !s.takeOver(ctx) {
		finish(PromoteResult{Error: "the takeover after the handover failed: " + s.status().LastError})
		return
	}
	took := time.Since(p.start)
	s.mu.Lock()
	s.mu.st.HandoverSec = took.Seconds()
	s.mu.Unlock()
	finish(PromoteResult{TookSec: took.Seconds(), Epoch: s.p.e.DB().Epoch()})
}

// handOver is a writer's answer to a standby's promote: stop
// reclamation, make everything durable, release the lease for it, and
// follow as a standby.
func (s *standby) handOver(ctx context.Context, id string) {
	s.log.Warn("a standby asked for a handover (ebbfs promote); refusing writes, making everything durable, releasing the lease", "to", id)
	bg := s.p.bg.Swap(nil)
	bg.close(s.log)
	pause, err := s.p.e.Demote(ctx, id)
	if err != nil {
		s.log.Error("handover failed; still the writer", "err", err)
		s.setErr("handover: " + err.Error())
		if nb, berr := startBackground(s.p.c, s.p.e, s.p.st, s.p.k, s.p.triggers, s.p.src.Cleaner, s.log); berr == nil {
			s.p.bg.Store(nb)
		}
		return
	}
	s.becomeStandby(ctx, pause.Seconds())
	s.log.Warn("handed over; this process is a standby now", "to", id, "writes_refused_for", pause.Round(time.Millisecond))
}

// becomeStandby starts what a standby runs once this process stopped
// being the writer (a handover, or a rejoin after fencing): its reader
// checkpoint (which pins what it reads), the follow loop, and the
// watcher's fresh state (it announces itself at its next check).
func (s *standby) becomeStandby(ctx context.Context, handoverSec float64) {
	if s.p.stopReader == nil {
		s.p.stopReader = sync.OnceFunc(startReaderCheckpoint(ctx, s.p.c, "", s.p.e, s.p.st, s.log))
	}
	s.seen, s.seenTag, s.lastApplied, s.armed = lsm.Lease{}, "", 0, false
	s.announcedAt = time.Time{}
	s.stopFollow = s.follow()
	s.alive()
	s.mu.Lock()
	s.mu.st.Role, s.mu.st.HandoverSec, s.mu.st.LastError = "standby", handoverSec, ""
	s.mu.Unlock()
}

// rejoinRetry is how often a fenced writer that could not rejoin yet
// (the store out of reach) tries again.
const rejoinRetry = 5 * time.Second

// rejoinAfterFence turns this fenced writer (another writer took the
// lease while it was paused or cut off) into a standby in place: its
// reclamation stops, the engine drops what no journal took and rebuilds
// its metadata from the store (fs.Engine.Rejoin), and it follows the new
// writer, announces itself, and may be promoted again.
func (s *standby) rejoinAfterFence(ctx context.Context) {
	s.rejoinTried = time.Now()
	if bg := s.p.bg.Swap(nil); bg != nil {
		s.log.Warn("fenced: another writer took over; stopping reclamation and rejoining as a standby")
		bg.close(s.log)
	}
	start := time.Now()
	if err := s.p.e.Rejoin(ctx); err != nil {
		s.log.Warn("fenced writer: cannot rejoin as a standby yet; will retry", "err", err, "retry_in", rejoinRetry)
		s.setErr("rejoin: " + err.Error())
		return
	}
	s.becomeStandby(ctx, 0)
	s.mu.Lock()
	s.mu.st.Rejoins++
	s.mu.Unlock()
	s.log.Warn("fenced writer rejoined as a standby; following the new writer", "took", time.Since(start).Round(time.Millisecond))
}

// alive records a sign of life now.
func (s *standby) alive() {
	s.lifeMono = time.Now()
	s.mu.Lock()
	s.mu.st.LastSignOfLife = s.lifeMono
	s.mu.Unlock()
}

// check looks for signs of life once, announces this standby when needed,
// and takes over when the writer has been silent too long. It reports
// whether this process is now the writer.
func (s *standby) check(ctx context.Context) bool {
	e := s.p.e
	if a := e.DB().AppliedSeq(); a != s.lastApplied {
		if s.lastApplied != 0 {
			s.alive()
		}
		s.lastApplied = a
	}
	rctx := objstore.WithPurpose(ctx, objstore.PurposeHeartbeat)
	l, tag, found, err := lsm.ReadLeaseTag(rctx, s.p.st)
	if err != nil || !found {
		s.setErr(fmt.Sprintf("reading the lease: %v (found %v)", err, found))
		return false
	}
	if l.Epoch != s.seen.Epoch || !l.Heartbeat.Equal(s.seen.Heartbeat) {
		if s.seen.Epoch != 0 && !l.Released {
			s.alive()
		}
		if l.Epoch != s.seen.Epoch && s.seen.Epoch != 0 {
			s.log.Info("standby: a new writer holds the lease; following it", "writer", l.Holder, "epoch", l.Epoch)
			s.armed = false
		}
	}
	if s.seen.Epoch == 0 {
		s.alive() // the first look: the clock starts now
	}
	s.seen, s.seenTag = l, tag
	listed := false
	for _, sb := range l.Standbys {
		listed = listed || sb.ID == s.entry.ID
	}
	if listed && (l.Epoch != s.announced.Epoch || !l.Heartbeat.Equal(s.announced.Heartbeat)) && !s.armed {
		s.armed = true
		s.log.Info("standby: the writer heartbeats for this standby; armed", "writer", l.Holder, "takeover_after", s.after)
	}
	if !listed || time.Since(s.announcedAt) >= lsm.StandbyRenewEvery {
		s.announce(rctx, listed)
	}
	s.mu.Lock()
	s.mu.st.Writer, s.mu.st.Epoch, s.mu.st.Armed, s.mu.st.LastError = l.Holder, l.Epoch, s.armed, ""
	s.mu.Unlock()

	wait := s.after
	if s.seen.Released && s.seen.HandoverTo != "" && s.seen.HandoverTo != s.entry.ID {
		wait = 2 * s.after // handed over to another standby: give it time
	}
	if !s.armed && !s.seen.Released {
		wait = lsm.DefaultLeaseTTL + s.after // the writer does not know of us yet
	}
	if time.Since(s.lifeMono) < wait {
		return false
	}
	return s.takeOver(ctx)
}

// announce writes (or renews) this standby's entry in the lease.
func (s *standby) announce(ctx context.Context, listed bool) {
	if listed {
		s.entry.Renewal++
	}
	l, tag, _, err := lsm.AnnounceStandby(ctx, s.p.st, s.entry, false)
	if err != nil {
		s.log.Warn("standby: cannot announce itself in the lease; will retry", "err", err)
		return
	}
	s.announced, s.announcedAt = l, time.Now()
	s.seen, s.seenTag = l, tag
	if !listed {
		s.log.Info("standby: announced to the writer", "writer", l.Holder, "epoch", l.Epoch)
	}
}

// takeOver promotes this process; false when another standby won or
// the writer showed life.
func (s *standby) takeOver(ctx context.Context) bool {
	silent := time.Since(s.lifeMono)
	s.log.Warn("standby: no sign of life from the writer; taking over", "writer", s.seen.Holder, "epoch", s.seen.Epoch,
		"silent_for", silent.Round(time.Millisecond), "takeover_after", s.after)
	if s.stopFollow != nil {
		s.stopFollow()
	}
	s.stopFollow = nil
	start := time.Now()
	err := s.p.e.Promote(ctx, s.seen, s.seenTag)
	if errors.Is(err, lsm.ErrLeaseMoved) {
		s.log.Info("standby: the lease moved (the writer is alive, or another standby won); following on")
		s.stopFollow = s.follow()
		s.alive()
		return false
	}
	if err != nil && s.p.e.DB().Epoch() == 0 {
		s.setErr(err.Error())
		s.log.Error("standby: takeover failed; still a standby", "err", err)
		s.stopFollow = s.follow()
		return false
	}
	for err != nil {
		// The lease is ours: finish, or nobody writes.
		s.setErr(err.Error())
		s.log.Error("standby: holding the lease but not writing yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return true
		case <-time.After(time.Second):
		}
		err = s.p.e.FinishPromotion(ctx)
	}
	s.p.promoted(s.log)
	s.mu.Lock()
	s.mu.st.Role, s.mu.st.Failovers, s.mu.st.Promoted, s.mu.st.LastError = "writer", s.mu.st.Failovers+1, time.Now(), ""
	s.mu.st.Epoch, s.mu.st.Writer = s.p.e.DB().Epoch(), ""
	s.mu.Unlock()
	s.log.Warn("standby: this process is now the writer", "epoch", s.p.e.DB().Epoch(), "took", time.Since(start).Round(time.Millisecond),
		"writer_silent_for", time.Since(s.lifeMono).Round(time.Millisecond))
	return true
}

func (s *standby) setErr(msg string) {
	s.mu.Lock()
	s.mu.st.LastError = msg
	s.mu.Unlock()
}

// standbyID is a standby's entry in the lease: its reader checkpoint's
// name, stable for one host and cache directory. A writer that may rejoin
// as a standby once fenced has one too (so that, promoted again, it does
// not heartbeat for itself).
func standbyID(o Options) string {
	if !o.Standby && (o.ReadOnly || !o.Config.HA.Rejoin) {
		return ""
	}
	return readerCheckpointName(o.Config, "")
}

// promoted starts what a writer runs beside the engine once a standby
// became the writer: the reclamation stages (their deadlines start over,
// as a restarted writer's do, from the checkpoint records the other
// readers keep), /.nbd, the end of this process's reader checkpoint, and
// the [mirror] if the config has one.
func (p *process) promoted(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := nbd.EnsureExportDir(ctx, p.e); err != nil {
		log.Warn("could not create /.nbd", "err", err)
	}
	bg, err := startBackground(p.c, p.e, p.st, p.k, p.triggers, p.src.Cleaner, log)
	if err != nil {
		log.Error("promoted writer: reclamation did not start; space is not reclaimed until a restart", "err", err)
	} else {
		p.bg.Store(bg)
	}
	if p.stopReader != nil {
		p.stopReader()
	}
	if p.mirror.Load() == nil {
		// The writer keeps the [mirror] (a process that handed over and
		// runs its mirror still, or a second mirror process into the
		// same store, keeps it instead: the mirror's state is saved
		// conditionally, and the later one is refused).
		if err := p.startMirror(log); err != nil {
			log.Error("promoted writer: mirror not started; run ebbfs mirror run, or restart the writer, to resume it", "err", err)
		}
	}
}

// haStatus is the process's role for status, the monitor and /metrics.
func (p *process) haStatus() telemetry.HAStatus {
	if sb := p.standby.Load(); sb != nil {
		st := sb.status()
		// The engine turns writer inside Promote, a moment before the
		// standby counts the failover: until it has, report the
		// standby's own view, so role and failovers agree.
		if role := p.e.Role(); role != "writer" || st.Role != "standby" {
			st.Role = role
		}
		if st.Role == "writer" || st.Role == "fenced" {
			p.writerHA(&st)
		}
		return st
	}
	st := telemetry.HAStatus{Role: p.e.Role()}
	if st.Role == "writer" || st.Role == "fenced" {
		p.writerHA(&st)
	}
	return st
}

func (p *process) writerHA(st *telemetry.HAStatus) {
	db := p.e.DB()
	st.Epoch = db.Epoch()
	st.HeartbeatEverySec = db.HeartbeatEvery().Seconds()
	for _, sb := range db.Standbys() {
		st.Standbys = append(st.Standbys, sb.Holder)
	}
	if err := db.Fenced(); err != nil {
		st.LastError = err.Error()
	}
}

// RoutePromote is `ebbfs promote`'s request to a standby.
const RoutePromote = "/v1/promote"

// haRoutes registers POST /v1/promote.
func (p *process) haRoutes(s *admin.Server) {
	s.HandleJSON("POST "+RoutePromote, func(r *http.Request) (any, error) {
		sb := p.standby.Load()
		if sb == nil || !p.e.Promotable() {
			return nil, &admin.StatusError{Code: http.StatusConflict, Err: fmt.Errorf("this process is not a standby (role %s); run ebbfs promote against a standby", p.e.Role())}
		}
		res := sb.requestPromote(r.Context())
		if res.Error != "" {
			return nil, &admin.StatusError{Code: http.StatusConflict, Err: errors.New(res.Error)}
		}
		return res, nil
	})
}
