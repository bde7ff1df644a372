package reclaim

import (
	"bytes"
	"context"
	"math/rand"
	"sort"
	"sync"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// fakeHost is a Host without an engine: the metadata is an in-memory map
// holding pointers and counters in the engine's keys and encodings
// (schema keys, segment.Pointer, lsm counter values), so reclamation reads
// and changes them as it does the engine's; segments are real objects in
// the given store. It counts the calls reclamation makes and can be told
// to fail them.
type fakeHost struct {
	t     testing.TB
	store objstore.Store // where segments are uploaded
	check objstore.Store // where consistent and read look (default: store)
	keys  *keys.Keys

	mu        sync.Mutex
	kv        map[string][]byte
	nextSeg   uint64
	inflight  map[uint64]bool
	fenced    error
	barriers  int
	forgotten []uint64
	relocated int // frames reported relocated
	// clean, if set, replaces CleanTombstones' own transaction.
	clean func(ctx context.Context) (tombs, extents int, bytes int64, err error)
}

var _ Host = (*fakeHost)(nil)

func newFakeHost(t testing.TB, store objstore.Store, k *keys.Keys) *fakeHost {
	// Ids as the engine's: the writer's epoch (here 1) in the high 32
	// bits, so segments of an earlier epoch are below the horizon.
	return &fakeHost{t: t, store: store, check: store, keys: k, kv: map[string][]byte{}, nextSeg: 1<<32 | 1, inflight: map[uint64]bool{}}
}

func (h *fakeHost) Seal(ctx context.Context) error { return nil }

func (h *fakeHost) Barrier(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.barriers++
	return h.fenced
}

// BarrierCutoff: every segment allocated and not in flight is committed
// (the fake commits a segment's pointers as it uploads it).
func (h *fakeHost) BarrierCutoff(ctx context.Context) (uint64, error) {
	if err := h.Barrier(ctx); err != nil {
		return 0, err
	}
	return h.SweepHorizon(), nil
}

func (h *fakeHost) SweepHorizon() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	low := h.nextSeg
	for id := range h.inflight {
		low = min(low, id)
	}
	return low
}

func (h *fakeHost) NewSegmentID() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.nextSeg
	h.nextSeg++
	h.inflight[id] = true
	return id
}

func (h *fakeHost) SegmentDone(id uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.inflight, id)
}

// addCounterLocked adds a delta to a segment's counter.
func (h *fakeHost) addCounterLocked(seg uint64, live, total, size int64) {
	k := string(schema.CounterKey(seg))
	if v, ok := h.kv[k]; ok {
		l, t, s, err := lsm.DecodeCounter(v)
		if err != nil {
			h.t.Errorf("fake host: counter %016x: %v", seg, err)
			return
		}
		live, total, size = live+l, total+t, size+s
	}
	h.kv[k] = lsm.CounterDelta(live, total, size)
}

func (h *fakeHost) Repoint(outSeg uint64, frameBytes, objSize int64, moves []segment.Move) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fenced != nil {
		return 0, h.fenced
	}
	h.addCounterLocked(outSeg, 0, frameBytes, objSize)
	moved := 0
	for _, m := range moves {
		k := string(schema.ExtentKey(m.Ino, m.Extent))
		v, ok := h.kv[k]
		if !ok || !bytes.Equal(v, m.Old.Marshal()) {
			continue
		}
		h.kv[k] = m.New.Marshal()
		h.addCounterLocked(m.Old.Segment, -int64(m.Old.Length), 0, 0)
		h.addCounterLocked(outSeg, int64(m.New.Length), 0, 0)
		moved++
	}
	return moved, nil
}

func (h *fakeHost) DropCounter(seg uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fenced != nil {
		return h.fenced
	}
	delete(h.kv, string(schema.CounterKey(seg)))
	return nil
}

func (h *fakeHost) AdjustCounter(seg uint64, live, total, size int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fenced != nil {
		return h.fenced
	}
	h.addCounterLocked(seg, live, total, size)
	return nil
}

// CleanTombstones removes every pointer of every tombstoned inode, with
// its counter debit, in one step.
func (h *fakeHost) CleanTombstones(ctx context.Context) (tombs, extents int, bytes int64, err error) {
	if h.clean != nil {
		return h.clean(ctx)
	}
	return h.cleanAll()
}

// cleanAll is the fake's cleaner transaction.
func (h *fakeHost) cleanAll() (tombs, extents int, bytes int64, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lo, hi := schema.PrefixRange(schema.PTombstone)
	for _, tk := range h.keysLocked(lo, hi) {
		ino, err := schema.ParseU64Key([]byte(tk), schema.PTombstone)
		if err != nil {
			return tombs, extents, bytes, err
		}
		elo, ehi := schema.ExtentRange(ino, 0, 0)
		for _, ek := range h.keysLocked(elo, ehi) {
			p, err := segment.UnmarshalPointer(h.kv[ek])
			if err != nil {
				return tombs, extents, bytes, err
			}
			delete(h.kv, ek)
			h.addCounterLocked(p.Segment, -int64(p.Length), 0, 0)
			extents++
			bytes += int64(p.Length)
		}
		delete(h.kv, tk)
		tombs++
	}
	return tombs, extents, bytes, nil
}

func (h *fakeHost) Fenced() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fenced
}

// keysLocked returns the keys in [lower, upper) in order.
func (h *fakeHost) keysLocked(lower, upper []byte) []string {
	var out []string
	for k := range h.kv {
		if k >= string(lower) && (upper == nil || k < string(upper)) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// MetaScan copies the range under the lock (one consistent view) and
// calls f outside it.
func (h *fakeHost) MetaScan(lower, upper []byte, f func(k, v []byte) error) error {
	h.mu.Lock()
	ks := h.keysLocked(lower, upper)
	vs := make([][]byte, len(ks))
	for i, k := range ks {
		vs[i] = bytes.Clone(h.kv[k])
	}
	h.mu.Unlock()
	for i, k := range ks {
		if err := f([]byte(k), vs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (h *fakeHost) MetaGet(key []byte) ([]byte, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.kv[string(key)]
	return bytes.Clone(v), ok, nil
}

func (h *fakeHost) MetaGetAll(keys [][]byte, f func(i int, v []byte) error) error {
	h.mu.Lock()
	vs := make([][]byte, len(keys))
	for i, k := range keys {
		vs[i] = bytes.Clone(h.kv[string(k)])
	}
	h.mu.Unlock()
	for i, v := range vs {
		if v != nil {
			if err := f(i, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h *fakeHost) MetaPut(key, value []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if value == nil {
		delete(h.kv, string(key))
	} else {
		h.kv[string(key)] = bytes.Clone(value)
	}
	return nil
}

func (h *fakeHost) ForgetSegments(ids ...uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgotten = append(h.forgotten, ids...)
}

func (h *fakeHost) Relocated(obj []byte, moves []segment.Move) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.relocated += len(moves)
}

// write stores n extents of incompressible data for extents [from,
// from+n) of ino in one new segment object, and points them at it as the
// engine's flush does: the new segment's counter credited, the replaced
// pointers' segments debited. It returns the segment id and whether a
// replaced pointer debited a counter.
func (h *fakeHost) write(ctx context.Context, seed int64, ino uint64, from, n int) (uint64, bool) {
	h.t.Helper()
	id := h.NewSegmentID()
	defer h.SegmentDone(id)
	b := segment.NewBuilder(h.keys, id, segment.CodecNone)
	rng := rand.New(rand.NewSource(seed))
	ptrs := make([]segment.Pointer, n)
	for i := range n {
		data := make([]byte, segment.ExtentSize)
		rng.Read(data)
		ptrs[i] = b.Add(segment.FrameID{Ino: ino, Extent: uint64(from + i), Gen: id}, data)
	}
	obj := b.Finish()
	if err := segment.Upload(ctx, h.store, id, obj); err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var live int64
	debited := false
	for i, p := range ptrs {
		k := string(schema.ExtentKey(ino, uint64(from+i)))
		if v, ok := h.kv[k]; ok {
			old, err := segment.UnmarshalPointer(v)
			if err != nil {
				h.t.Fatal(err)
			}
			h.addCounterLocked(old.Segment, -int64(old.Length), 0, 0)
			debited = true
		}
		h.kv[k] = p.Marshal()
		live += int64(p.Length)
	}
	h.addCounterLocked(id, live, live, int64(len(obj)))
	return id, debited
}

// consistent checks what fsck checks of pointers and counters: each
// counter's live bytes are what the pointers into its segment reference,
// every pointer's segment has a counter and an object whose directory
// lists the frame, and the frame authenticates.
func (h *fakeHost) consistent(ctx context.Context) {
	h.t.Helper()
	h.mu.Lock()
	kv := make(map[string][]byte, len(h.kv))
	for k, v := range h.kv {
		kv[k] = v
	}
	h.mu.Unlock()
	live := map[uint64]int64{}
	refs := map[uint64][]segment.Pointer{}
	ids := map[segment.Pointer]segment.FrameID{}
	counters := map[uint64]int64{}
	for k, v := range kv {
		switch k[0] {
		case schema.PExtent:
			ino, idx, err := schema.ParseExtentKey([]byte(k))
			if err != nil {
				h.t.Fatal(err)
			}
			p, err := segment.UnmarshalPointer(v)
			if err != nil {
				h.t.Fatal(err)
			}
			live[p.Segment] += int64(p.Length)
			refs[p.Segment] = append(refs[p.Segment], p)
			ids[p] = segment.FrameID{Ino: ino, Extent: idx, Gen: p.Gen}
		case schema.PCounter:
			seg, err := schema.ParseU64Key([]byte(k), schema.PCounter)
			if err != nil {
				h.t.Fatal(err)
			}
			l, _, _, err := lsm.DecodeCounter(v)
			if err != nil {
				h.t.Fatal(err)
			}
			counters[seg] = l
		}
	}
	for seg, l := range counters {
		if l != live[seg] {
			h.t.Fatalf("segment %016x: counter says %d live bytes, pointers reference %d", seg, l, live[seg])
		}
	}
	rd := h.reader()
	defer rd.Close()
	for seg, ps := range refs {
		if _, ok := counters[seg]; !ok {
			h.t.Fatalf("segment %016x is referenced by pointers but has no counter", seg)
		}
		for _, p := range ps {
			if _, err := rd.Read(ctx, &segread.Request{ID: ids[p], Ptr: p}); err != nil {
				h.t.Fatalf("segment %016x: frame of %+v: %v", seg, ids[p], err)
			}
		}
	}
}

func (h *fakeHost) reader() *segread.Reader {
	h.t.Helper()
	rd, err := segread.NewReader(segread.ReaderOptions{Store: h.check, Keys: h.keys, MemoryBytes: -1})
	if err != nil {
		h.t.Fatal(err)
	}
	return rd
}

// read returns the data of extents [0, n) of ino as a file read would.
func (h *fakeHost) read(ctx context.Context, ino uint64, n int) []byte {
	h.t.Helper()
	rd := h.reader()
	defer rd.Close()
	var out []byte
	for i := range n {
		v, ok, _ := h.MetaGet(schema.ExtentKey(ino, uint64(i)))
		if !ok {
			break
		}
		p, err := segment.UnmarshalPointer(v)
		if err != nil {
			h.t.Fatal(err)
		}
		res, err := rd.Read(ctx, &segread.Request{ID: segment.FrameID{Ino: ino, Extent: uint64(i), Gen: p.Gen}, Ptr: p})
		b := res.Frame
		if err != nil {
			h.t.Fatalf("extent %d/%d: %v", ino, i, err)
		}
		out = append(out, b...)
	}
	return out
}

// unlink drops ino's pointers under a tombstone, as the engine's unlink
// of a large file does (the cleaner removes them).
func (h *fakeHost) unlink(ino uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kv[string(schema.TombstoneKey(ino))] = nil
}

// set writes a raw record (tests that plant malformed or stale metadata).
func (h *fakeHost) set(key, value []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kv[string(key)] = bytes.Clone(value)
}
