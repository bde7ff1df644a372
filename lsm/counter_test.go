package lsm

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"ebbfs.dev/ebbfs/objstore"
)

func counterKey(i int) []byte { return []byte(fmt.Sprintf("c%08d", i)) }

func wantCounter(t *testing.T, db *DB, key []byte, live, total, size int64) {
	t.Helper()
	v, ok, err := db.Get(key)
	if err != nil || !ok {
		t.Fatalf("counter %q: found %v, %v", key, ok, err)
	}
	l, tt, s, err := DecodeCounter(v)
	if err != nil {
		t.Fatal(err)
	}
	if l != live || tt != total || s != size {
		t.Fatalf("counter %q = (%d,%d,%d), want (%d,%d,%d)", key, l, tt, s, live, total, size)
	}
}

func TestCounterMergeAcrossFlushesAndCompactions(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, s, k)
	o.PID = deadPID(t)
	o.Tune = func(po *pebble.Options) { po.MemTableSize = 1 << 20 }
	db := mustOpen(t, o)
	ctx := context.Background()
	const n = 20
	for round := range 30 {
		b := db.NewBatch()
		for i := range n {
			if err := b.AddCounter(counterKey(i), 10, 20, 1000); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Commit(b); err != nil {
			t.Fatal(err)
		}
		if round%10 == 9 {
			if _, err := db.Publish(ctx); err != nil { // flushes
				t.Fatal(err)
			}
		}
	}
	// A Set resets the base; later merges add to it.
	b := db.NewBatch()
	_ = b.Set(counterKey(0), CounterDelta(1, 1, 1))
	_ = b.AddCounter(counterKey(0), -1, 4, 0)
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	if err := db.withPebble(func(p *pebble.DB) error {
		if err := p.Flush(); err != nil {
			return err
		}
		return p.Compact(ctx, []byte("c"), []byte("d"), true)
	}); err != nil {
		t.Fatal(err)
	}
	wantCounter(t, db, counterKey(0), 0, 5, 1)
	wantCounter(t, db, counterKey(7), 300, 600, 30000)
	barrier(t, db)
	crash(db)

	o.PID = 0
	o.Dir = t.TempDir()
	db2 := mustOpen(t, o)
	defer db2.Close()
	wantCounter(t, db2, counterKey(0), 0, 5, 1)
	wantCounter(t, db2, counterKey(19), 300, 600, 30000)
}

func TestMergeRejectsNonCounters(t *testing.T) {
	db := mustOpen(t, testOpts(t, objstore.NewMem(), testKeys(t)))
	defer db.Close()
	b := db.NewBatch()
	defer b.Close()
	if err := b.Merge([]byte("i1"), CounterDelta(1, 1, 1)); !errors.Is(err, ErrBadCounter) {
		t.Fatalf("merge on inode key: %v", err)
	}
	if err := b.Merge([]byte("c1"), []byte{1, 2, 3}); !errors.Is(err, ErrBadCounter) {
		t.Fatalf("short delta: %v", err)
	}
	if _, _, _, err := DecodeCounter(make([]byte, 23)); err == nil {
		t.Fatal("DecodeCounter accepted 23 bytes")
	}
	l, tt, s, err := DecodeCounter(CounterDelta(-5, 6, 1<<40))
	if err != nil || l != -5 || tt != 6 || s != 1<<40 {
		t.Fatalf("round trip (%d,%d,%d) %v", l, tt, s, err)
	}
	if _, err := counterMerger.Merge([]byte("x"), CounterDelta(1, 1, 1)); err == nil {
		t.Fatal("merger accepted a non-counter key")
	}
}

func TestJournalRejectsBadMerge(t *testing.T) {
	// An authentic journal carrying a merge on a non-counter key must not
	// reach Pebble (it would wedge compactions).
	k := testKeys(t)
	pb := new(pebble.Batch)
	_ = pb.Merge([]byte("i9"), CounterDelta(1, 1, 1), nil)
	sealed := sealJournal(k, Journal{Seq: 3, Epoch: 1, Batches: [][]byte{pb.Repr()}})
	if _, err := openJournal(k, 3, sealed); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("openJournal accepted a bad merge: %v", err)
	}
}

func TestIndexedBatchReadsOwnWrites(t *testing.T) {
	db := mustOpen(t, testOpts(t, objstore.NewMem(), testKeys(t)))
	defer db.Close()
	set(t, db, "ia", "1")
	b := db.NewIndexedBatch()
	_ = b.Set([]byte("ib"), []byte("2"))
	_ = b.DeleteRange([]byte("ia"), []byte("ib"))
	v, ok, err := b.Get([]byte("ib"))
	if err != nil || !ok || string(v) != "2" {
		t.Fatalf("batch Get ib = %q %v %v", v, ok, err)
	}
	if _, ok, _ := b.Get([]byte("ia")); ok {
		t.Fatal("batch sees a range-deleted key")
	}
	wantVal(t, db, "ib", "")
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	wantVal(t, db, "ia", "")
	wantVal(t, db, "ib", "2")
	if err := b.Set([]byte("x"), nil); err == nil {
		t.Fatal("batch usable after Commit")
	}
}
