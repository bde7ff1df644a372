package objstore

import (
	"context"
	"errors"
	"fmt"
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
// the caller cancelled says nothing about the store. A store that does
// not answer at all (a stopped server, a dropped network) fails nothing
// until a timeout, so a request waiting for StallAfter with no answer to
// any request meanwhile counts as unreachable too.
type Timed struct {
	s          Store
	ops        *stats.Ops
	stallAfter time.Duration // StallAfter (tests shorten it)

	health struct {
		sync.Mutex
		failingSince time.Time // zero: the last request got an answer
		lastErr      string
		lastAnswer   time.Time              // the last request that got an answer
		inflight     map[uint64]inflightReq // requests sent, not yet answered
		seq          uint64
	}
}

type inflightReq struct {
	op    string
	start time.Time
}

// StallAfter is how long a request waits without any answer from the store
// before Health calls the store unreachable.
const StallAfter = 15 * time.Second

// Health reports since when the store has been failing every request, or
// answering none (zero: it answers), and the last error.
func (t *Timed) Health() (failingSince time.Time, lastErr string) {
	t.health.Lock()
	defer t.health.Unlock()
	if !t.health.failingSince.IsZero() {
		return t.health.failingSince, t.health.lastErr
	}
	now := time.Now()
	var oldest inflightReq
	for _, r := range t.health.inflight {
		if oldest.start.IsZero() || r.start.Before(oldest.start) {
			oldest = r
		}
	}
	if oldest.start.IsZero() || now.Sub(oldest.start) < t.stallAfter || now.Sub(t.health.lastAnswer) < t.stallAfter {
		return time.Time{}, ""
	}
	since := oldest.start
	if t.health.lastAnswer.After(since) {
		since = t.health.lastAnswer
	}
	return since, fmt.Sprintf("no answer to a %s request for %s", oldest.op, now.Sub(oldest.start).Round(time.Second))
}

// begin records a request sent; its result goes to end.
func (t *Timed) begin(op string) uint64 {
	t.health.Lock()
	defer t.health.Unlock()
	if t.health.inflight == nil {
		t.health.inflight = map[uint64]inflightReq{}
	}
	t.health.seq++
	t.health.inflight[t.health.seq] = inflightReq{op: op, start: time.Now()}
	return t.health.seq
}

// note records one request's outcome for Health.
func (t *Timed) note(id uint64, failed bool, err error) {
	t.health.Lock()
	defer t.health.Unlock()
	delete(t.health.inflight, id)
	// The caller giving up says nothing of the store; a transport timeout
	// (which also matches DeadlineExceeded) does, and wraps ErrUnavailable.
	if failed && !IsUnavailable(err) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	if !failed {
		t.health.failingSince, t.health.lastErr = time.Time{}, ""
		t.health.lastAnswer = time.Now()
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
func NewTimed(s Store) *Timed {
	return &Timed{s: s, ops: stats.NewOps(TimedOps...), stallAfter: StallAfter}
}

// Unwrap returns the wrapped store.
func (t *Timed) Unwrap() Store { return t.s }

// Ops returns the per-operation tallies.
func (t *Timed) Ops() *stats.Ops { return t.ops }

func (t *Timed) done(id uint64, op string, start time.Time, n int, err error) {
	failed := err != nil && !IsNotFound(err)
	t.ops.Get(op).Done(start, n, failed)
	t.note(id, failed, err)
}

// Put implements Store.
func (t *Timed) Put(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	start, id := time.Now(), t.begin("put")
	etag, err := t.s.Put(ctx, key, data, opts)
	// A lost conditional Put is an answer too (fencing, put-if-absent).
	failed := err != nil && !IsPreconditionFailed(err)
	t.ops.Get("put").Done(start, len(data), failed)
	t.note(id, failed, err)
	return etag, err
}

// Get implements Store.
func (t *Timed) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return nil, err
	}
	start, id := time.Now(), t.begin("get")
	b, err := t.s.Get(ctx, key)
	t.done(id, "get", start, len(b), err)
	return b, err
}

// GetRange implements Store.
func (t *Timed) GetRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return nil, err
	}
	start, id := time.Now(), t.begin("get_range")
	b, err := t.s.GetRange(ctx, key, off, length)
	t.done(id, "get_range", start, len(b), err)
	return b, err
}

// ReadRange implements RangeReader; it counts as a get_range.
func (t *Timed) ReadRange(ctx context.Context, key string, off int64, dst []byte) error {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return err
	}
	start, id := time.Now(), t.begin("get_range")
	err := ReadRange(ctx, t.s, key, off, dst)
	n := 0
	if err == nil {
		n = len(dst)
	}
	t.done(id, "get_range", start, n, err)
	return err
}

// ReadSpan implements SpanReader; it counts as a get_range.
func (t *Timed) ReadSpan(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return nil, err
	}
	start, id := time.Now(), t.begin("get_range")
	data, err := ReadSpan(ctx, t.s, key, off, n, buf)
	t.done(id, "get_range", start, len(data), err)
	return data, err
}

// Head implements Store.
func (t *Timed) Head(ctx context.Context, key string) (ObjectInfo, error) {
	start, id := time.Now(), t.begin("head")
	info, err := t.s.Head(ctx, key)
	t.done(id, "head", start, 0, err)
	return info, err
}

// Delete implements Store.
func (t *Timed) Delete(ctx context.Context, key string) error {
	start, id := time.Now(), t.begin("delete")
	err := t.s.Delete(ctx, key)
	t.done(id, "delete", start, 0, err)
	return err
}

// DeleteMany implements Store.
func (t *Timed) DeleteMany(ctx context.Context, keys []string) error {
	start, id := time.Now(), t.begin("delete_many")
	err := t.s.DeleteMany(ctx, keys)
	t.done(id, "delete_many", start, 0, err)
	return err
}

// List implements Store.
func (t *Timed) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	start, id := time.Now(), t.begin("list")
	p, err := t.s.List(ctx, prefix, startAfter, limit)
	t.done(id, "list", start, 0, err)
	return p, err
}
