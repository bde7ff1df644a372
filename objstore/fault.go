package objstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Op names a Store operation, for fault rules.
type Op string

// The operations a Rule can match.
const (
	OpPut        Op = "put"
	OpGet        Op = "get"
	OpGetRange   Op = "get_range"
	OpHead       Op = "head"
	OpDelete     Op = "delete"
	OpDeleteMany Op = "delete_many"
	OpList       Op = "list"
)

// ErrInjected is what a Rule with Fail and no Err returns (wrapped, along
// with ErrUnavailable: a transient failure).
var ErrInjected = errors.New("objstore: injected fault")

// Rule says which operations a Faulty store disturbs and how.
//
// A rule matches an operation when its Ops contain it (empty: every
// operation) and its key starts with Prefix (for List: the listed prefix;
// for DeleteMany: any of the keys). Of the matching operations, the first
// Skip pass untouched; after that, Count of them are disturbed (0: no
// limit), each by, in order: a Latency delay, a Stall until the context
// ends (the operation then fails with the context's error and is not
// performed), and an error: Err, or ErrInjected when Fail is set. With
// Applied the operation is performed before its error is returned, like a
// request whose response was lost.
type Rule struct {
	Ops     []Op
	Prefix  string
	Skip    int
	Count   int
	Latency time.Duration
	Stall   bool
	Err     error
	Fail    bool
	Applied bool
}

// Faulty is a Store decorator that injects errors, latency and stalls, for
// fault-loop tests:
//
//	f := objstore.NewFaulty(objstore.NewMem())
//	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: "segments/", Fail: true, Count: 1})
//	f.Outage(30 * time.Second) // every operation fails with ErrUnavailable
//	f.Clear()                  // back to normal
//
// Rules apply in the order added; every matching rule disturbs the
// operation and the first error ends it. A rule's Err is returned wrapped
// (errors.Is finds it); Fail returns ErrInjected, which also wraps
// ErrUnavailable, as does an outage. Safe for concurrent use.
type Faulty struct {
	s   Store
	now func() time.Time
	mu  struct {
		sync.Mutex
		rules     []*ruleState
		nextID    int
		outageEnd time.Time
	}
}

type ruleState struct {
	id    int
	r     Rule
	seen  int // matching operations so far
	fired int // operations disturbed
}

var _ Store = (*Faulty)(nil)

// NewFaulty wraps s with no rules.
func NewFaulty(s Store) *Faulty { return &Faulty{s: s, now: time.Now} }

// Unwrap returns the wrapped store.
func (f *Faulty) Unwrap() Store { return f.s }

// AddRule adds r and returns its id for Fired and RemoveRule.
func (f *Faulty) AddRule(r Rule) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.nextID++
	f.mu.rules = append(f.mu.rules, &ruleState{id: f.mu.nextID, r: r})
	return f.mu.nextID
}

// RemoveRule removes the rule with id; unknown ids are ignored.
func (f *Faulty) RemoveRule(id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, rs := range f.mu.rules {
		if rs.id == id {
			f.mu.rules = append(f.mu.rules[:i], f.mu.rules[i+1:]...)
			return
		}
	}
}

// Fired returns how many operations the rule with id has disturbed.
func (f *Faulty) Fired(id int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rs := range f.mu.rules {
		if rs.id == id {
			return rs.fired
		}
	}
	return 0
}

// Outage makes every operation fail with ErrUnavailable, without reaching
// the wrapped store, for d from now (wall clock). Outage(0) ends one.
func (f *Faulty) Outage(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.outageEnd = f.now().Add(d)
}

// Clear removes every rule and ends any outage.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.rules = nil
	f.mu.outageEnd = time.Time{}
}

// plan is what to do to one operation.
type plan struct {
	latency time.Duration
	stall   bool
	err     error
	applied bool
}

func (f *Faulty) planFor(op Op, keys []string) plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p plan
	if f.now().Before(f.mu.outageEnd) {
		p.err = fmt.Errorf("objstore: injected outage: %w", ErrUnavailable)
		return p
	}
	for _, rs := range f.mu.rules {
		if !rs.matches(op, keys) {
			continue
		}
		rs.seen++
		if rs.seen <= rs.r.Skip || (rs.r.Count > 0 && rs.fired >= rs.r.Count) {
			continue
		}
		rs.fired++
		p.latency += rs.r.Latency
		p.stall = p.stall || rs.r.Stall
		if err := rs.r.err(); err != nil {
			p.err, p.applied = err, rs.r.Applied
			break
		}
	}
	return p
}

func (r Rule) err() error {
	switch {
	case r.Err != nil:
		return fmt.Errorf("objstore: injected: %w", r.Err)
	case r.Fail:
		return fmt.Errorf("%w: %w", ErrInjected, ErrUnavailable)
	}
	return nil
}

func (rs *ruleState) matches(op Op, keys []string) bool {
	if len(rs.r.Ops) > 0 {
		found := false
		for _, o := range rs.r.Ops {
			if o == op {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if rs.r.Prefix == "" {
		return true
	}
	for _, k := range keys {
		if strings.HasPrefix(k, rs.r.Prefix) {
			return true
		}
	}
	return false
}

// before applies latency and stalls; it returns the error to fail with
// before the operation, or the plan for after it.
func (f *Faulty) before(ctx context.Context, op Op, keys ...string) (plan, error) {
	p := f.planFor(op, keys)
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, fmt.Errorf("%s: %w", op, ctx.Err())
		case <-t.C:
		}
	}
	if p.stall {
		<-ctx.Done()
		return p, fmt.Errorf("%s: stalled: %w", op, ctx.Err())
	}
	if p.err != nil && !p.applied {
		return p, fmt.Errorf("%s %s: %w", op, describeKeys(keys), p.err)
	}
	return p, nil
}

func describeKeys(keys []string) string {
	switch len(keys) {
	case 0:
		return "(no keys)"
	case 1:
		return keys[0]
	}
	return fmt.Sprintf("%s (+%d more)", keys[0], len(keys)-1)
}

func (p plan) after(op Op, key string) error {
	if p.err != nil && p.applied {
		return fmt.Errorf("%s %s (applied, response lost): %w", op, key, p.err)
	}
	return nil
}

// Put implements Store.
func (f *Faulty) Put(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	p, err := f.before(ctx, OpPut, key)
	if err != nil {
		return "", err
	}
	etag, err := f.s.Put(ctx, key, data, opts)
	if err != nil {
		return "", err
	}
	if err := p.after(OpPut, key); err != nil {
		return "", err
	}
	return etag, nil
}

// Get implements Store.
func (f *Faulty) Get(ctx context.Context, key string) ([]byte, error) {
	p, err := f.before(ctx, OpGet, key)
	if err != nil {
		return nil, err
	}
	b, err := f.s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := p.after(OpGet, key); err != nil {
		return nil, err
	}
	return b, nil
}

// GetRange implements Store.
func (f *Faulty) GetRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	p, err := f.before(ctx, OpGetRange, key)
	if err != nil {
		return nil, err
	}
	b, err := f.s.GetRange(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	if err := p.after(OpGetRange, key); err != nil {
		return nil, err
	}
	return b, nil
}

// Head implements Store.
func (f *Faulty) Head(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := f.before(ctx, OpHead, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	info, err := f.s.Head(ctx, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	if err := p.after(OpHead, key); err != nil {
		return ObjectInfo{}, err
	}
	return info, nil
}

// Delete implements Store.
func (f *Faulty) Delete(ctx context.Context, key string) error {
	p, err := f.before(ctx, OpDelete, key)
	if err != nil {
		return err
	}
	if err := f.s.Delete(ctx, key); err != nil {
		return err
	}
	return p.after(OpDelete, key)
}

// DeleteMany implements Store.
func (f *Faulty) DeleteMany(ctx context.Context, keys []string) error {
	p, err := f.before(ctx, OpDeleteMany, keys...)
	if err != nil {
		return err
	}
	if err := f.s.DeleteMany(ctx, keys); err != nil {
		return err
	}
	return p.after(OpDeleteMany, describeKeys(keys))
}

// List implements Store.
func (f *Faulty) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	p, err := f.before(ctx, OpList, prefix)
	if err != nil {
		return ListPage{}, err
	}
	page, err := f.s.List(ctx, prefix, startAfter, limit)
	if err != nil {
		return ListPage{}, err
	}
	if err := p.after(OpList, prefix); err != nil {
		return ListPage{}, err
	}
	return page, nil
}
