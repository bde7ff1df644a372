package reclaim

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

func init() { fs.KDFForTests = testutil.FastKDF }

// waitTimeout is how long the tests wait (real time) for a condition.
const waitTimeout = 20 * time.Second

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeCheckpoints is an in-memory checkpoint list.
type fakeCheckpoints struct {
	mu    sync.Mutex
	recs  []checkpoint.Record
	err   error
	calls int
}

func (f *fakeCheckpoints) List(ctx context.Context) ([]checkpoint.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return append([]checkpoint.Record(nil), f.recs...), nil
}

func (f *fakeCheckpoints) set(err error, recs ...checkpoint.Record) {
	f.mu.Lock()
	f.recs, f.err = recs, err
	f.mu.Unlock()
}

// env is a Reclaimer on an in-memory store, behind a fault injector and a
// request counter, on a fake clock, over either a fake host (newFakeEnv:
// the unit tests) or a real engine (newEngineEnv: the tests of
// reclamation together with the engine's writes, locks and durability).
type env struct {
	t      testing.TB
	ctx    context.Context
	mem    *objstore.Mem
	faulty *objstore.Faulty
	count  *objstore.Counting
	keys   *keys.Keys
	clk    *clock.Fake
	log    *slog.Logger
	logBuf *testutil.SyncBuffer
	e      *fs.Engine // nil on a fake host
	fh     *fakeHost  // nil on a real engine
	host   Host       // e or fh
	inos   uint64     // fake host: the last inode number given out
	trig   *Triggers
	cps    *fakeCheckpoints
	r      *Reclaimer
	seed   int64
	tune   func(*fs.Options) // a real engine's options, adjusted
}

// newEngineEnv is an env on a real engine.
func newEngineEnv(t testing.TB, mod ...func(*Options)) *env { return newEnvOn(t, false, mod...) }

// newFakeEnv is an env on a fake host.
func newFakeEnv(t testing.TB, mod ...func(*Options)) *env { return newEnvOn(t, true, mod...) }

func newEnvOn(t testing.TB, fake bool, mod ...func(*Options)) *env {
	t.Helper()
	return newEnvTuned(t, fake, nil, mod...)
}

// newEnvTuned is newEnvOn with tune adjusting a real engine's options.
func newEnvTuned(t testing.TB, fake bool, tune func(*fs.Options), mod ...func(*Options)) *env {
	t.Helper()
	v := &env{t: t, ctx: context.Background(), mem: objstore.NewMem(), clk: clock.NewFake(t0), cps: &fakeCheckpoints{}, logBuf: &testutil.SyncBuffer{}, tune: tune}
	v.faulty = objstore.NewFaulty(v.mem)
	v.count = objstore.NewCounting(v.faulty)
	var w io.Writer = v.logBuf
	if testing.Verbose() && os.Getenv("RECLAIM_TEST_LOG") != "" {
		w = io.MultiWriter(v.logBuf, os.Stderr)
	}
	v.log = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if fake {
		kdf := keys.DefaultKDF()
		kdf.Time, kdf.MemoryKiB, kdf.Threads = 1, 64, 1
		_, k, err := keys.NewDescriptor("password123", kdf)
		if err != nil {
			t.Fatal(err)
		}
		v.keys = k
		v.fh = newFakeHost(t, v.count, k)
		v.fh.check = v.mem
		v.host, v.trig = v.fh, &Triggers{}
	} else {
		k, err := fs.Init(v.ctx, v.count, "password123")
		if err != nil {
			t.Fatal(err)
		}
		v.keys = k
		v.openEngine()
	}
	v.r = v.newReclaimer(mod...)
	t.Cleanup(func() {
		v.r.Close()
		if v.e != nil {
			v.e.Close(context.Background())
		}
	})
	return v
}

func (v *env) openEngine() {
	v.t.Helper()
	v.trig = &Triggers{}
	o := fs.Options{
		Store: v.count, Keys: v.keys, CacheDir: v.t.TempDir(),
		SegmentTarget: 64 << 20, FlushInterval: time.Hour,
		Clock: v.clk, Logger: v.log, Events: v.trig,
	}
	if v.tune != nil {
		v.tune(&o)
	}
	e, err := fs.Open(v.ctx, o)
	if err != nil {
		v.t.Fatal(err)
	}
	v.e, v.host = e, e
}

func (v *env) newReclaimer(mod ...func(*Options)) *Reclaimer {
	v.t.Helper()
	o := Options{
		Host: v.host, Store: v.count, Keys: v.keys, Checkpoints: v.cps,
		Clock: v.clk, Logger: v.log, FlushInterval: 10 * time.Second,
	}
	for _, m := range mod {
		m(&o)
	}
	r, err := New(o)
	if err != nil {
		v.t.Fatal(err)
	}
	v.trig.Attach(r)
	return r
}

// writeFile creates name with n extents of incompressible data and makes
// it durable: one new segment.
func (v *env) writeFile(name string, n int) uint64 {
	v.t.Helper()
	if v.fh != nil {
		v.inos++
		v.writeExtents(100+v.inos, 0, n)
		return 100 + v.inos
	}
	a, err := v.e.Create(v.ctx, fs.RootIno, name, 0o644, 0, 0)
	if err != nil {
		v.t.Fatal(err)
	}
	v.writeExtents(a.Ino, 0, n)
	return a.Ino
}

// writeExtents overwrites extents [from, from+n) of ino with fresh data
// and runs a barrier.
func (v *env) writeExtents(ino uint64, from, n int) {
	v.t.Helper()
	v.seed++
	if v.fh != nil {
		id, debited := v.fh.write(v.ctx, v.seed, ino, from, n)
		size, _ := v.counter(id)
		v.trig.Sealed(id, size.size)
		if debited {
			v.trig.DeadBytes()
		}
		return
	}
	buf := make([]byte, n*segment.ExtentSize)
	rand.New(rand.NewSource(v.seed)).Read(buf)
	if _, err := v.e.Write(v.ctx, ino, buf, int64(from)*segment.ExtentSize); err != nil {
		v.t.Fatal(err)
	}
	v.barrier()
}

func (v *env) barrier() {
	v.t.Helper()
	if err := v.host.Barrier(v.ctx); err != nil {
		v.t.Fatal(err)
	}
}

// pointer returns the current pointer of (ino, idx).
func (v *env) pointer(ino, idx uint64) segment.Pointer {
	v.t.Helper()
	b, ok, err := v.host.MetaGet(schema.ExtentKey(ino, idx))
	if err != nil || !ok {
		v.t.Fatalf("extent %d/%d: ok=%v err=%v", ino, idx, ok, err)
	}
	p, err := segment.UnmarshalPointer(b)
	if err != nil {
		v.t.Fatal(err)
	}
	return p
}

func (v *env) counter(id uint64) (counterEntry, bool) {
	v.t.Helper()
	b, ok, err := v.host.MetaGet(schema.CounterKey(id))
	if err != nil {
		v.t.Fatal(err)
	}
	if !ok {
		return counterEntry{}, false
	}
	l, tot, sz, err := lsm.DecodeCounter(b)
	if err != nil {
		v.t.Fatal(err)
	}
	return counterEntry{id: id, live: l, total: tot, size: sz}, true
}

// objects lists segments/ straight from the memory store (uncounted).
func (v *env) objects() map[uint64]int64 {
	v.t.Helper()
	objs, err := objstore.ListAll(v.ctx, v.mem, segment.KeyPrefix)
	if err != nil {
		v.t.Fatal(err)
	}
	out := map[uint64]int64{}
	for _, o := range objs {
		if id, ok := segment.ParseKey(o.Key); ok {
			out[id] = o.Size
		}
	}
	return out
}

func (v *env) exists(id uint64) bool {
	_, err := v.mem.Head(v.ctx, segment.Key(id))
	return err == nil
}

// cycle runs one cycle on the test goroutine.
func (v *env) cycle() (CycleStats, error) {
	v.t.Helper()
	return v.r.cycle(v.ctx)
}

func (v *env) mustCycle() CycleStats {
	v.t.Helper()
	st, err := v.cycle()
	if err != nil {
		v.t.Fatalf("cycle: %v", err)
	}
	return st
}

// consistent checks the local metadata and the durable state (rebuilt
// from the store alone).
func (v *env) consistent() {
	v.t.Helper()
	if v.fh != nil {
		v.fh.consistent(v.ctx)
		return
	}
	rep, err := v.e.Check(v.ctx, true)
	if err != nil {
		v.t.Fatal(err)
	}
	if !rep.OK() {
		v.t.Fatalf("engine check:\n%s", rep)
	}
	// Publish synchronously so that no background publication deletes
	// journals while fsck recovers from the store (a replica recovering
	// during a publication can miss a journal: an lsm matter).
	if _, err := v.e.DB().Publish(v.ctx); err != nil {
		v.t.Fatal(err)
	}
	v.durablyConsistent()
}

func (v *env) durablyConsistent() *fs.FsckReport {
	v.t.Helper()
	if v.fh != nil {
		v.fh.consistent(v.ctx) // the fake's state is its durable state
		return &fs.FsckReport{}
	}
	rep, err := fs.Fsck(v.ctx, v.mem, v.keys, fs.FsckOptions{VerifyData: true, TempDir: v.t.TempDir(), Logger: v.log})
	if err != nil {
		v.t.Fatal(err)
	}
	if !rep.OK() {
		v.t.Fatalf("fsck of the store:\n%s", rep)
	}
	return rep
}

func (v *env) readAll(ino uint64, n int) []byte {
	v.t.Helper()
	if v.fh != nil {
		return v.fh.read(v.ctx, ino, n)
	}
	buf := make([]byte, n*segment.ExtentSize)
	k, err := v.e.Read(v.ctx, ino, buf, 0)
	if err != nil {
		v.t.Fatal(err)
	}
	return buf[:k]
}

func (v *env) deadline(id uint64) (time.Duration, bool) {
	v.r.mu.Lock()
	defer v.r.mu.Unlock()
	d, ok := v.r.mu.deadlines[id]
	return d, ok
}

// segs returns the segment ids the extents of ino point into.
func (v *env) segOf(ino uint64, idx uint64) uint64 { return v.pointer(ino, idx).Segment }

// settle waits until the started worker sleeps with nothing due.
func (v *env) settle() {
	v.t.Helper()
	testutil.Eventually(v.t, waitTimeout, "the reclaimer to settle", v.r.settled)
}

// advance moves the fake clock and lets the worker react.
func (v *env) advance(d time.Duration) {
	v.t.Helper()
	v.clk.Advance(d)
	v.settle()
}

func (v *env) cycles() int {
	_, n := v.r.LastCycle()
	return n
}

// releaseLease marks writer.lease released, as a crashed writer's lease
// would be taken over after its expiry, so a new engine can open.
func (v *env) releaseLease() {
	v.t.Helper()
	b, err := v.mem.Get(v.ctx, "writer.lease")
	if err != nil {
		v.t.Fatal(err)
	}
	l, err := lsm.ParseLease(b)
	if err != nil {
		v.t.Fatal(err)
	}
	l.Released = true
	nb, _ := json.Marshal(l)
	if _, err := v.mem.Put(v.ctx, "writer.lease", nb, objstore.PutOptions{}); err != nil {
		v.t.Fatal(err)
	}
}

// orphan uploads a valid segment object that no counter or pointer knows.
func (v *env) orphan(frames int) uint64 {
	v.t.Helper()
	id := v.host.NewSegmentID()
	defer v.host.SegmentDone(id)
	b := segment.NewBuilder(v.keys, id, segment.CodecNone)
	for i := 0; i < frames; i++ {
		data := make([]byte, 1000)
		rand.New(rand.NewSource(int64(i))).Read(data)
		b.Add(segment.FrameID{Ino: 999999, Extent: uint64(i), Gen: id}, data)
	}
	if err := segment.Upload(v.ctx, v.mem, id, b.Finish()); err != nil {
		v.t.Fatal(err)
	}
	return id
}

func ephemeral(name string, create time.Time, span time.Duration) checkpoint.Record {
	return checkpoint.Record{Name: name, Kind: checkpoint.Ephemeral, ManifestSeq: 1, CreateTime: create, ExpireTime: create.Add(span)}
}

func persistent(name string) checkpoint.Record {
	return checkpoint.Record{Name: name, Kind: checkpoint.Persistent, ManifestSeq: 1, CreateTime: t0}
}

const (
	MinGrace    = checkpoint.GraceFloor
	GraceMargin = checkpoint.GraceMargin
)

var objstoreNoCond = objstore.PutOptions{}

// metaSet sets a metadata record straight in the store, outside the
// engine's pointer updates (tests that plant records); metaDelete deletes
// one.
func (v *env) metaSet(key, value []byte) { v.metaChange(key, value, false) }

func (v *env) metaDelete(key []byte) { v.metaChange(key, nil, true) }

func (v *env) metaChange(key, value []byte, del bool) {
	v.t.Helper()
	if v.fh != nil {
		if del {
			v.fh.MetaPut(key, nil)
		} else {
			v.fh.set(key, value)
		}
		return
	}
	b := v.e.DB().NewBatch()
	if del {
		b.Delete(key)
	} else {
		b.Set(key, value)
	}
	if err := v.e.DB().Commit(b); err != nil {
		v.t.Fatal(err)
	}
}
