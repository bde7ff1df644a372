package objstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Request tracing: every store request a process sends, with why it was
// sent (its purpose, a context value set where the work starts), its
// size and its latency, streamed to whoever attached (`ebbfs trace`
// through the admin endpoint). With nobody attached a request costs one
// atomic load more (BenchmarkTracedIdle).

// Purpose says why a store request was sent.
type Purpose string

// The purposes requests are tagged with. A request sent under no
// purpose traces as PurposeOther.
const (
	PurposeBarrier       Purpose = "barrier"        // journal and manifest objects a durability barrier writes
	PurposeSegmentUpload Purpose = "segment_upload" // a new segment (the flusher's, a barrier's or a repack's)
	PurposeReadMiss      Purpose = "read_miss"      // a read of data no cache holds
	PurposeReadAhead     Purpose = "read_ahead"     // data read ahead of a sequential reader
	PurposeRepackGather  Purpose = "repack_gather"  // a repack reading the live frames it moves
	PurposeDeletion      Purpose = "deletion"       // a reclamation cycle deleting dead segments
	PurposeVerification  Purpose = "verification"   // a cycle reading segment directories to check what it frees
	PurposeSweep         Purpose = "sweep"          // the orphan sweep
	PurposeMetaGC        Purpose = "metadata_gc"    // the metadata object GC
	PurposeReplicaPoll   Purpose = "replica_poll"   // a replica asking for the writer's next journal
	PurposeHeartbeat     Purpose = "heartbeat"      // the writer's lease renewal, a reader's checkpoint renewal
	PurposeCheckpoint    Purpose = "checkpoint"     // checkpoint records
	PurposeMetadata      Purpose = "metadata"       // metadata tables, recovery, and other metadata traffic
	PurposeStartup       Purpose = "startup"        // opening the filesystem
	PurposeOther         Purpose = "other"
)

// Purposes lists every purpose, for documentation and flag checks.
var Purposes = []Purpose{PurposeBarrier, PurposeSegmentUpload, PurposeReadMiss, PurposeReadAhead,
	PurposeRepackGather, PurposeDeletion, PurposeVerification, PurposeSweep, PurposeMetaGC,
	PurposeReplicaPoll, PurposeHeartbeat, PurposeCheckpoint, PurposeMetadata, PurposeStartup, PurposeOther}

type purposeKey struct{}

// WithPurpose tags the requests sent under ctx with p (replacing an outer
// purpose: the work closest to the request says why it is sent).
func WithPurpose(ctx context.Context, p Purpose) context.Context {
	return context.WithValue(ctx, purposeKey{}, p)
}

// attached counts the tracers attached to any Traced of the process: the
// hot paths (reads) tag their requests only while it is not zero.
var attached atomic.Int32

// Tracing reports whether a tracer is attached anywhere in the process.
func Tracing() bool { return attached.Load() != 0 }

// TagIfTracing is WithPurpose while a tracer is attached, and ctx itself
// (no allocation: one atomic load) otherwise. For the read path; a
// request already under way when a tracer attaches traces untagged.
func TagIfTracing(ctx context.Context, p Purpose) context.Context {
	if !Tracing() {
		return ctx
	}
	return WithPurpose(ctx, p)
}

// DefaultIfTracing is TagIfTracing for a ctx that has no purpose yet: an
// outer purpose (a repack reading through the segment reader) stays.
func DefaultIfTracing(ctx context.Context, p Purpose) context.Context {
	if !Tracing() {
		return ctx
	}
	if _, ok := ctx.Value(purposeKey{}).(Purpose); ok {
		return ctx
	}
	return WithPurpose(ctx, p)
}

// DefaultPurpose is WithPurpose for a ctx that has no purpose yet.
func DefaultPurpose(ctx context.Context, p Purpose) context.Context {
	if _, ok := ctx.Value(purposeKey{}).(Purpose); ok {
		return ctx
	}
	return WithPurpose(ctx, p)
}

// PurposeOf returns ctx's purpose, PurposeOther if it has none.
func PurposeOf(ctx context.Context) Purpose {
	if p, ok := ctx.Value(purposeKey{}).(Purpose); ok {
		return p
	}
	return PurposeOther
}

// TraceEvent is one store request, answered or failed.
type TraceEvent struct {
	At             time.Time `json:"at"` // when it was sent
	Op             string    `json:"op"` // put, get, get_range, head, delete, delete_many, list
	Purpose        Purpose   `json:"purpose"`
	Key            string    `json:"key"` // the object, or the prefix of a list
	Bytes          int64     `json:"bytes"`
	LatencySeconds float64   `json:"latency_seconds"`
	Error          string    `json:"error,omitempty"`
}

// Traced is a Store decorator that streams each request to the
// subscribers attached with Subscribe. It sends a request on exactly as
// Timed records one (a read whose context has already ended is not a
// request), so that a trace's counts match the request metrics.
type Traced struct {
	s    Store
	subs atomic.Pointer[[]*TraceSub] // nil: nobody attached
	mu   sync.Mutex                  // serialises Subscribe and Close
}

var (
	_ Store       = (*Traced)(nil)
	_ RangeReader = (*Traced)(nil)
	_ SpanReader  = (*Traced)(nil)
)

// NewTraced wraps s.
func NewTraced(s Store) *Traced { return &Traced{s: s} }

// Unwrap returns the wrapped store.
func (t *Traced) Unwrap() Store { return t.s }

// TraceSub is one attached tracer: events arrive on C until Close; when
// it does not keep up, events are dropped and counted, never waited for.
type TraceSub struct {
	t       *Traced
	c       chan TraceEvent
	dropped atomic.Uint64
	once    sync.Once
}

// C returns the events' channel; it is closed by Close.
func (s *TraceSub) C() <-chan TraceEvent { return s.c }

// Dropped returns how many events did not fit in the buffer.
func (s *TraceSub) Dropped() uint64 { return s.dropped.Load() }

// Subscribe attaches a tracer with a buffer of n events.
func (t *Traced) Subscribe(n int) *TraceSub {
	s := &TraceSub{t: t, c: make(chan TraceEvent, max(n, 1))}
	t.mu.Lock()
	defer t.mu.Unlock()
	var next []*TraceSub
	if cur := t.subs.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, s)
	t.subs.Store(&next)
	attached.Add(1)
	return s
}

// Close detaches s and closes its channel.
func (s *TraceSub) Close() {
	s.once.Do(func() {
		t := s.t
		t.mu.Lock()
		defer t.mu.Unlock()
		var next []*TraceSub
		if cur := t.subs.Load(); cur != nil {
			for _, o := range *cur {
				if o != s {
					next = append(next, o)
				}
			}
		}
		if len(next) == 0 {
			t.subs.Store(nil)
		} else {
			t.subs.Store(&next)
		}
		attached.Add(-1)
		close(s.c) // under mu: emit holds it while it sends
	})
}

// emit sends one event to every subscriber without blocking.
func (t *Traced) emit(ctx context.Context, op, key string, start time.Time, n int, err error) {
	ev := TraceEvent{At: start, Op: op, Purpose: PurposeOf(ctx), Key: key, Bytes: int64(n),
		LatencySeconds: time.Since(start).Seconds()}
	if err != nil {
		ev.Error = err.Error()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	subs := t.subs.Load()
	if subs == nil {
		return
	}
	for _, s := range *subs {
		select {
		case s.c <- ev:
		default:
			s.dropped.Add(1)
		}
	}
}

// on reports whether a tracer is attached: the one atomic load a request
// costs when none is.
func (t *Traced) on() bool { return t.subs.Load() != nil }

// Put implements Store.
func (t *Traced) Put(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	if !t.on() {
		return t.s.Put(ctx, key, data, opts)
	}
	start := time.Now()
	etag, err := t.s.Put(ctx, key, data, opts)
	t.emit(ctx, "put", key, start, len(data), err)
	return etag, err
}

// Get implements Store.
func (t *Traced) Get(ctx context.Context, key string) ([]byte, error) {
	if !t.on() || ctx.Err() != nil {
		return t.s.Get(ctx, key)
	}
	start := time.Now()
	b, err := t.s.Get(ctx, key)
	t.emit(ctx, "get", key, start, len(b), err)
	return b, err
}

// GetRange implements Store.
func (t *Traced) GetRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if !t.on() || ctx.Err() != nil {
		return t.s.GetRange(ctx, key, off, length)
	}
	start := time.Now()
	b, err := t.s.GetRange(ctx, key, off, length)
	t.emit(ctx, "get_range", key, start, len(b), err)
	return b, err
}

// ReadRange implements RangeReader; it traces as a get_range.
func (t *Traced) ReadRange(ctx context.Context, key string, off int64, dst []byte) error {
	if !t.on() || ctx.Err() != nil {
		return ReadRange(ctx, t.s, key, off, dst)
	}
	start := time.Now()
	err := ReadRange(ctx, t.s, key, off, dst)
	n := len(dst)
	if err != nil {
		n = 0
	}
	t.emit(ctx, "get_range", key, start, n, err)
	return err
}

// ReadSpan implements SpanReader; it traces as a get_range.
func (t *Traced) ReadSpan(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error) {
	if !t.on() || ctx.Err() != nil {
		return ReadSpan(ctx, t.s, key, off, n, buf)
	}
	start := time.Now()
	data, err := ReadSpan(ctx, t.s, key, off, n, buf)
	t.emit(ctx, "get_range", key, start, len(data), err)
	return data, err
}

// Head implements Store.
func (t *Traced) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if !t.on() {
		return t.s.Head(ctx, key)
	}
	start := time.Now()
	info, err := t.s.Head(ctx, key)
	t.emit(ctx, "head", key, start, 0, err)
	return info, err
}

// Delete implements Store.
func (t *Traced) Delete(ctx context.Context, key string) error {
	if !t.on() {
		return t.s.Delete(ctx, key)
	}
	start := time.Now()
	err := t.s.Delete(ctx, key)
	t.emit(ctx, "delete", key, start, 0, err)
	return err
}

// DeleteMany implements Store.
func (t *Traced) DeleteMany(ctx context.Context, keys []string) error {
	if !t.on() {
		return t.s.DeleteMany(ctx, keys)
	}
	start := time.Now()
	err := t.s.DeleteMany(ctx, keys)
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	t.emit(ctx, "delete_many", key, start, 0, err)
	return err
}

// List implements Store.
func (t *Traced) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if !t.on() {
		return t.s.List(ctx, prefix, startAfter, limit)
	}
	start := time.Now()
	p, err := t.s.List(ctx, prefix, startAfter, limit)
	t.emit(ctx, "list", prefix, start, 0, err)
	return p, err
}
