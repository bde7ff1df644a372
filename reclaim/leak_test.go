package reclaim

import (
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// fakeMetaDB is a writer's metadata store with one published manifest
// that references nothing: enough for a MetaGC pass to list, plan and
// delete nothing.
type fakeMetaDB struct{}

var _ MetaDB = fakeMetaDB{}

func (fakeMetaDB) Epoch() uint64          { return 1 }
func (fakeMetaDB) Fenced() error          { return nil }
func (fakeMetaDB) LatestManifest() uint64 { return 1 }
func (fakeMetaDB) ManifestObjects(ctx context.Context, seq uint64) ([]string, error) {
	return nil, nil
}
func (fakeMetaDB) ReferencedMetaObjects(ctx context.Context) (map[string]bool, error) {
	return map[string]bool{}, nil
}

// TestNoGoroutineOutlivesClose runs every loop and fan-out of
// reclamation (the cycle's and the cleaner's workers, the deletions',
// repack's and the sweep's goroutines, the metadata GC's worker) and
// checks that none is left once Reclaimer.Close and MetaGC.Close return.
func TestNoGoroutineOutlivesClose(t *testing.T) {
	leaks := testutil.SnapshotGoroutines()
	v := newFakeEnv(t)
	_, dead := v.deadSegment("dead")
	v.fragmented("fragmented")
	orphan := v.orphan(2)
	v.r.Start()
	v.settle() // the startup cycle (a deadline, a repack) and sweep
	if v.exists(orphan) {
		t.Fatal("the startup sweep kept an orphan")
	}
	if st, _ := v.r.LastCycle(); st.Repacks == 0 || st.NewDeadlines == 0 {
		t.Fatalf("startup cycle %+v; want a repack and a new deadline", st)
	}
	v.clk.Advance(MinGrace)
	st, err := v.r.RunNow(v.ctx)
	if err != nil || st.Deleted == 0 || v.exists(dead) {
		t.Fatalf("cycle after the grace: %+v, %v; want the dead segment deleted", st, err)
	}
	if _, err := v.r.SweepNow(v.ctx); err != nil {
		t.Fatal(err)
	}
	v.fh.write(v.ctx, 7, 1000, 0, 1)
	v.fh.unlink(1000)
	v.r.Tombstoned()

	gc := NewMetaGC(MetaGCOptions{Store: v.count, DB: fakeMetaDB{}, Clock: v.clk, Logger: v.log})
	gc.Trigger() // before Start: a pass as soon as it starts
	gc.Start()
	testutil.Eventually(t, waitTimeout, "a metadata gc pass", func() bool { _, n := gc.LastPass(); return n > 0 })
	if last, _ := gc.LastPass(); last.Err != nil {
		t.Fatalf("metadata gc pass: %v", last.Err)
	}

	if err := v.r.Close(); err != nil {
		t.Fatal(err)
	}
	gc.Close()
	leaks.Check(t, 10*time.Second)
}
