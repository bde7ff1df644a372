package reclaim

import (
	"context"
	"errors"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/segment"
)

func noSweep(o *Options) { o.DisableSweep = true }

func (v *env) start() {
	v.t.Helper()
	v.r.Start()
	v.settle()
}

func TestStartupRunsOneCycle(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	v.writeFile("f", 4)
	v.start()
	if n := v.cycles(); n != 1 {
		t.Fatalf("%d cycles after start, want 1", n)
	}
	v.advance(time.Hour)
	if n := v.cycles(); n != 1 {
		t.Fatalf("%d cycles after an idle hour, want 1", n)
	}
}

func TestIdleSendsNothing(t *testing.T) {
	v := newFakeEnv(t)
	v.writeFile("f", 4)
	v.start()
	testutil.Eventually(t, waitTimeout, "the startup sweep", func() bool {
		v.r.mu.Lock()
		defer v.r.mu.Unlock()
		return v.r.mu.sweeps == 1
	})
	v.settle()
	mine0, seg0, cyc0 := v.r.Requests(), v.count.CountsFor(segment.KeyPrefix), v.cycles()
	for i := 0; i < 23*6; i++ {
		v.advance(10 * time.Minute)
	}
	if got := v.r.Requests().Sub(mine0); got.Requests() != 0 {
		t.Fatalf("an idle filesystem sent %+v for reclamation", got)
	}
	if got := v.count.CountsFor(segment.KeyPrefix).Sub(seg0); got.Requests() != 0 {
		t.Fatalf("an idle filesystem sent %+v to segments/", got)
	}
	if n := v.cycles(); n != cyc0 {
		t.Fatalf("%d cycles on an idle filesystem", n-cyc0)
	}
	// The daily sweep still comes, on monotonic time.
	v.advance(time.Hour)
	v.r.mu.Lock()
	sweeps := v.r.mu.sweeps
	v.r.mu.Unlock()
	if sweeps != 2 {
		t.Fatalf("%d sweeps after 24 h, want 2", sweeps)
	}
}

func TestTriggersCoalescedToFlushInterval(t *testing.T) {
	v := newFakeEnv(t, noSweep) // flush interval 10 s
	v.start()
	for i := 0; i < 5; i++ {
		v.r.DeadBytes()
	}
	v.settle()
	if n := v.cycles(); n != 1 {
		t.Fatalf("%d cycles right after the triggers, want only the startup one", n)
	}
	v.advance(9 * time.Second)
	if n := v.cycles(); n != 1 {
		t.Fatalf("%d cycles before the interval passed", n)
	}
	v.advance(time.Second)
	if n := v.cycles(); n != 2 {
		t.Fatalf("%d cycles, want 2: five triggers coalesced into one", n)
	}
	v.advance(time.Hour)
	if n := v.cycles(); n != 2 {
		t.Fatalf("%d cycles, want no more", n)
	}
}

func TestSealedSmallSegmentTriggers(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	v.start()
	v.advance(time.Minute)
	v.r.Sealed(1, 2<<20)
	v.settle()
	if n := v.cycles(); n != 1 {
		t.Fatalf("a large sealed segment triggered a cycle")
	}
	v.writeFile("small", 2) // the engine reports a small sealed segment
	v.settle()
	if n := v.cycles(); n != 2 {
		t.Fatalf("%d cycles; a small sealed segment must trigger one", n)
	}
}

func TestDeadBytesEventTriggers(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	ino := v.writeFile("f", 40)
	v.start()
	v.advance(time.Minute)
	v.writeExtents(ino, 0, 40) // debits: the engine reports dead bytes
	v.settle()
	if n := v.cycles(); n != 2 {
		t.Fatalf("%d cycles; dead bytes must trigger one", n)
	}
	if st, _ := v.r.LastCycle(); st.NewDeadlines != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestDeadlineArrivalTriggersCycle(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	_, dead := v.deadSegment("a")
	v.start()
	if st, _ := v.r.LastCycle(); st.NewDeadlines != 1 {
		t.Fatalf("startup cycle %+v", st)
	}
	v.advance(MinGrace - time.Second)
	if n := v.cycles(); n != 1 || !v.exists(dead) {
		t.Fatalf("%d cycles before the deadline", n)
	}
	v.advance(time.Second)
	if n := v.cycles(); n != 2 || v.exists(dead) {
		t.Fatalf("%d cycles at the deadline, dead exists %v", n, v.exists(dead))
	}
	v.advance(time.Hour)
	if n := v.cycles(); n != 2 {
		t.Fatalf("%d cycles, want no more", n)
	}
}

func TestFailedCycleRetriesAfter60s(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	v.cps.set(errors.New("unreadable"))
	_, dead := v.deadSegment("a")
	v.start()
	v.advance(RetryDelay - time.Second)
	if n := v.cycles(); n != 1 {
		t.Fatalf("%d cycles before the retry delay", n)
	}
	v.advance(time.Second)
	if n := v.cycles(); n != 2 {
		t.Fatalf("%d cycles; a failed cycle retries after 60 s", n)
	}
	v.cps.set(nil)
	v.advance(RetryDelay) // retry succeeds: records the deadline
	v.advance(MinGrace)   // the deadline arrives
	if v.exists(dead) {
		t.Fatal("not deleted after recovery")
	}
	n := v.cycles()
	v.advance(time.Hour)
	if v.cycles() != n {
		t.Fatal("kept retrying after success")
	}
}

func TestPersistentCheckpointRetriesAfter60s(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	v.cps.set(nil, persistent("keep"))
	_, dead := v.deadSegment("a")
	v.start()
	v.advance(RetryDelay)
	if n := v.cycles(); n != 2 {
		t.Fatalf("%d cycles; blocked work retries after 60 s", n)
	}
	v.cps.set(nil)
	v.advance(RetryDelay)
	v.advance(MinGrace)
	if v.exists(dead) {
		t.Fatal("not caught up after the checkpoint went")
	}
}

func TestPersistentCheckpointWithoutWorkDoesNotRetry(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	v.cps.set(nil, persistent("keep"))
	v.writeFile("f", 40)
	v.start()
	v.advance(time.Hour)
	if n := v.cycles(); n != 1 {
		t.Fatalf("%d cycles with nothing blocked", n)
	}
}

func TestRunNowAndSweepNow(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	v.start()
	v.deadSegment("a")
	st, err := v.r.RunNow(v.ctx)
	if err != nil || st.NewDeadlines != 1 {
		t.Fatalf("RunNow: %+v %v", st, err)
	}
	o := v.orphan(1)
	sw, err := v.r.SweepNow(v.ctx)
	if err != nil || sw.Deleted != 1 || v.exists(o) {
		t.Fatalf("SweepNow: %+v %v", sw, err)
	}
	val, _, _ := v.host.MetaGet(LastSweepKey)
	if ts, ok := decodeLastSweep(val); !ok || !ts.Equal(v.clk.Now()) {
		t.Fatalf("timestamp %v", ts)
	}
	sp, err := v.r.Space(v.ctx)
	if err != nil || !sp.LastSweep.Equal(v.clk.Now()) {
		t.Fatalf("space %+v %v", sp, err)
	}
	v.r.Close()
	if _, err := v.r.RunNow(v.ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("RunNow after Close: %v", err)
	}
}

func TestCloseStopsAdmissionsAdmittedJobsFinish(t *testing.T) {
	v := newFakeEnv(t, noSweep, func(o *Options) { o.MaxConcurrentRepacks = 1 })
	v.r.budgetForTests = 1 // one job per source
	var srcs []uint64
	for _, n := range []string{"a", "b", "c"} {
		_, s := v.fragmented(n)
		srcs = append(srcs, s)
	}
	closed := make(chan struct{})
	armFailpoint(t, "repack-after-upload", func(string) {
		go func() {
			v.r.Close()
			close(closed)
		}()
		testutil.Eventually(t, waitTimeout, "close to start", v.r.closed)
	})
	puts0 := v.count.CountsFor(segment.KeyPrefix).Put
	v.r.Start()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return")
	}
	if got := v.count.CountsFor(segment.KeyPrefix).Put - puts0; got != 1 {
		t.Fatalf("%d outputs uploaded, want only the admitted job's", got)
	}
	drained := 0
	for _, s := range srcs {
		if c, _ := v.counter(s); c.live == 0 {
			drained++
		}
	}
	if drained != 1 {
		t.Fatalf("%d sources drained; the admitted job must finish, no other start", drained)
	}
	v.barrier()
	v.consistent()
}

func TestSweepScheduleIsMonotonic(t *testing.T) {
	v := newFakeEnv(t)
	v.start()
	testutil.Eventually(t, waitTimeout, "the startup sweep", func() bool {
		v.r.mu.Lock()
		defer v.r.mu.Unlock()
		return v.r.mu.sweeps == 1
	})
	v.settle()
	// The wall clock jumps back ten days; the schedule does not care.
	v.clk.SetWall(t0.Add(-240 * time.Hour))
	v.advance(SweepInterval - time.Minute)
	v.r.mu.Lock()
	s1 := v.r.mu.sweeps
	v.r.mu.Unlock()
	v.advance(time.Minute)
	v.r.mu.Lock()
	s2 := v.r.mu.sweeps
	v.r.mu.Unlock()
	if s1 != 1 || s2 != 2 {
		t.Fatalf("sweeps %d then %d, want 1 then 2", s1, s2)
	}
}

func TestRunNowHonoursContext(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	ctx, cancel := context.WithCancel(v.ctx)
	cancel()
	if _, err := v.r.RunNow(ctx); err == nil {
		t.Fatal("RunNow on a stopped reclaimer succeeded")
	}
}
