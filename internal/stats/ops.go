package stats

import (
	"sync"
	"sync/atomic"
	"time"
)

// Op is the tally of one kind of operation: how many, how many failed,
// bytes moved, and their latency.
type Op struct {
	n, errs, bytes atomic.Uint64
	lat            *Histogram
}

// Done records one operation that started at start and moved n bytes.
func (o *Op) Done(start time.Time, n int, failed bool) {
	if o == nil {
		return
	}
	o.n.Add(1)
	if failed {
		o.errs.Add(1)
	}
	if n > 0 {
		o.bytes.Add(uint64(n))
	}
	o.lat.Since(start)
}

// OpSnapshot is an Op's state.
type OpSnapshot struct {
	Count   uint64            `json:"count"`
	Errors  uint64            `json:"errors"`
	Bytes   uint64            `json:"bytes"`
	Latency HistogramSnapshot `json:"latency"`
}

// Ops is a set of named operations, created on first use. Safe for
// concurrent use; Get of an existing name takes a read lock only.
type Ops struct {
	mu  sync.RWMutex
	ops map[string]*Op
}

// NewOps returns a set holding the given names (others are added by Get).
func NewOps(names ...string) *Ops {
	s := &Ops{ops: map[string]*Op{}}
	for _, n := range names {
		s.ops[n] = &Op{lat: NewHistogram()}
	}
	return s
}

// Get returns the named operation's tally.
func (s *Ops) Get(name string) *Op {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	o := s.ops[name]
	s.mu.RUnlock()
	if o != nil {
		return o
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o = s.ops[name]; o == nil {
		o = &Op{lat: NewHistogram()}
		s.ops[name] = o
	}
	return o
}

// Snapshot returns every operation's state by name.
func (s *Ops) Snapshot() map[string]OpSnapshot {
	out := map[string]OpSnapshot{}
	if s == nil {
		return out
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, o := range s.ops {
		out[k] = OpSnapshot{Count: o.n.Load(), Errors: o.errs.Load(), Bytes: o.bytes.Load(), Latency: o.lat.Snapshot()}
	}
	return out
}
