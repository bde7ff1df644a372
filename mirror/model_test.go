package mirror

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segment/segtest"
)

// batchRec is one record of a hand-built Pebble batch.
type batchRec struct {
	kind       byte // 2 merge, 0 delete
	key, value []byte
}

func batchRepr(recs []batchRec) []byte {
	b := make([]byte, 12)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(recs)))
	for _, r := range recs {
		b = append(b, r.kind)
		b = binary.AppendUvarint(b, uint64(len(r.key)))
		b = append(b, r.key...)
		if r.kind != 0 {
			b = binary.AppendUvarint(b, uint64(len(r.value)))
			b = append(b, r.value...)
		}
	}
	return b
}

// simWriter is a writer at the level of objects: segments created and
// dropped with the counter records a journal carries, manifests,
// checkpoint records, and the source's reclamation and journal GC
// (segments reaped a grace after they die, never while a record pins a
// state that has them; journals 5 minutes after a manifest covers them).
type simWriter struct {
	t        *testing.T
	ctx      context.Context
	k        *keys.Keys
	src      objstore.Store
	clk      *clock.Fake
	rng      *mrand.Rand
	seq      uint64
	nextSeg  uint64
	live     map[uint64]bool
	dead     map[uint64]time.Time // killed, not yet reaped
	states   map[uint64][]uint64  // journal seq -> live segments after it
	jtime    map[uint64]time.Time
	mans     []uint64
	records  map[string]uint64
	nrec     int
	pendingB []batchRec
}

func (w *simWriter) put(key string, b []byte) {
	if _, err := w.src.Put(w.ctx, key, b, objstore.PutOptions{}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *simWriter) journal() {
	w.seq++
	var newest uint64
	if len(w.mans) > 0 {
		newest = w.mans[len(w.mans)-1]
	}
	j := lsm.Journal{Seq: w.seq, Epoch: 1, Manifest: newest, Batches: [][]byte{batchRepr(w.pendingB)}}
	w.pendingB = nil
	w.put(lsm.JournalKey(w.seq), lsm.SealJournal(w.k, j))
	var segs []uint64
	for s := range w.live {
		segs = append(segs, s)
	}
	slices.Sort(segs)
	w.states[w.seq] = segs
	w.jtime[w.seq] = w.clk.Now()
}

func (w *simWriter) create(n int) {
	for range n {
		w.nextSeg++
		id := 1<<32 | w.nextSeg
		size := 64 + w.rng.IntN(512)
		w.put(segment.Key(id), make([]byte, size))
		w.pendingB = append(w.pendingB, batchRec{2, schema.CounterKey(id), lsm.CounterDelta(10, 10, int64(size))})
		w.live[id] = true
	}
	w.journal()
}

func (w *simWriter) kill() {
	for s := range w.live {
		delete(w.live, s)
		w.dead[s] = w.clk.Now()
		w.pendingB = append(w.pendingB, batchRec{2, schema.CounterKey(s), lsm.CounterDelta(-10, 0, 0)})
		break
	}
	w.journal()
}

func (w *simWriter) pinned(s uint64) bool {
	for _, m := range w.records {
		if slices.Contains(w.states[m], s) {
			return true
		}
	}
	return false
}

func (w *simWriter) reap() {
	var any bool
	for s, at := range w.dead {
		if w.clk.Now().Sub(at) < time.Minute || w.pinned(s) {
			continue
		}
		if err := w.src.Delete(w.ctx, segment.Key(s)); err != nil {
			w.t.Fatal(err)
		}
		w.pendingB = append(w.pendingB, batchRec{0, schema.CounterKey(s), nil})
		delete(w.dead, s)
		any = true
	}
	if any {
		w.journal()
	}
}

func (w *simWriter) publish() {
	if len(w.mans) > 0 && w.mans[len(w.mans)-1] == w.seq || w.seq == 0 {
		return
	}
	obj := fmt.Sprintf("meta/sst/0000000000000001-%06d.sst", w.seq)
	w.put(obj, []byte("table"))
	b, err := lsm.SealManifest(w.k, &lsm.Manifest{Format: 1, Seq: w.seq, Epoch: 1, Created: w.clk.Now(),
		Tables: []lsm.ManifestTable{{Name: fmt.Sprintf("%06d.sst", w.seq), Object: obj, Size: 5}}})
	if err != nil {
		w.t.Fatal(err)
	}
	w.put(lsm.ManifestKey(w.seq), b)
	w.mans = append(w.mans, w.seq)
}

func (w *simWriter) checkpoint() {
	w.publish()
	if len(w.mans) == 0 {
		return
	}
	w.nrec++
	name := fmt.Sprintf("c%d", w.nrec)
	b, _ := json.Marshal(map[string]any{"format": 1, "name": name, "kind": "persistent",
		"manifest_seq": w.mans[len(w.mans)-1], "create_time": w.clk.Now().UTC()})
	w.put(checkpoint.Key(name), b)
	w.records[name] = w.mans[len(w.mans)-1]
}

func (w *simWriter) dropCheckpoint() {
	for name := range w.records {
		if err := w.src.Delete(w.ctx, checkpoint.Key(name)); err != nil {
			w.t.Fatal(err)
		}
		delete(w.records, name)
		return
	}
}

// gc deletes covered journals 5 minutes old and unpinned older manifests.
func (w *simWriter) gc() {
	if len(w.mans) == 0 {
		return
	}
	newest := w.mans[len(w.mans)-1]
	for s := uint64(1); s <= newest; s++ {
		if t, ok := w.jtime[s]; ok && w.clk.Now().Sub(t) >= 5*time.Minute {
			_ = w.src.Delete(w.ctx, lsm.JournalKey(s))
		}
	}
	var keep []uint64
	for _, m := range w.mans {
		pinned := false
		for _, r := range w.records {
			pinned = pinned || r == m
		}
		if m == newest || pinned {
			keep = append(keep, m)
			continue
		}
		_ = w.src.Delete(w.ctx, lsm.ManifestKey(m))
		_ = w.src.Delete(w.ctx, fmt.Sprintf("meta/sst/0000000000000001-%06d.sst", m))
	}
	w.mans = keep
}

func has(t *testing.T, s objstore.Store, key string) bool {
	t.Helper()
	_, err := s.Head(context.Background(), key)
	if objstore.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestMirrorModel checks the mirror's delete rules (docs/model/MIRROR.md)
// against a simulated writer, over many seeds: no segment the mirror held
// is deleted from it while a mirror point within the retention, or a
// checkpoint record the mirror holds, references it; the newest point
// always opens (a manifest and every journal after it); and after the
// writer stops and the retention passes, the mirror holds exactly the
// source's segments.
func TestMirrorModel(t *testing.T) {
	seeds := 24
	if testing.Short() {
		seeds = 6
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, uint64(seed)) })
	}
}

type modelRun struct {
	t        *testing.T
	w        *simWriter
	dst      objstore.Store
	m        *Mirror
	opts     Options
	copiedAt map[uint64]time.Time // journal -> when the mirror first held it
	held     map[uint64]bool      // segments the mirror held at some check
}

const modelRetention = time.Hour

func runModel(t *testing.T, seed uint64) {
	ctx := context.Background()
	k := segtest.Keys(t)
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	src, dst := objstore.NewMem(), objstore.NewMem()
	if _, err := src.Put(ctx, keys.DescriptorKey, []byte(`{"format":4}`), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &simWriter{t: t, ctx: ctx, k: k, src: src, clk: clk, rng: mrand.New(mrand.NewPCG(seed, 1)),
		live: map[uint64]bool{}, dead: map[uint64]time.Time{}, states: map[uint64][]uint64{},
		jtime: map[uint64]time.Time{}, records: map[string]uint64{}}
	r := &modelRun{t: t, w: w, dst: dst, copiedAt: map[uint64]time.Time{}, held: map[uint64]bool{},
		opts: Options{Source: src, Dest: dst, Keys: k, Clock: clk, Retention: modelRetention,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	r.restart()
	for step := 0; step < 400; step++ {
		switch n := w.rng.IntN(100); {
		case n < 30:
			w.create(1 + w.rng.IntN(3))
		case n < 50:
			w.kill()
		case n < 60:
			w.reap()
		case n < 66:
			w.publish()
		case n < 69:
			w.checkpoint()
		case n < 72:
			w.dropCheckpoint()
		case n < 76:
			w.gc()
		case n < 78:
			r.restart()
		case n < 80:
			clk.Advance(time.Duration(w.rng.IntN(int(modelRetention/time.Second))) * time.Second)
		default:
			clk.Advance(time.Duration(1+w.rng.IntN(40)) * time.Second)
		}
		if w.rng.IntN(4) > 0 {
			r.pass()
		}
	}
	// The writer stops: everything is dropped that can be, and the
	// retention passes.
	for name := range w.records {
		_ = src.Delete(ctx, checkpoint.Key(name))
		delete(w.records, name)
	}
	for range 3 {
		clk.Advance(2 * time.Minute)
		w.reap()
		r.pass()
	}
	for range 4 {
		clk.Advance(modelRetention / 2)
		r.pass()
	}
	srcSegs, err := listSegments(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	dstSegs, err := listSegments(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcSegs) != len(dstSegs) {
		t.Fatalf("converged: the source has %d segments, the mirror %d (pending %d)", len(srcSegs), len(dstSegs), len(r.m.st.Pending))
	}
	for key := range srcSegs {
		if _, ok := dstSegs[key]; !ok {
			t.Fatalf("converged: the mirror lacks %s", key)
		}
	}
}

// restart opens the mirror afresh from what it saved (a kill -9: what it
// did not save is lost).
func (r *modelRun) restart() {
	m, err := Open(context.Background(), r.opts)
	if err != nil {
		r.t.Fatal(err)
	}
	r.m = m
}

func (r *modelRun) pass() {
	t, ctx := r.t, context.Background()
	for {
		more, err := r.m.Pass(ctx)
		if err != nil {
			t.Fatalf("pass: %v", err)
		}
		if !more {
			break
		}
	}
	now := r.w.clk.Now()
	js, err := objstore.ListAll(ctx, r.dst, lsm.JournalPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range js {
		var j uint64
		if _, err := fmt.Sscanf(o.Key[len(lsm.JournalPrefix):], "%x", &j); err == nil {
			if _, ok := r.copiedAt[j]; !ok {
				r.copiedAt[j] = now
			}
		}
	}
	segs, err := listSegments(ctx, r.dst)
	if err != nil {
		t.Fatal(err)
	}
	for key := range segs {
		id, _ := segment.ParseKey(key)
		r.held[id] = true
	}
	r.check(now, segs)
}

func (r *modelRun) check(now time.Time, inDst map[string]int64) {
	t, ctx := r.t, context.Background()
	need := func(what string, segs []uint64) {
		for _, s := range segs {
			if _, ok := inDst[segment.Key(s)]; r.held[s] && !ok {
				t.Fatalf("%s references segment %x, which the mirror held and deleted", what, s)
			}
		}
	}
	for j, at := range r.copiedAt {
		if now.Sub(at) < modelRetention {
			need(fmt.Sprintf("point %d (copied %s ago)", j, now.Sub(at)), r.w.states[j])
		}
	}
	recs, err := objstore.ListAll(ctx, r.dst, checkpoint.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range recs {
		b, err := r.dst.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := checkpoint.DecodeRecord(o.Key, b)
		if err != nil {
			t.Fatal(err)
		}
		if !has(t, r.dst, lsm.ManifestKey(rec.ManifestSeq)) {
			t.Fatalf("record %s: its manifest %d is not in the mirror", rec.Name, rec.ManifestSeq)
		}
		need("record "+rec.Name, r.w.states[rec.ManifestSeq])
	}
	newest, err := newestManifest(ctx, r.dst)
	if err != nil {
		t.Fatal(err)
	}
	for s := newest + 1; s < r.m.st.Next; s++ {
		if !has(t, r.dst, lsm.JournalKey(s)) {
			t.Fatalf("the newest point %d does not open: manifest %d, journal %d missing", r.m.st.Next-1, newest, s)
		}
	}
}
