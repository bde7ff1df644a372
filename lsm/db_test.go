package lsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

func TestRecoverFromStoreAloneKeepsOnlyBarrierd(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, s, k)
	db := mustOpen(t, o)
	if db.Epoch() != 1 {
		t.Fatalf("first epoch = %d, want 1", db.Epoch())
	}
	set(t, db, "ia", "1", "ib", "2")
	set(t, db, "ia", "3")
	b := db.NewBatch()
	_ = b.Delete([]byte("ib"))
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	barrier(t, db)
	set(t, db, "ic", "lost") // never barrier'd
	wantVal(t, db, "ic", "lost")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(o.Dir); err != nil {
		t.Fatal(err)
	}

	o2 := testOpts(t, s, k)
	db2 := mustOpen(t, o2)
	defer db2.Close()
	wantVal(t, db2, "ia", "3")
	wantVal(t, db2, "ib", "")
	wantVal(t, db2, "ic", "")
	if db2.Epoch() != 2 {
		t.Fatalf("second epoch = %d, want 2", db2.Epoch())
	}
}

func TestCrashRecoveryWithoutClose(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, s, k)
	o.PID = deadPID(t) // so that this "process" is dead after crash
	db := mustOpen(t, o)
	set(t, db, "ia", "1")
	barrier(t, db)
	set(t, db, "ib", "2")
	crash(db)

	// Same directory, no clean marker: full recovery from the store.
	o2 := o
	o2.PID = 0
	db2 := mustOpen(t, o2)
	defer db2.Close()
	wantVal(t, db2, "ia", "1")
	wantVal(t, db2, "ib", "")
}

func TestFastRestart(t *testing.T) {
	mem := objstore.NewMem()
	cs := newCounting(mem)
	k := testKeys(t)
	o := testOpts(t, cs, k)
	db := mustOpen(t, o)
	for i := range 50 {
		set(t, db, fmt.Sprintf("i%03d", i), "v")
		barrier(t, db)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(o.Dir + "/" + markerName); err != nil {
		t.Fatalf("no clean-shutdown marker after Close: %v", err)
	}
	before := cs.count(journalPrefix)
	db2 := mustOpen(t, o)
	if got := cs.count(journalPrefix) - before; got != 0 {
		t.Fatalf("fast restart fetched %d journal objects, want 0", got)
	}
	if _, err := os.Stat(o.Dir + "/" + markerName); !os.IsNotExist(err) {
		t.Fatalf("marker still present after open: %v", err)
	}
	wantVal(t, db2, "i049", "v")
	set(t, db2, "j", "after")
	barrier(t, db2)
	if err := db2.Close(); err != nil {
		t.Fatal(err)
	}

	// Another machine writes more; our clean local state is behind but a
	// prefix: only the tail is replayed.
	o3 := testOpts(t, cs, k)
	db3 := mustOpen(t, o3)
	set(t, db3, "k", "elsewhere")
	barrier(t, db3)
	if err := db3.Close(); err != nil {
		t.Fatal(err)
	}
	before = cs.count(journalPrefix)
	db4 := mustOpen(t, o)
	defer db4.Close()
	if got := cs.count(journalPrefix) - before; got != 2 { // db3's epoch start + its barrier
		t.Fatalf("tail replay fetched %d journal objects, want 2", got)
	}
	wantVal(t, db4, "k", "elsewhere")
	wantVal(t, db4, "j", "after")
}

func TestUnbarrieredCloseForcesFullRecovery(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, s, k)
	db := mustOpen(t, o)
	set(t, db, "ia", "1")
	barrier(t, db)
	set(t, db, "ib", "queued")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(o.Dir + "/" + markerName); !os.IsNotExist(err) {
		t.Fatalf("clean marker written with queued batches: %v", err)
	}
	db2 := mustOpen(t, o)
	defer db2.Close()
	wantVal(t, db2, "ia", "1")
	wantVal(t, db2, "ib", "")
}

func TestPublishRecoverAndJournalGC(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, s, k)
	db := mustOpen(t, o)
	for i := range 2000 {
		set(t, db, fmt.Sprintf("e%05d", i), strings.Repeat("x", 100))
		if i%500 == 0 {
			barrier(t, db)
		}
	}
	seq, err := db.Publish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if seq == 0 || db.LatestManifest() != seq {
		t.Fatalf("Publish seq %d, LatestManifest %d", seq, db.LatestManifest())
	}
	if got := keysUnder(t, s, journalPrefix); len(got) != 0 {
		t.Fatalf("journals left after publish: %v", got)
	}
	if got := keysUnder(t, s, manifestPrefix); len(got) != 1 || got[0] != manifestKey(seq) {
		t.Fatalf("manifests %v, want [%s]", got, manifestKey(seq))
	}
	ssts := keysUnder(t, s, sstPrefix)
	if len(ssts) == 0 {
		t.Fatal("no SSTs shipped")
	}
	for _, n := range ssts {
		if !strings.HasPrefix(n, sstPrefix+fmt.Sprintf("%016x-", db.Epoch())) || !strings.HasSuffix(n, ".sst") {
			t.Fatalf("unexpected table object name %s", n)
		}
	}
	// Publishing again with nothing new is a no-op.
	if again, err := db.Publish(context.Background()); err != nil || again != seq {
		t.Fatalf("second publish = %d, %v; want %d", again, err, seq)
	}
	// More work after the manifest, then a second manifest re-uses tables.
	set(t, db, "e00001", "changed", "znew", "1")
	barrier(t, db)
	set(t, db, "zz", "2")
	barrier(t, db)
	if got := keysUnder(t, s, journalPrefix); len(got) != 2 {
		t.Fatalf("journals after manifest: %v, want 2", got)
	}
	refs, err := db.ReferencedMetaObjects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ssts {
		if !refs[n] {
			t.Fatalf("referenced set misses %s", n)
		}
	}
	crash(db)

	o2 := testOpts(t, s, k)
	o2.Host = "otherhost"
	o2.Clock = &offsetClock{d: time.Minute}
	db2 := mustOpen(t, o2)
	defer db2.Close()
	wantVal(t, db2, "e01999", strings.Repeat("x", 100))
	wantVal(t, db2, "e00001", "changed")
	wantVal(t, db2, "znew", "1")
	wantVal(t, db2, "zz", "2")
	if db2.LatestManifest() != seq {
		t.Fatalf("recovered LatestManifest %d, want %d", db2.LatestManifest(), seq)
	}
	seq2, err := db2.Publish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if seq2 <= seq {
		t.Fatalf("second manifest %d not after %d", seq2, seq)
	}
	if got := keysUnder(t, s, journalPrefix); len(got) != 0 {
		t.Fatalf("journals left after second publish: %v", got)
	}
	// A table already shipped by the first writer is referenced, not copied.
	m1, err := db2.fetchManifest(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := db2.fetchManifest(context.Background(), seq2)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]string{}
	for _, tb := range m1.Tables {
		first[tb.Name] = tb.Object
	}
	for _, tb := range m2.Tables {
		if obj, ok := first[tb.Name]; ok && obj != tb.Object {
			t.Fatalf("table %s re-shipped as %s (was %s)", tb.Name, tb.Object, obj)
		}
		if _, ok := first[tb.Name]; !ok && !strings.HasPrefix(tb.Object, sstPrefix+fmt.Sprintf("%016x-", db2.Epoch())) {
			t.Fatalf("new table %s shipped under another epoch: %s", tb.Name, tb.Object)
		}
	}
}

// offsetClock is the real clock shifted by d (another host's view).
type offsetClock struct{ d time.Duration }

func (c *offsetClock) Now() time.Time                         { return time.Now().Add(c.d) }
func (c *offsetClock) Mono() time.Duration                    { return time.Duration(time.Now().UnixNano()) }
func (c *offsetClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func TestOpenEmptyStore(t *testing.T) {
	s := objstore.NewMem()
	db := mustOpen(t, testOpts(t, s, testKeys(t)))
	defer db.Close()
	wantVal(t, db, "ia", "")
	it, err := db.NewIter([]byte("a"), []byte("r"))
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if it.First() {
		t.Fatalf("empty store has key %q", it.Key())
	}
	if got := keysUnder(t, s, journalPrefix); len(got) != 1 {
		t.Fatalf("want the epoch-start journal only, got %v", got)
	}
}

func TestReadOnlyCannotWrite(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	w := mustOpen(t, testOpts(t, s, k))
	set(t, w, "ia", "1")
	barrier(t, w)
	ro := testOpts(t, s, k)
	ro.ReadOnly = true
	r := mustOpen(t, ro)
	defer r.Close()
	wantVal(t, r, "ia", "1")
	b := r.NewBatch()
	_ = b.Set([]byte("ib"), []byte("2"))
	if err := r.Commit(b); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("replica commit err = %v", err)
	}
	if r.Epoch() != 0 {
		t.Fatalf("replica epoch %d", r.Epoch())
	}
	// Follow the writer.
	set(t, w, "ib", "2")
	barrier(t, w)
	if _, ok, err := r.FollowNext(context.Background()); err != nil || !ok {
		t.Fatalf("FollowNext = %v, %v", ok, err)
	}
	wantVal(t, r, "ib", "2")
	// After a manifest deleted the journals it needs, CatchUp moves on.
	set(t, w, "ic", "3")
	barrier(t, w)
	if _, err := w.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if jumped, err := r.CatchUp(context.Background()); err != nil || !jumped {
		t.Fatalf("CatchUp after GC = %v, %v; want a jump", jumped, err)
	}
	wantVal(t, r, "ic", "3")
	seq := w.LatestManifest()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	at := testOpts(t, s, k)
	p, err := OpenAt(context.Background(), at, seq)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	wantVal(t, p, "ic", "3")
}

func TestAutoPublishAfterManifestEvery(t *testing.T) {
	s := objstore.NewMem()
	o := testOpts(t, s, testKeys(t))
	o.DisableAutoPublish = false
	o.ManifestEvery = 3
	db := mustOpen(t, o)
	defer db.Close()
	for i := range 3 {
		set(t, db, fmt.Sprintf("i%d", i), "v")
		barrier(t, db)
	}
	testutil.Eventually(t, time.Minute, "one manifest left", func() bool { return len(keysUnder(t, s, manifestPrefix)) == 1 })
	testutil.Eventually(t, time.Minute, "no journal left", func() bool { return len(keysUnder(t, s, journalPrefix)) == 0 })
	if db.LatestManifest() == 0 {
		t.Fatal("LatestManifest not updated by the background publisher")
	}
}

func TestFastRestartKeepsShippedTables(t *testing.T) {
	s := objstore.NewMem()
	o := testOpts(t, s, testKeys(t))
	// A background compaction may legitimately merge the first table into a
	// new one; keep the table set stable so the test sees only shipping.
	o.Tune = func(po *pebble.Options) { po.DisableAutomaticCompactions = true }
	db := mustOpen(t, o)
	for i := range 300 {
		set(t, db, fmt.Sprintf("i%04d", i), "v")
	}
	seq1, err := db.Publish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := keysUnder(t, s, sstPrefix)
	db2 := mustOpen(t, o) // fast restart, epoch 2
	defer db2.Close()
	set(t, db2, "j", "1")
	seq2, err := db2.Publish(context.Background())
	if err != nil || seq2 <= seq1 {
		t.Fatalf("publish %d, %v", seq2, err)
	}
	m1, _ := db2.fetchManifest(context.Background(), seq1)
	m2, err := db2.fetchManifest(context.Background(), seq2)
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]string{}
	for _, tb := range m1.Tables {
		old[tb.Name] = tb.Object
	}
	reused := 0
	for _, tb := range m2.Tables {
		if o, ok := old[tb.Name]; ok {
			if o != tb.Object {
				t.Fatalf("table %s re-shipped after fast restart", tb.Name)
			}
			reused++
		}
	}
	if reused == 0 {
		t.Fatalf("no table of %v reused in %+v", before, m2.Tables)
	}
}
