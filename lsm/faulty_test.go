package lsm

import (
	"context"
	"fmt"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

func TestBarrierSurvivesFaultyOutage(t *testing.T) {
	f := objstore.NewFaulty(objstore.NewMem())
	k := testKeys(t)
	db := mustOpen(t, testOpts(t, f, k))
	defer db.Close()
	set(t, db, "ia", "1")
	f.Outage(2 * time.Second)
	start := time.Now()
	barrier(t, db)
	if el := time.Since(start); el < 1900*time.Millisecond {
		t.Fatalf("barrier succeeded after %v, inside the outage", el)
	}
	if got := keysUnder(t, f.Unwrap(), journalPrefix); len(got) != 2 {
		t.Fatalf("journals %v, want epoch start + one", got)
	}
}

// A journal PUT whose response is lost after it was applied: the retry
// sees "precondition failed", recognises its own bytes, and succeeds
// without fencing the writer.
func TestBarrierLostResponseIsNotFencing(t *testing.T) {
	f := objstore.NewFaulty(objstore.NewMem())
	k := testKeys(t)
	db := mustOpen(t, testOpts(t, f, k))
	defer db.Close()
	id := f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: journalPrefix, Count: 1, Fail: true, Applied: true})
	set(t, db, "ia", "1")
	barrier(t, db)
	if f.Fired(id) != 1 {
		t.Fatal("rule did not fire")
	}
	if db.Fenced() != nil {
		t.Fatalf("fenced by its own journal: %v", db.Fenced())
	}
	set(t, db, "ib", "2")
	barrier(t, db)
	// Lost lease-heartbeat response is tolerated too.
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: leaseKey, Count: 1, Fail: true, Applied: true})
	_ = db.renewLease(false) // applied, error returned
	if err := db.renewLease(false); err != nil && db.Fenced() != nil {
		t.Fatalf("lost heartbeat response fenced the writer: %v", err)
	}
	_ = db.renewLease(false)
	if db.Fenced() != nil {
		t.Fatalf("fenced: %v", db.Fenced())
	}
	set(t, db, "ic", "3")
	barrier(t, db)
}

// A journal PUT lands but its answer is lost, and the barrier gives up
// (its caller's context ends) before it can learn so. More batches are
// committed; the next barrier must send the same journal again, not a
// fresh one with more batches at the same sequence, which would find the
// first object different and fence the writer. Then the newer batches get
// a journal of their own, and a recovery from the store holds them all.
func TestBarrierGivenUpAfterLostAnswerIsNotFencing(t *testing.T) {
	f := objstore.NewFaulty(objstore.NewMem())
	k := testKeys(t)
	o := testOpts(t, f, k)
	o.PID = deadPID(t)
	db := mustOpen(t, o)
	lost := f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: journalPrefix, Count: 1, Fail: true, Applied: true})
	down := f.AddRule(objstore.Rule{Skip: 1, Prefix: journalPrefix, Fail: true})
	set(t, db, "ia", "1")
	// Give up once the store has lost the answer and then refused a retry
	// (waiting on that, not on a time, which a slow machine can outlast).
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		testutil.Until(time.Minute, func() bool { return f.Fired(down) > 0 })
		cancel()
	}()
	err := db.Barrier(ctx)
	cancel()
	if err == nil {
		t.Fatal("barrier succeeded while the store answered nothing")
	}
	if f.Fired(lost) != 1 || f.Fired(down) == 0 {
		t.Fatalf("rules fired %d and %d times, want 1 and some", f.Fired(lost), f.Fired(down))
	}
	f.Clear()
	set(t, db, "ib", "2")
	if err := db.Barrier(context.Background()); err != nil {
		t.Fatalf("barrier after the store came back: %v (fenced: %v)", err, db.Fenced())
	}
	if db.Pending() != 0 {
		t.Fatalf("%d batches still queued after the barrier", db.Pending())
	}
	crash(db)
	o2 := testOpts(t, f.Unwrap(), k)
	o2.PID = deadPID(t)
	db2 := mustOpen(t, o2)
	defer db2.Close()
	wantVal(t, db2, "ia", "1")
	wantVal(t, db2, "ib", "2")
}

// Fault loop over Open: fail the i-th store request of a full recovery.
// Every run either fails cleanly or recovers everything.
func TestFaultLoopRecovery(t *testing.T) {
	mem := objstore.NewMem()
	k := testKeys(t)
	o := testOpts(t, mem, k)
	o.PID = deadPID(t)
	db := mustOpen(t, o)
	for i := range 300 {
		set(t, db, fmt.Sprintf("i%03d", i), "v")
		if i == 150 {
			if _, err := db.Publish(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if i%50 == 0 {
			barrier(t, db)
		}
	}
	barrier(t, db)
	crash(db)
	for i := 0; ; i++ {
		f := objstore.NewFaulty(cloneStore(t, mem)) // Open writes: start from the same state
		id := f.AddRule(objstore.Rule{Skip: i, Count: 1, Err: fmt.Errorf("permanent fault %d", i)})
		oi := o
		oi.Store = f
		oi.PID = deadPID(t)
		oi.Dir = t.TempDir()
		// The fault fires once and Open retries it: a generous bound, only
		// so that a hang fails the test instead of stalling it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		db2, err := Open(ctx, oi)
		cancel()
		if err == nil {
			wantVal(t, db2, "i299", "v")
			wantVal(t, db2, "i000", "v")
			crash(db2)
		}
		if f.Fired(id) == 0 {
			if err != nil {
				t.Fatalf("open without a fault failed: %v", err)
			}
			t.Logf("recovery checked with a fault at each of %d requests", i)
			return
		}
	}
}

func TestRecoverOnLocalStore(t *testing.T) {
	ls, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := testKeys(t)
	o := testOpts(t, ls, k)
	db := mustOpen(t, o)
	for i := range 1000 {
		set(t, db, fmt.Sprintf("i%04d", i), "v")
	}
	if _, err := db.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	set(t, db, "tail", "t")
	barrier(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	o2 := testOpts(t, ls, k)
	db2 := mustOpen(t, o2)
	defer db2.Close()
	wantVal(t, db2, "i0999", "v")
	wantVal(t, db2, "tail", "t")
}

func cloneStore(t *testing.T, src objstore.Store) *objstore.Mem {
	t.Helper()
	ctx := context.Background()
	dst := objstore.NewMem()
	objs, err := objstore.ListAll(ctx, src, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		b, err := src.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dst.Put(ctx, o.Key, b, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}
