package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// DefaultReaderTTL is the default lifetime of a reader's checkpoint.
const DefaultReaderTTL = 3 * time.Minute

// retryAfterFailure is the longest wait after a failed renewal.
const retryAfterFailure = 5 * time.Second

// firstManifestPoll is how often a renewer with no manifest pinned yet
// looks for one: until it has a record, the writer's grace does not know
// of this reader (waiting TTL/3 left a new replica unprotected for a
// minute, and for 13 with a 40-minute TTL).
const firstManifestPoll = time.Second

// RenewerOptions configure a Renewer. Zero values take the defaults.
type RenewerOptions struct {
	Store objstore.Store // required
	// Name of the reader's ephemeral checkpoint (required), e.g.
	// "reader-<host>-<id>". An existing ephemeral record of that name (a
	// previous run of the same reader) is taken over; a persistent one is
	// an error.
	Name string
	// TTL is the record's lifetime (default DefaultReaderTTL). It is
	// renewed every TTL/3.
	TTL time.Duration
	// ManifestSeq returns the manifest the replica's state derives from
	// (required). It is read at Start and at every renewal: when it has
	// moved (the replica reopened at a newer manifest) the record is
	// re-pinned with a new CreateTime, which keeps the span short.
	ManifestSeq func() uint64
	// ViewTime, if set, returns the wall time (this host's clock) at which
	// the state the reader serves was the newest durable state: a
	// following replica's last probe that found nothing newer (zero:
	// unknown). A renewal that finds it later than the record's CreateTime
	// re-pins with CreateTime = ViewTime, so that the span (ExpireTime -
	// CreateTime, which sets the writer's grace) stays about TTL plus the
	// replica's lag instead of growing with the replica's uptime. Without
	// it (a reader of a fixed checkpoint) CreateTime moves only when
	// ManifestSeq does.
	ViewTime func() time.Time
	Clock    clock.Clock  // default clock.Real
	Logger   *slog.Logger // default: discard
}

// EnsureDefaults fills in zero fields.
func (o *RenewerOptions) EnsureDefaults() {
	if o.TTL <= 0 {
		o.TTL = DefaultReaderTTL
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Validate reports missing or invalid fields.
func (o *RenewerOptions) Validate() error {
	switch {
	case o.Store == nil:
		return errors.New("checkpoint: RenewerOptions.Store is required")
	case o.ManifestSeq == nil:
		return errors.New("checkpoint: RenewerOptions.ManifestSeq is required")
	case o.TTL > MaxSpan:
		return fmt.Errorf("checkpoint: reader TTL %v exceeds %v", o.TTL, MaxSpan)
	}
	return ValidName(o.Name)
}

// Renewer keeps a reader's ephemeral checkpoint alive: Start writes it,
// a worker renews it every TTL/3, Close stops the worker and removes it.
type Renewer struct {
	o RenewerOptions
	w *worker.Worker // the renewal worker, once started

	mu struct {
		sync.Mutex
		started, closed bool
		rec             Record // last record written
		lastErr         error
		renewals        int
	}
}

// NewRenewer validates o and returns a Renewer that has not started.
func NewRenewer(o RenewerOptions) (*Renewer, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Renewer{o: o}, nil
}

// Start writes the record and starts the renewal worker. It returns the
// error of the first write, in which case nothing was started. With no
// manifest to pin yet (ManifestSeq returns 0) it writes nothing and the
// worker pins the first manifest ManifestSeq reports.
func (r *Renewer) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.mu.started || r.mu.closed {
		r.mu.Unlock()
		return errors.New("checkpoint: Renewer already started or closed")
	}
	r.mu.Unlock()
	// A filesystem whose writer has published no manifest yet has none to
	// pin: the worker pins the first one the replica learns of.
	var rec Record
	if seq := r.o.ManifestSeq(); seq != 0 {
		var err error
		if rec, err = r.pin(ctx, seq); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return errors.New("checkpoint: Renewer closed during Start")
	}
	r.mu.started, r.mu.rec = true, rec
	r.w = worker.Start("checkpoint-renewer", r.o.Clock, r.loop)
	return nil
}

// Record returns the record last written.
func (r *Renewer) Record() Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.rec
}

// Err returns the error of the last renewal attempt, nil after a success.
func (r *Renewer) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lastErr
}

// Renewals counts successful renewals and re-pins since Start.
func (r *Renewer) Renewals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.renewals
}

// Close stops the worker, waits for it, and removes the record if it is
// still the one this Renewer wrote. It is safe to call more than once.
func (r *Renewer) Close() error {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil
	}
	r.mu.closed = true
	started, mine, w := r.mu.started, r.mu.rec, r.w
	r.mu.Unlock()
	if w != nil {
		w.Close()
	}
	if !started || mine.ManifestSeq == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cur, err := Get(ctx, r.o.Store, r.o.Name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: reader %q: not removed: %w", r.o.Name, err)
	}
	if cur.Kind != Ephemeral || !cur.CreateTime.Equal(mine.CreateTime) || cur.ManifestSeq != mine.ManifestSeq {
		return nil // someone else's now
	}
	if err := r.o.Store.Delete(ctx, Key(r.o.Name)); err != nil {
		return fmt.Errorf("checkpoint: reader %q: not removed: %w", r.o.Name, err)
	}
	return nil
}

// nextWait is the wait before the next renewal: TTL/3, or
// firstManifestPoll while nothing is pinned.
func (r *Renewer) nextWait() time.Duration {
	if r.Record().ManifestSeq == 0 {
		return min(r.o.TTL/3, firstManifestPoll)
	}
	return r.o.TTL / 3
}

func (r *Renewer) loop(w *worker.Worker) {
	wait := r.nextWait()
	for w.Wait(wait) {
		err := r.renew(w.Context())
		r.mu.Lock()
		r.mu.lastErr = err
		if err == nil && r.mu.rec.ManifestSeq != 0 {
			r.mu.renewals++
		}
		r.mu.Unlock()
		wait = r.nextWait()
		if err != nil {
			if w.Closed() {
				return
			}
			r.o.Logger.Warn("checkpoint: reader checkpoint renewal failed; retrying", "name", r.o.Name, "err", err)
			wait = min(wait, retryAfterFailure)
		}
	}
}

// renew runs one renewal: re-pin when the replica moved (a newer
// manifest, or a newer view), otherwise move ExpireTime; a vanished record
// (pruned, or removed by hand) or a span grown too long is re-pinned.
func (r *Renewer) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(objstore.WithPurpose(ctx, objstore.PurposeHeartbeat), max(r.o.TTL/3, time.Second))
	defer cancel()
	cur := r.Record()
	seq := r.o.ManifestSeq()
	if seq == 0 {
		seq = cur.ManifestSeq
	}
	if seq == 0 {
		return nil // no manifest to pin yet
	}
	now := r.o.Clock.Now().UTC()
	view := r.view(now)
	if seq == cur.ManifestSeq && !view.After(cur.CreateTime) {
		err := Renew(ctx, r.o.Store, r.o.Name, r.o.TTL, now)
		if err == nil {
			cur.ExpireTime = now.Add(r.o.TTL)
			r.mu.Lock()
			r.mu.rec = cur
			r.mu.Unlock()
			return nil
		}
		if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalidSpan) {
			return err
		}
		if view.IsZero() || !view.After(cur.CreateTime) {
			view = now // a span that cannot be renewed starts again now
		}
	}
	if view.IsZero() {
		view = now
	}
	rec, err := r.pinAt(ctx, seq, view)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.rec = rec
	r.mu.Unlock()
	return nil
}

// view returns ViewTime (UTC), or zero when it is unset, unknown, in the
// future (another clock's reading) or so old that the span would be
// invalid.
func (r *Renewer) view(now time.Time) time.Time {
	if r.o.ViewTime == nil {
		return time.Time{}
	}
	v := r.o.ViewTime()
	if v.IsZero() || v.After(now) || now.Add(r.o.TTL).Sub(v) > MaxSpan {
		return time.Time{}
	}
	return v.UTC()
}

// pin writes a fresh record pinning seq: put-if-absent, or a conditional
// replacement of an existing ephemeral record of the same name.
func (r *Renewer) pin(ctx context.Context, seq uint64) (Record, error) {
	return r.pinAt(ctx, seq, r.o.Clock.Now().UTC())
}

// pinAt is pin with CreateTime created (ExpireTime is now+TTL).
func (r *Renewer) pinAt(ctx context.Context, seq uint64, created time.Time) (Record, error) {
	now := r.o.Clock.Now().UTC()
	rec := Record{Name: r.o.Name, Kind: Ephemeral, ManifestSeq: seq, CreateTime: created, ExpireTime: now.Add(r.o.TTL)}
	b, err := encodeRecord(rec)
	if err != nil {
		return Record{}, err
	}
	key := Key(r.o.Name)
	opts := objstore.PutOptions{IfAbsent: true}
	old, etag, err := getTagged(ctx, r.o.Store, r.o.Name)
	switch {
	case errors.Is(err, ErrNotFound):
	case errors.Is(err, ErrMalformed):
		return Record{}, fmt.Errorf("checkpoint: reader %q: existing record is malformed; not replacing it: %w", r.o.Name, err)
	case err != nil:
		return Record{}, err
	case old.Kind != Ephemeral:
		return Record{}, fmt.Errorf("checkpoint: reader %q: a %s checkpoint has that name", r.o.Name, old.Kind)
	default:
		opts = objstore.PutOptions{IfMatch: etag}
	}
	if _, err := r.o.Store.Put(ctx, key, b, opts); err != nil {
		return Record{}, fmt.Errorf("checkpoint: reader %q: write record: %w", r.o.Name, err)
	}
	return rec, nil
}
