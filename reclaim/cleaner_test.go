package reclaim

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// newCleanerEnv is an env on a fake host whose Reclaimer records the
// cleaner's figures in st.
func newCleanerEnv(t *testing.T) (*env, *CleanerStats) {
	st := NewCleanerStats()
	return newFakeEnv(t, noSweep, func(o *Options) { o.CleanerStats = st }), st
}

// extents counts the pointers of ino.
func (v *env) extents(ino uint64) int {
	lo, hi := schema.ExtentRange(ino, 0, 0)
	n := 0
	v.host.MetaScan(lo, hi, func(_, _ []byte) error { n++; return nil })
	return n
}

func (v *env) live(seg uint64) int64 {
	b, ok, _ := v.host.MetaGet(schema.CounterKey(seg))
	if !ok {
		return -1
	}
	l, _, _, err := decodeCounter(b)
	if err != nil {
		v.t.Fatal(err)
	}
	return l
}

// TestCleanerRemovesTombstonedPointers: started, the cleaner removes the
// pointers of a deleted file, debits its segment's counter, leaves other
// files alone, and records what it did.
func TestCleanerRemovesTombstonedPointers(t *testing.T) {
	v, stats := newCleanerEnv(t)
	gone, _ := v.fh.write(v.ctx, 1, 10, 0, 12)
	kept, _ := v.fh.write(v.ctx, 2, 11, 0, 3)
	v.fh.unlink(10)
	v.r.Start()
	testutil.Eventually(t, waitTimeout, "the cleaner to remove the deleted file's pointers", func() bool { return v.extents(10) == 0 })
	if l := v.live(gone); l != 0 {
		t.Errorf("deleted file's segment: %d live bytes, want 0", l)
	}
	if v.extents(11) != 3 || v.live(kept) <= 0 {
		t.Errorf("the other file: %d extents, %d live bytes; want 3 and its bytes", v.extents(11), v.live(kept))
	}
	if _, ok, _ := v.host.MetaGet(schema.TombstoneKey(10)); ok {
		t.Error("the tombstone survived its file's last pointer")
	}
	testutil.Eventually(t, waitTimeout, "the cleaner's figures", func() bool { return stats.Snapshot().CleanerBatches == 1 })
	s := stats.Snapshot()
	if s.TombstonesProcessed != 1 || s.ExtentsCleaned != 12 || s.BytesCleaned == 0 || s.LastBatch.Extents != 12 || s.LastBatch.At.IsZero() {
		t.Errorf("cleaner figures %+v, want 1 tombstone, 12 extents and their bytes", s)
	}
}

// TestCleanerWakesOnTombstone: an idle cleaner (the fake clock never lets
// CleanerIdle pass) runs when the engine reports a tombstone, through
// Triggers as the daemon wires it; without a report it runs once
// CleanerIdle passed.
func TestCleanerWakesOnTombstone(t *testing.T) {
	v, _ := newCleanerEnv(t)
	var calls atomic.Int32
	v.fh.clean = func(ctx context.Context) (int, int, int64, error) {
		calls.Add(1)
		return v.fh.cleanAll()
	}
	trig := &Triggers{}
	trig.Tombstoned() // before Attach: dropped; the first pass finds it
	trig.Attach(v.r)
	v.r.Start()
	testutil.Eventually(t, waitTimeout, "the cleaner's first pass", func() bool { return calls.Load() == 1 && v.clk.Waiters() > 0 })

	v.fh.write(v.ctx, 1, 10, 0, 2)
	v.fh.unlink(10)
	trig.Tombstoned()
	testutil.Eventually(t, waitTimeout, "the woken cleaner", func() bool { return v.extents(10) == 0 })
	// The pass that cleaned is followed by one that finds nothing; then
	// the cleaner sleeps.
	testutil.Eventually(t, waitTimeout, "the pass after the cleaning one", func() bool { return calls.Load() == 3 })

	v.fh.write(v.ctx, 2, 11, 0, 2)
	v.fh.unlink(11)
	testutil.Eventually(t, waitTimeout, "a timer on the fake clock", func() bool { return v.clk.Waiters() > 0 })
	if v.extents(11) != 2 || calls.Load() != 3 {
		t.Fatal("the cleaner ran with neither a wake-up nor its idle time passed")
	}
	testutil.Eventually(t, waitTimeout, "the cleaner after its idle time", func() bool {
		v.clk.Advance(CleanerIdle)
		return v.extents(11) == 0
	})
}

// TestCleanerRepeatsWhileWorkRemains: a pass that removed pointers is
// followed at once by another, until one finds nothing.
func TestCleanerRepeatsWhileWorkRemains(t *testing.T) {
	v, stats := newCleanerEnv(t)
	var calls atomic.Int32
	v.fh.clean = func(ctx context.Context) (int, int, int64, error) {
		if calls.Add(1) <= 3 {
			return 0, 100, 1000, nil
		}
		return 1, 0, 0, nil // the last pass finishes a tombstone
	}
	v.r.Start()
	testutil.Eventually(t, waitTimeout, "four passes", func() bool { return calls.Load() >= 4 && v.clk.Waiters() > 0 })
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d passes without a wake-up, want 4", n)
	}
	s := stats.Snapshot()
	if s.ExtentsCleaned != 300 || s.BytesCleaned != 3000 || s.TombstonesProcessed != 1 || s.CleanerBatches != 4 {
		t.Fatalf("figures %+v, want 300 extents, 3000 bytes, 1 tombstone in 4 batches", s)
	}
}

// TestCleanerLogsErrorsAndGoesOn: a failed pass is logged and the cleaner
// sleeps, then works again when woken; what the failed pass committed
// before its error is counted.
func TestCleanerLogsErrorsAndGoesOn(t *testing.T) {
	v, stats := newCleanerEnv(t)
	var calls atomic.Int32
	boom := errors.New("metadata store unhappy")
	v.fh.clean = func(ctx context.Context) (int, int, int64, error) {
		if calls.Add(1) == 1 {
			return 0, 5, 50, boom
		}
		return 0, 0, 0, nil
	}
	v.r.Start()
	testutil.Eventually(t, waitTimeout, "the failed pass", func() bool { return calls.Load() == 1 && v.clk.Waiters() > 0 })
	if !strings.Contains(v.logBuf.String(), "tombstone cleaner") || !strings.Contains(v.logBuf.String(), boom.Error()) {
		t.Fatalf("the failure was not logged:\n%s", v.logBuf)
	}
	if s := stats.Snapshot(); s.ExtentsCleaned != 5 || s.BytesCleaned != 50 {
		t.Fatalf("figures %+v: the failed pass's committed part not counted", s)
	}
	v.r.Tombstoned()
	testutil.Eventually(t, waitTimeout, "the cleaner to run again", func() bool { return calls.Load() == 2 })
}

// TestCleanerStopsAtClose: Close stops the cleaner (no pass after it), a
// Reclaimer never started has none, and the engine's reports after Close
// do nothing.
func TestCleanerStopsAtClose(t *testing.T) {
	v, _ := newCleanerEnv(t)
	var calls atomic.Int32
	v.fh.clean = func(ctx context.Context) (int, int, int64, error) {
		calls.Add(1)
		return 0, 0, 0, nil
	}
	v.r.Tombstoned() // not started: nothing to wake
	v.r.Start()
	testutil.Eventually(t, waitTimeout, "the first pass", func() bool { return calls.Load() == 1 })
	if err := v.r.Close(); err != nil {
		t.Fatal(err)
	}
	n := calls.Load()
	v.r.Tombstoned()
	v.clk.Advance(CleanerIdle)
	if calls.Load() != n {
		t.Fatal("the cleaner ran after Close")
	}
	select {
	case <-v.r.cleanerW.Done():
	default:
		t.Fatal("the cleaner's goroutine outlived Close")
	}

	idle, _ := newCleanerEnv(t)
	idle.fh.clean = func(ctx context.Context) (int, int, int64, error) {
		t.Error("a Reclaimer never started ran the cleaner")
		return 0, 0, 0, nil
	}
	idle.fh.write(idle.ctx, 1, 10, 0, 1)
	idle.fh.unlink(10)
	idle.r.Tombstoned()
	if err := idle.r.Close(); err != nil {
		t.Fatal(err)
	}
}
