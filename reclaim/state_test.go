package reclaim

import (
	"testing"
	"time"

	"ebbfs.dev/ebbfs/fs"
)

// TestActivityAndTotals: the live state names each cycle's trigger and
// phase, keeps the cycles that freed something, and the totals add up the
// cycles' summaries.
func TestActivityAndTotals(t *testing.T) {
	v := newEngineEnv(t, noSweep)
	v.writeFile("keep", 4)
	v.writeFile("gone", 4)
	v.start()
	a := v.r.Activity()
	if a.Phase != PhaseIdle || a.LastCycle == nil || a.LastCycle.Trigger != TriggerStartup || a.LastCycle.Result != ResultOK {
		t.Fatalf("after startup: %+v (last %+v)", a, a.LastCycle)
	}
	if err := v.e.Unlink(v.ctx, fs.RootIno, "gone"); err != nil {
		t.Fatal(err)
	}
	v.barrier()
	// The unlink's dead bytes trigger a cycle that records a deadline.
	v.advance(11 * time.Second)
	a = v.r.Activity()
	if a.LastCycle.Trigger != TriggerDead || a.LastCycle.NewDeadlines != 1 {
		t.Fatalf("after the unlink: last cycle %+v", a.LastCycle)
	}
	if a.NextCycle.IsZero() || a.NextReason != TriggerDeadline {
		t.Fatalf("the deadline is not the next cycle: %+v", a)
	}
	// The deadline passes: a cycle deletes the segment.
	v.advance(2 * time.Minute)
	a = v.r.Activity()
	if a.LastCycle.Trigger != TriggerDeadline || a.LastCycle.Deleted != 1 {
		t.Fatalf("after the deadline: last cycle %+v", a.LastCycle)
	}
	if len(a.Recent) != 1 || a.Recent[0].Deleted != 1 || a.Recent[0].BytesFreed <= 0 {
		t.Fatalf("recent productive cycles: %+v", a.Recent)
	}
	st, err := v.r.RunNow(v.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := v.r.Activity(); a.LastCycle.Trigger != TriggerManual || len(a.Jobs) != 0 {
		t.Fatalf("after RunNow (%+v): %+v", st, a)
	}
	tot := v.r.Totals()
	_, cycles := v.r.LastCycle()
	if tot.Cycles[ResultOK] != uint64(cycles) || tot.CycleDuration.Count != uint64(cycles) || tot.Deleted != 1 ||
		tot.BytesFreed != uint64(a.Recent[0].BytesFreed) {
		t.Fatalf("totals %+v after %d cycles", tot, cycles)
	}
}
