package objstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/stats"
)

// Timed is a Store decorator that records every request's latency and
// failures by operation (put, get, get_range, head, delete, delete_many,
// list) into a stats.Ops. A NotFound answer is a result, not a failure;
// every other error counts as one. It is cheap enough to stay in
// production (/metrics serves it).
//
// It also tracks the store's health: since when requests have been
// failing (none has succeeded since) and the last error, for "store
// unreachable since ..." in status, the monitor and /metrics. A request
// the caller cancelled says nothing about the store.
type Timed struct {
	s   Store
	ops *stats.Ops

	health struct {
		sync.Mutex
		failingSince time.Time // zero: the last request got an answer
		lastErr      string
	}
}

// Health reports since when the store has been failing every request
// (zero: it answers) and the last error.
func (t *Timed) Health() (failingSince time.Time, lastErr string) {
	t.health.Lock()
	defer t.health.Unlock()
	return t.health.failingSince, t.health.lastErr
}

// note records one request's outcome for Health.
func (t *Timed) note(failed bool, err error) {
	if failed && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	t.health.Lock()
	defer t.health.Unlock()
	if !failed {
		t.health.failingSince, t.health.lastErr = time.Time{}, ""
		return
	}
	if t.health.failingSince.IsZero() {
		t.health.failingSince = time.Now()
	}
	t.health.lastErr = err.Error()
}

var (
	_ Store       = (*Timed)(nil)
	_ RangeReader = (*Timed)(nil)
)

// TimedOps are the operation names Timed records.
var TimedOps = []string{"put", "get", "get_range", "head", "delete", "delete_many", "list"}

// NewTimed wraps s.
func NewTimed(s Store) *Timed { return &Timed{s: s, ops: stats.NewOps(TimedOps...)} }

// Unwrap returns the wrapped store.
func (t *Timed) Unwrap() Store { return t.s }

// Ops returns the per-operation tallies.
func (t *Timed) Ops() *stats.Ops { return t.ops }

func (t *Timed) done(op string, start time.Time, n int, err error) {
	failed := err != nil && !IsNotFound(err)
	t.ops.Get(op).Done(start, n, failed)
	t.note(failed, err)
}

// Put implements Store.
func (t *Timed) Put(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	start := time.Now()
	etag, err := t.s.Put(ctx, key, data, opts)
	// A lost conditional Put is an answer too (fencing, put-if-absent).
	failed := err != nil && !IsPreconditionFailed(err)
	t.ops.Get("put").Done(start, len(data), failed)
	t.note(failed, err)
	return etag, err
}

// Get implements Store.
func (t *Timed) Get(ctx context.Context, key string) ([]byte, error) {
	start := time.Now()
	b, err := t.s.Get(ctx, key)
	t.done("get", start, len(b), err)
	return b, err
}

// GetRange implements Store.
func (t *Timed) GetRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	start := time.Now()
	b, err := t.s.GetRange(ctx, key, off, length)
	t.done("get_range", start, len(b), err)
	return b, err
}

// ReadRange implements RangeReader; it counts as a get_range.
func (t *Timed) ReadRange(ctx context.Context, key string, off int64, dst []byte) error {
	start := time.Now()
	err := ReadRange(ctx, t.s, key, off, dst)
	n := 0
	if err == nil {
		n = len(dst)
	}
	t.done("get_range", start, n, err)
	return err
}

// Head implements Store.
func (t *Timed) Head(ctx context.Context, key string) (ObjectInfo, error) {
	start := time.Now()
	info, err := t.s.Head(ctx, key)
	t.done("head", start, 0, err)
	return info, err
}

// Delete implements Store.
func (t *Timed) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := t.s.Delete(ctx, key)
	t.done("delete", start, 0, err)
	return err
}

// DeleteMany implements Store.
func (t *Timed) DeleteMany(ctx context.Context, keys []string) error {
	start := time.Now()
	err := t.s.DeleteMany(ctx, keys)
	t.done("delete_many", start, 0, err)
	return err
}

// List implements Store.
func (t *Timed) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	start := time.Now()
	p, err := t.s.List(ctx, prefix, startAfter, limit)
	t.done("list", start, 0, err)
	return p, err
}
