package segread

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segment/segtest"
)

// testKeys returns fresh keys without running the KDF.
func testKeys(tb testing.TB) *keys.Keys { return segtest.Keys(tb) }

func textExtent(seed uint64, n int) []byte { return segtest.TextExtent(seed, n) }

func randomExtent(n int) []byte { return segtest.RandomExtent(n) }

// countingStore counts requests by kind. (objstore grows its own wrapper;
// this one keeps the package's tests self-contained.)
type countingStore struct {
	objstore.Store
	mu     sync.Mutex
	counts map[string]int
	ranges [][2]int64
}

func newCounting(s objstore.Store) *countingStore {
	return &countingStore{Store: s, counts: map[string]int{}}
}

func (c *countingStore) inc(kind string) {
	c.mu.Lock()
	c.counts[kind]++
	c.mu.Unlock()
}

func (c *countingStore) count(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[kind]
}

func (c *countingStore) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

func (c *countingStore) reset() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.ranges = nil
	c.mu.Unlock()
}

func (c *countingStore) Put(ctx context.Context, key string, data []byte, o objstore.PutOptions) (string, error) {
	c.inc("put")
	return c.Store.Put(ctx, key, data, o)
}

func (c *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	c.inc("get")
	return c.Store.Get(ctx, key)
}

func (c *countingStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	c.inc("getrange")
	c.mu.Lock()
	c.ranges = append(c.ranges, [2]int64{off, n})
	c.mu.Unlock()
	return c.Store.GetRange(ctx, key, off, n)
}

func (c *countingStore) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	c.inc("head")
	return c.Store.Head(ctx, key)
}

func (c *countingStore) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	c.inc("list")
	return c.Store.List(ctx, prefix, after, limit)
}

// buildSegment builds a segment of n extents alternating text and random
// data, returning the object bytes, the frame ids, the plaintexts and the
// pointers.
func buildSegment(tb testing.TB, k *keys.Keys, segID uint64, c segment.Codec, n int) ([]byte, []segment.FrameID, [][]byte, []segment.Pointer) {
	tb.Helper()
	b := segment.NewBuilder(k, segID, c)
	var ids []segment.FrameID
	var plains [][]byte
	var ps []segment.Pointer
	for i := 0; i < n; i++ {
		id := segment.FrameID{Ino: 100 + uint64(i%3), Extent: uint64(i), Gen: 7}
		var p []byte
		if i%2 == 0 {
			p = textExtent(uint64(i), segment.ExtentSize)
		} else {
			p = randomExtent(segment.ExtentSize - i) // also exercises short extents
		}
		ps = append(ps, b.Add(id, p))
		ids = append(ids, id)
		plains = append(plains, p)
	}
	return b.Finish(), ids, plains, ps
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// get is entry's plaintext, for tests.
func (c *memCache) get(seg uint64, off uint32, id segment.FrameID) ([]byte, bool) {
	e := c.entry(seg, off, id)
	if e == nil {
		return nil, false
	}
	return e.data, true
}

// The reads the tests make, each one Request.

func readOf(r *Reader, ctx context.Context, id segment.FrameID, p segment.Pointer) ([]byte, error) {
	res, err := r.Read(ctx, &Request{ID: id, Ptr: p})
	return res.Frame, err
}

func partOf(r *Reader, ctx context.Context, id segment.FrameID, p segment.Pointer, from, to int) ([]byte, error) {
	res, err := r.Read(ctx, &Request{ID: id, Ptr: p, From: from, To: to})
	return res.Frame, err
}

func partTo(r *Reader, ctx context.Context, id segment.FrameID, p segment.Pointer, from, to int, dst []byte) error {
	_, err := r.Read(ctx, &Request{ID: id, Ptr: p, From: from, To: to, Buf: dst})
	return err
}

func runOf(r *Reader, ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) ([][]byte, error) {
	res, err := r.Read(ctx, &Request{IDs: ids, Ptrs: ps})
	return res.Frames, err
}

func runLent(r *Reader, ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) ([][]byte, *Loan, error) {
	res, err := r.Read(ctx, &Request{IDs: ids, Ptrs: ps, Lend: true})
	return res.Frames, res.Loan, err
}

func fill(r *Reader, ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) error {
	_, err := r.Read(ctx, &Request{IDs: ids, Ptrs: ps, Want: Fill})
	return err
}

func runTo(r *Reader, ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, dst [][]byte) error {
	_, err := r.Read(ctx, &Request{IDs: ids, Ptrs: ps, Bufs: dst})
	return err
}

func runToLent(r *Reader, ctx context.Context, ids []segment.FrameID, ps []segment.Pointer, dst [][]byte) ([][]byte, *Loan, error) {
	res, err := r.Read(ctx, &Request{IDs: ids, Ptrs: ps, Bufs: dst, Lend: true})
	return res.Frames, res.Loan, err
}

func sealedOf(r *Reader, ctx context.Context, ps []segment.Pointer) ([][]byte, error) {
	res, err := r.Read(ctx, &Request{Ptrs: ps, Want: Sealed})
	return res.Frames, err
}

func verifiedOf(r *Reader, ctx context.Context, ids []segment.FrameID, ps []segment.Pointer) ([][]byte, error) {
	res, err := r.Read(ctx, &Request{IDs: ids, Ptrs: ps, Want: Verified})
	return res.Frames, err
}

func aheadOf(r *Reader, ctx context.Context, ps []segment.Pointer) bool {
	res, _ := r.Read(ctx, &Request{Ptrs: ps, Want: Ahead})
	return res.Started
}
