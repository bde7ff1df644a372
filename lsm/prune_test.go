package lsm

import (
	"context"
	"strconv"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// TestPruneJournalsOfEarlierWriters: journals a manifest covers, written
// by an earlier writer, are deleted by PruneJournals once the store says
// they are older than the retention, without the new writer living that
// long; younger ones, and those no manifest covers, stay.
func TestPruneJournalsOfEarlierWriters(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, s, k)
	o.JournalRetention = time.Hour
	db := mustOpen(t, o)
	for i := range 3 {
		set(t, db, "k", string(rune('a'+i)))
		barrier(t, db)
	}
	if _, err := db.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	set(t, db, "k", "uncovered")
	barrier(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The next writer, within the retention: nothing goes.
	o2 := testOpts(t, s, k)
	o2.JournalRetention = time.Hour
	fake := clock.NewFake(time.Now())
	o2.Clock = fake
	db2 := mustOpen(t, o2)
	defer db2.Close()
	journals := len(keysUnder(t, s, journalPrefix))
	if journals < 4 {
		t.Fatalf("%d journals before the prune, want at least 4", journals)
	}
	db2.PruneJournals(ctx)
	if n := len(keysUnder(t, s, journalPrefix)); n != journals {
		t.Fatalf("%d journals after a prune within the retention, want %d", n, journals)
	}
	// Two hours later by the wall clock (the process itself is young):
	// the covered ones go, the uncovered one stays.
	fake.Advance(2 * time.Hour)
	db2.PruneJournals(ctx)
	left := keysUnder(t, s, journalPrefix)
	if len(left) == 0 || len(left) >= journals {
		t.Fatalf("journals after the prune: %v (had %d)", left, journals)
	}
	for _, key := range left {
		if seq, ok := parseSeqKey(journalPrefix, key); !ok || seq <= db2.LatestManifest() {
			t.Fatalf("covered journal %s kept", key)
		}
	}
}

// TestCloseOfShortWritersPublishes: writers that live a few barriers
// each (far below ManifestEvery and ManifestInterval) leave a manifest
// covering everything at a clean Close, so that their journals become
// deletable and a writer on a fresh machine replays none; the publication
// costs a table PUT and the manifest's PUT, a LIST of the journals and at
// most one DELETE request. The journals left are only those within the
// retention: their count does not grow with the number of writers.
func TestCloseOfShortWritersPublishes(t *testing.T) {
	mem := objstore.NewMem()
	cs := objstore.NewCounting(mem)
	k := testKeys(t)
	fake := clock.NewFake(time.Now())
	opts := func() Options {
		o := testOpts(t, cs, k)
		o.DisableAutoPublish = false
		o.Clock = fake
		o.JournalRetention = time.Minute
		return o
	}
	for i := range 20 {
		db := mustOpen(t, opts())
		set(t, db, "k"+strconv.Itoa(i%5), strconv.Itoa(i))
		barrier(t, db)
		before := cs.Snapshot()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		d := cs.Snapshot().Sub(before)
		// The lease's release is one PUT; the publication adds the
		// table(s) and the manifest.
		if d.Put < 3 || d.Put > 4 || d.List != 1 || d.Delete+d.DeleteMany > 1 || d.Get > 0 {
			t.Fatalf("writer %d: a clean close sent %+v", i, d)
		}
		if i == 0 {
			t.Logf("a clean close of a short writer sent %+v", d)
		}
		fake.Advance(30 * time.Second) // two writers a minute
		uncovered := 0
		for _, key := range keysUnder(t, mem, journalPrefix) {
			if seq, _ := parseSeqKey(journalPrefix, key); seq > db.LatestManifest() {
				uncovered++
			}
		}
		if uncovered > 0 {
			t.Fatalf("writer %d: %d journals not covered after a clean close", i, uncovered)
		}
		if n := len(keysUnder(t, mem, journalPrefix)); n > 8 {
			t.Fatalf("writer %d: %d journals kept, want those of the last minute only", i, n)
		}
	}

	// A writer on a fresh machine replays no journal: the newest
	// manifest holds every value.
	cs.Reset()
	o := opts()
	o.DisableAutoPublish = true
	db := mustOpen(t, o)
	defer db.Close()
	if got := cs.CountsFor(journalPrefix).Get; got != 0 {
		t.Fatalf("a fresh writer read %d journals, want 0", got)
	}
	for i := 15; i < 20; i++ {
		wantVal(t, db, "k"+strconv.Itoa(i%5), strconv.Itoa(i))
	}
}

// TestInheritedJournalsArePublished: a writer that inherits journals no
// manifest covers (earlier writers that crashed or published nothing)
// publishes them within ManifestInterval, though it writes nothing.
func TestInheritedJournalsArePublished(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	for i := range 3 {
		db := mustOpen(t, testOpts(t, s, k))
		set(t, db, "k", strconv.Itoa(i))
		barrier(t, db)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(keysUnder(t, s, manifestPrefix)); n != 0 {
		t.Fatalf("%d manifests before the inheriting writer", n)
	}
	o := testOpts(t, s, k)
	o.DisableAutoPublish = false
	fake := clock.NewFake(time.Now())
	o.Clock = fake
	db := mustOpen(t, o)
	defer db.Close()
	applied := db.AppliedSeq()
	testutil.Eventually(t, 10*time.Second, "the inherited journals published", func() bool {
		fake.Advance(DefaultManifestInterval)
		return db.LatestManifest() == applied
	})
}

// TestCloseWithUnjournaledBatchesDoesNotPublish: batches outside any
// journal at Close (a final barrier that failed) make Close publish
// nothing, rather than wait on the store for the publication's barrier.
func TestCloseWithUnjournaledBatchesDoesNotPublish(t *testing.T) {
	s := objstore.NewMem()
	o := testOpts(t, s, testKeys(t))
	o.DisableAutoPublish = false
	db := mustOpen(t, o)
	set(t, db, "k", "1")
	barrier(t, db)
	set(t, db, "k", "2") // never journaled
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := keysUnder(t, s, manifestPrefix); len(got) != 0 {
		t.Fatalf("a close with batches outside any journal published %v", got)
	}
}
