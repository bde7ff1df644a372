package reclaim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
)

type metaEnv struct {
	t    *testing.T
	mem  *objstore.Mem
	s    *metaTestStore // over mem: what the DB and the GC use
	k    *keys.Keys
	db   *lsm.DB
	clk  *clock.Fake
	seqs []uint64 // published manifests, in order
}

func metaTestKeys(t *testing.T) *keys.Keys {
	t.Helper()
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	a, err := keys.NewAEAD(b)
	if err != nil {
		t.Fatal(err)
	}
	k := &keys.Keys{Meta: a, Data: a}
	_, _ = rand.Read(k.UUID[:])
	return k
}

func metaLSMOpts(t *testing.T, s objstore.Store, k *keys.Keys) lsm.Options {
	return lsm.Options{
		Dir:                filepath.Join(t.TempDir(), "lsm"),
		Store:              s,
		Keys:               k,
		Host:               "testhost",
		DisableAutoPublish: true,
		// Compact after every flush so that published manifests drop tables.
		Tune: func(o *pebble.Options) { o.L0CompactionThreshold = 1; o.L0CompactionFileThreshold = 1 },
	}
}

// newMetaEnv opens a writer on a fresh in-memory store and publishes
// rounds manifests, each overwriting the same keys.
func newMetaEnv(t *testing.T, rounds int) *metaEnv {
	t.Helper()
	e := &metaEnv{t: t, mem: objstore.NewMem(), k: metaTestKeys(t), clk: clock.NewFake(time.Now())}
	e.s = &metaTestStore{Store: e.mem, clk: e.clk, mod: map[string]time.Time{}}
	db, err := lsm.Open(context.Background(), metaLSMOpts(t, e.s, e.k))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e.db = db
	for range rounds {
		e.round()
	}
	return e
}

// round overwrites the test keys with values naming the round and
// publishes a manifest.
func (e *metaEnv) round() uint64 {
	e.t.Helper()
	r := len(e.seqs) + 1
	b := e.db.NewBatch()
	for i := range 300 {
		if err := b.Set(fmt.Appendf(nil, "i%05d", i), fmt.Appendf(nil, "round-%d-%s", r, strings.Repeat("v", 64))); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := b.Set([]byte("iround"), fmt.Appendf(nil, "%d", r)); err != nil {
		e.t.Fatal(err)
	}
	if err := e.db.Commit(b); err != nil {
		e.t.Fatal(err)
	}
	seq, err := e.db.Publish(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	e.seqs = append(e.seqs, seq)
	time.Sleep(20 * time.Millisecond) // let the compaction this flush triggers run
	return seq
}

func (e *metaEnv) gc() *MetaGC {
	return NewMetaGC(MetaGCOptions{Store: e.s, DB: e.db, Clock: e.clk})
}

// metaTestStore stamps objects with the fake clock's time (so that ages
// are in fake time) and injects failures.
type metaTestStore struct {
	objstore.Store
	clk *clock.Fake
	mu  sync.Mutex
	mod map[string]time.Time
	// failList fails List under this prefix; failGet fails Get of this key.
	failList, failGet string
}

func (m *metaTestStore) inject(listPrefix, getKey string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failList, m.failGet = listPrefix, getKey
}

func (m *metaTestStore) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) (string, error) {
	etag, err := m.Store.Put(ctx, key, data, opts)
	if err == nil {
		m.mu.Lock()
		m.mod[key] = m.clk.Now()
		m.mu.Unlock()
	}
	return etag, err
}

func (m *metaTestStore) List(ctx context.Context, prefix, after string, limit int) (objstore.ListPage, error) {
	m.mu.Lock()
	fail := m.failList != "" && strings.HasPrefix(prefix, m.failList)
	m.mu.Unlock()
	if fail {
		return objstore.ListPage{}, errInjected
	}
	p, err := m.Store.List(ctx, prefix, after, limit)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, o := range p.Objects {
		if t, ok := m.mod[o.Key]; ok {
			p.Objects[i].ModTime = t
		}
	}
	return p, err
}

func (m *metaTestStore) Get(ctx context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	fail := m.failGet != "" && key == m.failGet
	m.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	return m.Store.Get(ctx, key)
}

// keysUnder lists keys under prefixes, sorted.
func (e *metaEnv) keysUnder(prefixes ...string) map[string]int64 {
	e.t.Helper()
	out := map[string]int64{}
	for _, p := range prefixes {
		objs, err := objstore.ListAll(context.Background(), e.mem, p)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, o := range objs {
			out[o.Key] = o.Size
		}
	}
	return out
}

func (e *metaEnv) manifestObjects(seq uint64) []string {
	e.t.Helper()
	objs, err := e.db.ManifestObjects(context.Background(), seq)
	if err != nil {
		e.t.Fatalf("manifest %d: %v", seq, err)
	}
	return objs
}

// wantRound opens db state at manifest seq (or, with seq 0, the newest
// state) from the store alone and checks which round it holds.
func (e *metaEnv) wantRound(seq uint64, round int) {
	e.t.Helper()
	o := metaLSMOpts(e.t, e.mem, e.k)
	o.ReadOnly = true
	var (
		db  *lsm.DB
		err error
	)
	if seq == 0 {
		db, err = lsm.Open(context.Background(), o)
	} else {
		db, err = lsm.OpenAt(context.Background(), o, seq)
	}
	if err != nil {
		e.t.Fatalf("open at manifest %d after gc: %v", seq, err)
	}
	defer db.Close()
	v, ok, err := db.Get([]byte("iround"))
	if err != nil || !ok || string(v) != fmt.Sprint(round) {
		e.t.Fatalf("manifest %d holds round %q (%v, %v), want %d", seq, v, ok, err, round)
	}
	v, ok, err = db.Get([]byte("i00123"))
	if err != nil || !ok || !strings.HasPrefix(string(v), fmt.Sprintf("round-%d-", round)) {
		e.t.Fatalf("manifest %d: i00123 = %.12q (%v, %v), want round %d", seq, v, ok, err, round)
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestMetaGCDeletesExactlyUnreferenced(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 2)
	// Nothing new since round 2: the checkpoint pins round 2's manifest.
	ck, err := checkpoint.Create(ctx, e.s, e.db, "pin-round-2", checkpoint.Persistent, 0, e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ck.ManifestSeq != e.seqs[1] {
		t.Fatalf("checkpoint pins %d, want round 2's %d", ck.ManifestSeq, e.seqs[1])
	}
	for range 4 {
		e.round()
	}
	journalsBefore := e.keysUnder("meta/journal/")
	before := e.keysUnder(metaManifestPrefix, metaSSTPrefix)
	latest := e.seqs[len(e.seqs)-1]
	if e.db.LatestManifest() != latest {
		t.Fatalf("LatestManifest = %d, want %d", e.db.LatestManifest(), latest)
	}
	keep := map[string]bool{}
	for _, seq := range []uint64{ck.ManifestSeq, latest} {
		for _, o := range e.manifestObjects(seq) {
			keep[o] = true
		}
	}
	want := map[string]bool{}
	var wantBytes int64
	ssts, manifests := 0, 0
	for k, size := range before {
		if !keep[k] {
			want[k] = true
			wantBytes += size
			if strings.HasPrefix(k, metaSSTPrefix) {
				ssts++
			} else {
				manifests++
			}
		}
	}
	if ssts == 0 || manifests < 4 {
		t.Fatalf("test setup: only %d unreferenced SSTs and %d manifests", ssts, manifests)
	}

	g := e.gc()
	// Everything is younger than a minute: nothing goes.
	st, err := g.RunOnce(ctx)
	if err != nil || st.Deleted != 0 || st.Kept != len(before) {
		t.Fatalf("young pass = %+v, %v; want nothing deleted, %d kept", st, err, len(before))
	}
	e.clk.Advance(2 * time.Minute)
	st, err = g.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := e.keysUnder(metaManifestPrefix, metaSSTPrefix)
	gone := map[string]bool{}
	for k := range before {
		if _, ok := after[k]; !ok {
			gone[k] = true
		}
	}
	if got, w := sortedKeys(gone), sortedKeys(want); fmt.Sprint(got) != fmt.Sprint(w) {
		t.Fatalf("deleted:\n  %v\nwant:\n  %v", got, w)
	}
	for k := range keep {
		if _, ok := after[k]; !ok {
			t.Fatalf("referenced object %s deleted", k)
		}
	}
	if st.Deleted != len(want) || st.Bytes != wantBytes || st.Kept != len(before)-len(want) {
		t.Fatalf("stats = %+v, want deleted %d, bytes %d, kept %d", st, len(want), wantBytes, len(before)-len(want))
	}
	if j := e.keysUnder("meta/journal/"); fmt.Sprint(j) != fmt.Sprint(journalsBefore) {
		t.Fatalf("journal objects changed: %v -> %v", journalsBefore, j)
	}
	// Both surviving states open from the store alone.
	e.wantRound(ck.ManifestSeq, 2)
	e.wantRound(0, len(e.seqs))

	// A second pass finds nothing more.
	st, err = g.RunOnce(ctx)
	if err != nil || st.Deleted != 0 {
		t.Fatalf("second pass = %+v, %v", st, err)
	}

	// Deleting the checkpoint releases its manifest on the next pass.
	if err := checkpoint.Delete(ctx, e.mem, ck.Name); err != nil {
		t.Fatal(err)
	}
	st, err = g.RunOnce(ctx)
	if err != nil || st.Deleted == 0 {
		t.Fatalf("pass after checkpoint delete = %+v, %v; want deletions", st, err)
	}
	if _, err := e.mem.Head(ctx, fmt.Sprintf("meta/manifest/%016x", ck.ManifestSeq)); !objstore.IsNotFound(err) {
		t.Fatalf("released checkpoint manifest still present: %v", err)
	}
	e.wantRound(0, len(e.seqs))
}

var errInjected = errors.New("injected failure")

// TestMetaGCPrunesExpiredReaderRecords: a reader killed long ago leaves
// an ephemeral record pinning an old manifest. Once it has been expired
// for longer than its span, a pass removes the record and then the
// manifest it pinned; a live reader's record, and the manifest it pins,
// stay.
func TestMetaGCPrunesExpiredReaderRecords(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 2)
	dead, err := checkpoint.Create(ctx, e.s, e.db, "reader-dead", checkpoint.Ephemeral, 3*time.Minute, e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.round()
	}
	e.clk.Advance(7 * time.Minute) // expired 4 minutes ago: more than its 3-minute span
	live, err := checkpoint.Create(ctx, e.s, e.db, "reader-live", checkpoint.Ephemeral, 3*time.Minute, e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.round()
	e.clk.Advance(2 * time.Minute)
	if _, err := e.gc().RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.Get(ctx, e.mem, "reader-dead"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("expired reader record: %v, want it pruned", err)
	}
	if _, ok := e.keysUnder(metaManifestPrefix)[fmt.Sprintf("meta/manifest/%016x", dead.ManifestSeq)]; ok {
		t.Fatal("the manifest only the pruned record pinned is still there")
	}
	if _, err := checkpoint.Get(ctx, e.mem, "reader-live"); err != nil {
		t.Fatalf("live reader record: %v", err)
	}
	if _, ok := e.keysUnder(metaManifestPrefix)[fmt.Sprintf("meta/manifest/%016x", live.ManifestSeq)]; !ok {
		t.Fatal("the live reader's manifest was deleted")
	}
}

func TestMetaGCDoubtDeletesNothing(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 4)
	if _, err := checkpoint.Create(ctx, e.s, e.db, "ok", checkpoint.Persistent, 0, e.clk.Now()); err != nil {
		t.Fatal(err)
	}
	e.round()
	e.round()
	e.clk.Advance(2 * time.Minute)
	before := e.keysUnder(metaPrefix, checkpoint.Prefix)
	check := func(what string, listPrefix, getKey string) {
		t.Helper()
		e.s.inject(listPrefix, getKey)
		defer e.s.inject("", "")
		// Short: lsm retries a failing Get until the context ends.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := e.gc().RunOnce(cctx)
		if err == nil {
			t.Fatalf("%s: pass succeeded (%+v), want an error", what, st)
		}
		if st.Deleted != 0 {
			t.Fatalf("%s: deleted %d", what, st.Deleted)
		}
		if after := e.keysUnder(metaPrefix, checkpoint.Prefix); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("%s: objects changed", what)
		}
	}
	check("unlistable checkpoints", checkpoint.Prefix, "")
	check("unreadable record", "", checkpoint.Key("ok"))
	rec, err := checkpoint.Get(ctx, e.mem, "ok")
	if err != nil {
		t.Fatal(err)
	}
	check("unreadable checkpoint manifest", "", fmt.Sprintf("meta/manifest/%016x", rec.ManifestSeq))
	check("unlistable sst", metaSSTPrefix, "")

	// A malformed record, and a record pinning a manifest that is gone.
	if _, err := e.mem.Put(ctx, checkpoint.Key("junk"), []byte("{"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before = e.keysUnder(metaPrefix, checkpoint.Prefix)
	check("malformed record", "", "")
	if err := e.mem.Delete(ctx, checkpoint.Key("junk")); err != nil {
		t.Fatal(err)
	}
	dangling := fmt.Appendf(nil, `{"format":1,"name":"dangling","kind":"persistent","manifest_seq":%d,"create_time":"2030-01-01T00:00:00Z"}`, 1<<40)
	if _, err := e.mem.Put(ctx, checkpoint.Key("dangling"), dangling, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before = e.keysUnder(metaPrefix, checkpoint.Prefix)
	check("checkpoint manifest missing", "", "")

	// With the doubt gone, the same pass deletes.
	if err := e.mem.Delete(ctx, checkpoint.Key("dangling")); err != nil {
		t.Fatal(err)
	}
	if st, err := e.gc().RunOnce(ctx); err != nil || st.Deleted == 0 {
		t.Fatalf("clean pass = %+v, %v; want deletions", st, err)
	}
}

func TestMetaGCYoungSuccessorAndUnknownNamesStay(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 4) // fake t = 0
	e.clk.Advance(2 * time.Minute)
	young := e.round() // t = 2m
	prev := e.seqs[len(e.seqs)-2]
	strange := []string{
		"meta/manifest/zz",
		"meta/manifest/00000000000000012",
		"meta/sst/notanepoch-000001.sst",
		"meta/sst/0000000000000001-000001.txt",
		fmt.Sprintf("meta/sst/%016x-000001.sst", e.db.Epoch()+1), // a newer writer's
	}
	for _, k := range strange {
		if _, err := e.s.Put(ctx, k, []byte("x"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Advance(61 * time.Second)
	// t = 3m01: young and the strange objects are 61 s old; newest is new.
	// prev's successor (young) is old: prev goes. young's successor
	// (newest) is not: young stays although it is old and unreferenced.
	newest := e.round()
	st, err := e.gc().RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted == 0 {
		t.Fatal("nothing deleted")
	}
	for _, k := range strange {
		if _, err := e.mem.Head(ctx, k); err != nil {
			t.Errorf("unrecognised object %s: %v", k, err)
		}
	}
	// young (old itself, but superseded by a manifest younger than a
	// minute) stays; prev (superseded by young, which is old) goes.
	for seq, wantKept := range map[uint64]bool{young: true, newest: true, prev: false} {
		_, err := e.mem.Head(ctx, fmt.Sprintf("meta/manifest/%016x", seq))
		if kept := err == nil; kept != wantKept {
			t.Errorf("manifest %d kept=%v, want %v (%v)", seq, kept, wantKept, err)
		}
	}
	for _, seq := range []uint64{young, newest} {
		for _, o := range e.manifestObjects(seq) {
			if _, err := e.mem.Head(ctx, o); err != nil {
				t.Errorf("object %s of manifest %d: %v", o, seq, err)
			}
		}
	}
	e.wantRound(young, len(e.seqs)-1)
	e.wantRound(0, len(e.seqs))
}

func TestMetaGCFailpointMidIsResumable(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 6)
	e.clk.Advance(2 * time.Minute)
	before := e.keysUnder(metaManifestPrefix, metaSSTPrefix)

	pctx, cancel := context.WithCancel(ctx)
	var hits atomic.Int64
	needFailpoints(t)
	failpoint.SetAction(func(name string) { hits.Add(1); cancel() })
	failpoint.Arm("metagc-mid=2")
	t.Cleanup(func() { failpoint.Arm(""); failpoint.SetAction(func(string) {}) })
	st, err := e.gc().RunOnce(pctx)
	if err == nil || hits.Load() != 1 {
		t.Fatalf("interrupted pass = %+v, %v (hits %d); want an error", st, err, hits.Load())
	}
	if st.Deleted != 2 {
		t.Fatalf("interrupted pass deleted %d, want 2 (failpoint between the 2nd and 3rd)", st.Deleted)
	}
	failpoint.Arm("")
	st2, err := e.gc().RunOnce(ctx)
	if err != nil || st2.Deleted == 0 {
		t.Fatalf("resumed pass = %+v, %v", st2, err)
	}
	after := e.keysUnder(metaManifestPrefix, metaSSTPrefix)
	if len(before)-len(after) != st.Deleted+st2.Deleted {
		t.Fatalf("%d objects gone, passes report %d+%d", len(before)-len(after), st.Deleted, st2.Deleted)
	}
	e.wantRound(0, len(e.seqs))
}

func TestMetaGCWorkerAndFootprint(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 5)
	g := e.gc()
	n, bytes, err := g.Footprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := e.keysUnder(metaPrefix)
	var sum int64
	for _, sz := range all {
		sum += sz
	}
	if n != len(all) || bytes != sum || n == 0 {
		t.Fatalf("Footprint = %d objects, %d bytes; want %d, %d", n, bytes, len(all), sum)
	}

	g.Start()
	defer g.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, passes := g.LastPass(); passes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("worker ran no pass after 30 minutes of fake time")
		}
		e.clk.Advance(time.Minute)
		time.Sleep(time.Millisecond)
	}
	last, _ := g.LastPass()
	if last.Err != nil || last.Stats.Deleted == 0 {
		t.Fatalf("worker pass = %+v", last)
	}
	if e.clk.Mono() < DefaultMetaGCInterval {
		t.Fatalf("worker ran after %v of fake time, before its interval", e.clk.Mono())
	}
	n2, bytes2, err := g.Footprint(ctx)
	if err != nil || n2 != n-last.Stats.Deleted || bytes2 != bytes-last.Stats.Bytes {
		t.Fatalf("Footprint after gc = %d, %d, %v; want %d, %d", n2, bytes2, err, n-last.Stats.Deleted, bytes-last.Stats.Bytes)
	}
	g.Close()
	g.Close()
}

func TestMetaGCReadOnlyAndInvalidOptions(t *testing.T) {
	ctx := context.Background()
	if _, err := NewMetaGC(MetaGCOptions{}).RunOnce(ctx); err == nil {
		t.Fatal("RunOnce without options succeeded")
	}
	e := newMetaEnv(t, 2)
	o := metaLSMOpts(t, e.mem, e.k)
	o.ReadOnly = true
	ro, err := lsm.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	e.clk.Advance(2 * time.Minute)
	before := e.keysUnder(metaPrefix)
	if _, err := NewMetaGC(MetaGCOptions{Store: e.mem, DB: ro, Clock: e.clk}).RunOnce(ctx); err == nil {
		t.Fatal("metadata gc ran on a read-only DB")
	}
	if after := e.keysUnder(metaPrefix); len(after) != len(before) {
		t.Fatal("read-only gc deleted objects")
	}
}
