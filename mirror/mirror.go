// Package mirror keeps a continuous copy of a filesystem's store in a
// second store: every object the writer makes durable (segments,
// journals, manifests, tables, checkpoint records, the descriptor) is
// copied as it is (sealed bytes, never decrypted but for the metadata
// that names objects), in commit order, bounded in bandwidth, resuming
// from a position kept in the mirror store. It follows the writer's
// journals like a replica, so it lists the source only for its first
// full copy and after a gap. Deletions reach the mirror after a
// retention, so any durable point within it stays openable.
package mirror

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// Defaults of Options.
const (
	DefaultRetention          = 7 * 24 * time.Hour
	DefaultPollInterval       = time.Second
	DefaultSaveInterval       = 10 * time.Second
	DefaultCheckpointInterval = time.Minute
	DefaultConcurrency        = 4
	// gapAfter: a journal the writer keeps for 5 minutes cannot have been
	// deleted unseen if the mirror was caught up less than this long ago.
	gapAfter = 150 * time.Second
	// readAhead bounds the journals fetched before their objects are
	// copied, and the bytes they name.
	readAhead      = 64
	readAheadBytes = 128 << 20
	retryAfter     = 5 * time.Second
)

// Options configure a Mirror. Zero values mean the defaults above.
type Options struct {
	Source, Dest objstore.Store
	Keys         *keys.Keys
	Clock        clock.Clock
	// Retention is how long a deletion waits before it reaches the mirror.
	Retention time.Duration
	// Bandwidth bounds the bytes copied per second (0: unbounded).
	Bandwidth          int64
	PollInterval       time.Duration
	SaveInterval       time.Duration
	CheckpointInterval time.Duration
	Concurrency        int
	Log                *slog.Logger
	// HoldName, if set, names the ephemeral record the mirror keeps in the
	// source (hold.go, HoldName); HoldTTL is its lifetime (default
	// checkpoint.DefaultReaderTTL).
	HoldName string
	HoldTTL  time.Duration
}

func (o *Options) ensureDefaults() {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.SaveInterval <= 0 {
		o.SaveInterval = DefaultSaveInterval
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Mirror copies one store into another. Pass does one round; Start runs
// rounds in a worker until Close.
type Mirror struct {
	opts  Options
	ss    stateStore
	st    *State
	lim   *limiter
	stats Stats

	dirty     bool
	savedMono time.Duration
	scanMono  time.Duration // next checkpoint scan
	scanned   bool
	// caughtMono is when a probe last found nothing newer (-1: never in
	// this process): the gap check lists the source only past gapAfter.
	caughtMono time.Duration
	copied     map[uint64]bool // segments copied by this process (recent)
	// finalProbed is the newest journal whose covering manifest was asked
	// for (probeFinalManifest).
	finalProbed uint64
	finishing   bool // Finish's last rounds
	// resuming: until the first round that catches up after Open, copies
	// of segments and tables look in the mirror store first.
	resuming bool

	hold   *hold
	w      *worker.Worker
	mu     sync.Mutex // guards status
	status Status
}

// Open reads the mirror's position from the mirror store.
func Open(ctx context.Context, o Options) (*Mirror, error) {
	o.ensureDefaults()
	if o.Source == nil || o.Dest == nil || o.Keys == nil {
		return nil, errors.New("mirror: a source, a destination and the keys are needed")
	}
	m := &Mirror{opts: o, ss: stateStore{dst: o.Dest}, caughtMono: -1, copied: map[uint64]bool{}, resuming: true}
	st, err := m.ss.load(ctx)
	if err != nil {
		return nil, err
	}
	uuid := fmt.Sprintf("%x", o.Keys.UUID[:])
	if st.UUID != "" && st.UUID != uuid {
		return nil, fmt.Errorf("mirror: the mirror store holds a mirror of filesystem %s, not of %s", st.UUID, uuid)
	}
	st.UUID = uuid
	var inst [8]byte
	_, _ = rand.Read(inst[:])
	st.Instance = fmt.Sprintf("%x", inst)
	m.st = st
	m.lim = newLimiter(o.Clock, o.Bandwidth)
	m.publish()
	return m, nil
}

// Start writes the mirror's hold on the source and runs the mirror in a
// background worker.
func (m *Mirror) Start(ctx context.Context) error {
	if err := m.startHold(ctx); err != nil {
		return err
	}
	m.w = worker.Start("mirror", m.opts.Clock, m.loop)
	return nil
}

func (m *Mirror) loop(w *worker.Worker) {
	var lastLog time.Duration = -time.Hour
	for {
		more, err := m.Pass(w.Context())
		wait := m.opts.PollInterval
		if more {
			wait = 0
		}
		if err != nil && w.Context().Err() == nil {
			m.stats.Errors.Add(1)
			m.setError(err)
			if now := m.opts.Clock.Mono(); now-lastLog >= time.Minute {
				m.opts.Log.Warn("mirror: a round failed; retrying", "err", err, "retry_in", retryAfter)
				lastLog = now
			}
			if errors.Is(err, ErrOtherMirror) {
				m.opts.Log.Error("mirror: stopped", "err", err)
				return
			}
			wait = retryAfter
		} else if err == nil {
			m.setError(nil)
		}
		if wait > 0 && !w.Wait(wait) {
			return
		}
		if w.Closed() {
			return
		}
	}
}

// Close stops the worker (if started) and saves the position.
func (m *Mirror) Close(ctx context.Context) error {
	if m.w != nil {
		m.w.Close()
	}
	m.stopHold()
	if !m.dirty {
		return nil
	}
	return m.save(ctx)
}

// Finish stops the worker, runs a last round (a writer's mirror after
// the writer's final barrier and manifest) and saves the position.
func (m *Mirror) Finish(ctx context.Context) error {
	if m.w != nil {
		m.w.Close()
	}
	m.scanned = false // records made since the last scan
	m.finishing = true
	for {
		more, err := m.Pass(ctx)
		if err != nil {
			_ = m.Close(ctx)
			return err
		}
		if !more {
			break
		}
	}
	return m.Close(ctx)
}

// Done is closed when the worker stopped by itself (another mirror
// process took over the mirror store) or was closed.
func (m *Mirror) Done() <-chan struct{} {
	if m.w == nil {
		return nil
	}
	return m.w.Done()
}

// Pass runs one round: the first full copy if it is not done, then the
// journals the source has made durable since the last round, checkpoint
// records and the descriptor when their interval is up, the deletions that
// are due, and the position when it is due for saving. more reports that
// the source has more to copy right away.
func (m *Mirror) Pass(ctx context.Context) (more bool, err error) {
	defer m.publish()
	if !m.st.Synced {
		if err := m.fullSync(ctx); err != nil {
			return false, err
		}
	}
	more, err = m.follow(ctx)
	if err != nil {
		return false, err
	}
	now := m.opts.Clock.Mono()
	if !m.scanned || now >= m.scanMono {
		if err := m.scanCheckpoints(ctx); err != nil {
			return false, err
		}
		m.scanned, m.scanMono = true, now+m.opts.CheckpointInterval
	}
	if err := m.runDeletes(ctx); err != nil {
		return false, err
	}
	if m.dirty && now-m.savedMono >= m.opts.SaveInterval {
		if err := m.save(ctx); err != nil {
			return false, err
		}
	}
	return more, nil
}

func (m *Mirror) save(ctx context.Context) error {
	if err := m.ss.save(ctx, m.st); err != nil {
		return err
	}
	m.dirty = false
	m.savedMono = m.opts.Clock.Mono()
	m.stats.StateSaves.Add(1)
	return nil
}

// State returns a copy of the position (tests).
func (m *Mirror) State() State {
	s := *m.st
	return s
}
