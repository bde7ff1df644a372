package objstore

import (
	"context"
	"strings"
	"sync"
)

// Counts is a tally of requests by kind and of payload bytes. Failed
// requests count too: they cost a round trip all the same.
type Counts struct {
	Put        int64
	Get        int64
	GetRange   int64
	Head       int64
	Delete     int64
	DeleteMany int64 // calls
	// DeletedObjects counts the keys passed to DeleteMany.
	DeletedObjects int64
	List           int64
	BytesUp        int64 // Put payloads
	BytesDown      int64 // Get and GetRange results
}

// Requests is the total number of calls of every kind.
func (c Counts) Requests() int64 {
	return c.Put + c.Get + c.GetRange + c.Head + c.Delete + c.DeleteMany + c.List
}

// Sub returns c - o, for the requests sent between two snapshots.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		Put: c.Put - o.Put, Get: c.Get - o.Get, GetRange: c.GetRange - o.GetRange,
		Head: c.Head - o.Head, Delete: c.Delete - o.Delete, DeleteMany: c.DeleteMany - o.DeleteMany,
		DeletedObjects: c.DeletedObjects - o.DeletedObjects, List: c.List - o.List,
		BytesUp: c.BytesUp - o.BytesUp, BytesDown: c.BytesDown - o.BytesDown,
	}
}

func (c *Counts) add(o Counts) {
	c.Put += o.Put
	c.Get += o.Get
	c.GetRange += o.GetRange
	c.Head += o.Head
	c.Delete += o.Delete
	c.DeleteMany += o.DeleteMany
	c.DeletedObjects += o.DeletedObjects
	c.List += o.List
	c.BytesUp += o.BytesUp
	c.BytesDown += o.BytesDown
}

// Map returns the counts by their log names (put, get, get_range, head,
// delete, delete_many, deleted_objects, list, bytes_up, bytes_down).
func (c Counts) Map() map[string]int64 {
	return map[string]int64{
		"put": c.Put, "get": c.Get, "get_range": c.GetRange, "head": c.Head,
		"delete": c.Delete, "delete_many": c.DeleteMany, "deleted_objects": c.DeletedObjects,
		"list": c.List, "bytes_up": c.BytesUp, "bytes_down": c.BytesDown,
	}
}

// Counting is a Store decorator that counts the requests passing through
// it, in total and per directory prefix. It is safe for concurrent use and
// cheap enough to stay in production (the reclamation cycle logs its
// per-cycle requests from it).
//
// Per-prefix counts are kept for every directory a key or a List prefix
// lies in: a Get of "segments/3f/x" counts under "", "segments/" and
// "segments/3f/"; a List of "segments/3f/" (or "segments/3") under "",
// "segments/" and that exact prefix. So CountsFor("segments/") answers
// "how many LISTs of segments/ were sent", with memory bounded by the
// number of directories, not of keys. A DeleteMany counts one call under
// each directory it touches, and its objects in theirs.
type Counting struct {
	s  Store
	mu struct {
		sync.Mutex
		by map[string]*Counts // "" is the total
	}
}

var _ Store = (*Counting)(nil)

// NewCounting wraps s.
func NewCounting(s Store) *Counting {
	c := &Counting{s: s}
	c.mu.by = map[string]*Counts{}
	return c
}

// Unwrap returns the wrapped store.
func (c *Counting) Unwrap() Store { return c.s }

// Snapshot returns the totals so far.
func (c *Counting) Snapshot() Counts { return c.CountsFor("") }

// CountsFor returns the counts for requests under prefix. For "" or a
// prefix ending in "/" it is exact; for a List prefix it is that prefix's
// List calls plus the totals of the directories that start with it.
func (c *Counting) CountsFor(prefix string) Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out Counts
	if p := c.mu.by[prefix]; p != nil {
		out = *p
	}
	if prefix == "" || strings.HasSuffix(prefix, "/") {
		return out
	}
	// A partial prefix ("segments/3"): add the topmost directories it
	// covers ("segments/3f/"), whose counts include their subdirectories.
	for k, v := range c.mu.by {
		if !strings.HasSuffix(k, "/") || !strings.HasPrefix(k, prefix) {
			continue
		}
		parent := k[:strings.LastIndex(k[:len(k)-1], "/")+1]
		if strings.HasPrefix(parent, prefix) {
			continue
		}
		out.add(*v)
	}
	return out
}

// Reset zeroes every count.
func (c *Counting) Reset() {
	c.mu.Lock()
	c.mu.by = map[string]*Counts{}
	c.mu.Unlock()
}

// dirs returns "" and every directory prefix of key ("a/", "a/b/").
func dirs(key string) []string {
	out := []string{""}
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			out = append(out, key[:i+1])
		}
	}
	return out
}

func (c *Counting) addFor(prefixes []string, d Counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range prefixes {
		cur := c.mu.by[p]
		if cur == nil {
			cur = &Counts{}
			c.mu.by[p] = cur
		}
		cur.add(d)
	}
}

// Put implements Store.
func (c *Counting) Put(ctx context.Context, key string, data []byte, opts PutOptions) (string, error) {
	c.addFor(dirs(key), Counts{Put: 1, BytesUp: int64(len(data))})
	return c.s.Put(ctx, key, data, opts)
}

// Get implements Store.
func (c *Counting) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return nil, err
	}
	b, err := c.s.Get(ctx, key)
	c.addFor(dirs(key), Counts{Get: 1, BytesDown: int64(len(b))})
	return b, err
}

// GetRange implements Store.
func (c *Counting) GetRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return nil, err
	}
	b, err := c.s.GetRange(ctx, key, off, length)
	c.addFor(dirs(key), Counts{GetRange: 1, BytesDown: int64(len(b))})
	return b, err
}

var _ RangeReader = (*Counting)(nil)

// ReadRange implements RangeReader (with the wrapped store's ReadRange if it
// has one); it counts as a GetRange.
func (c *Counting) ReadRange(ctx context.Context, key string, off int64, dst []byte) error {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return err
	}
	err := ReadRange(ctx, c.s, key, off, dst)
	d := Counts{GetRange: 1}
	if err == nil {
		d.BytesDown = int64(len(dst))
	}
	c.addFor(dirs(key), d)
	return err
}

// ReadSpan implements SpanReader (with the wrapped store's ReadSpan if it
// has one); it counts as a GetRange.
func (c *Counting) ReadSpan(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil { // not sent: not a request
		return nil, err
	}
	data, err := ReadSpan(ctx, c.s, key, off, n, buf)
	d := Counts{GetRange: 1}
	if err == nil {
		d.BytesDown = int64(n)
	}
	c.addFor(dirs(key), d)
	return data, err
}

// Head implements Store.
func (c *Counting) Head(ctx context.Context, key string) (ObjectInfo, error) {
	c.addFor(dirs(key), Counts{Head: 1})
	return c.s.Head(ctx, key)
}

// Delete implements Store.
func (c *Counting) Delete(ctx context.Context, key string) error {
	c.addFor(dirs(key), Counts{Delete: 1})
	return c.s.Delete(ctx, key)
}

// DeleteMany implements Store.
func (c *Counting) DeleteMany(ctx context.Context, keys []string) error {
	per := map[string]int64{}
	for _, k := range keys {
		for _, d := range dirs(k) {
			per[d]++
		}
	}
	c.mu.Lock()
	total := c.mu.by[""]
	if total == nil {
		total = &Counts{}
		c.mu.by[""] = total
	}
	total.DeleteMany++
	for d, n := range per {
		cur := c.mu.by[d]
		if cur == nil {
			cur = &Counts{}
			c.mu.by[d] = cur
		}
		if d != "" {
			cur.DeleteMany++
		}
		cur.DeletedObjects += n
	}
	c.mu.Unlock()
	return c.s.DeleteMany(ctx, keys)
}

// List implements Store.
func (c *Counting) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	ps := dirs(prefix)
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		ps = append(ps, prefix)
	}
	c.addFor(ps, Counts{List: 1})
	return c.s.List(ctx, prefix, startAfter, limit)
}
