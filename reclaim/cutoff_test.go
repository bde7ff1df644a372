package reclaim

import (
	"context"
	"testing"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/failpoint"
)

// TestFlushInCutoffWindowNotEligible starts a flush, and allocates a
// segment id as a commit still in flight would, in the window between the
// cycle's barrier and its cutoff. The flush's segment becomes dead before
// the counter scan, yet the cycle must not see it (no deadline): it was
// sealed after the cutoff. The in-flight id holds the cutoff below it.
func TestFlushInCutoffWindowNotEligible(t *testing.T) {
	listed := make(chan struct{})
	var lister CheckpointListerFunc = func(ctx context.Context) ([]checkpoint.Record, error) {
		<-listed // the flush below has sealed and its file is deleted
		return nil, nil
	}
	v := newEngineEnv(t, func(o *Options) { o.Checkpoints = lister })
	v.writeFile("keep", 2)
	a, err := v.e.Create(v.ctx, fs.RootIno, "late", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	v.writeExtents(a.Ino, 0, 3) // dirty only: the cycle's barrier seals it

	var inflight uint64
	var late uint64
	flushDone := make(chan error, 1)
	armFailpoint(t, "barrier-before-cutoff", func(string) {
		inflight = v.e.NewSegmentID()
		// A flush that starts in the window: it has to wait for the
		// flush lock, so it seals only after the cutoff is taken.
		b, err := v.e.Create(v.ctx, fs.RootIno, "window", 0o644, 0, 0)
		if err != nil {
			t.Error(err)
			return
		}
		go func() {
			v.writeExtents(b.Ino, 0, 2)
			err := v.e.Seal(v.ctx)
			if err == nil {
				late = v.segOf(b.Ino, 0)
				// Dead before the scan: if the cutoff were taken late,
				// the cycle would give it a deadline.
				err = v.e.Unlink(v.ctx, fs.RootIno, "window")
			}
			flushDone <- err
			close(listed)
		}()
	})
	st, err := v.cycle()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-flushDone; err != nil {
		t.Fatal(err)
	}
	v.e.SegmentDone(inflight)
	if late < st.Cutoff {
		t.Fatalf("segment %x sealed in the window is below the cutoff %x", late, st.Cutoff)
	}
	if st.Cutoff > inflight {
		t.Fatalf("cutoff %x above the in-flight id %x", st.Cutoff, inflight)
	}
	if _, ok := v.deadline(late); ok || st.Dead != 0 || st.NewDeadlines != 0 {
		t.Fatalf("segment sealed after the cutoff was judged in the cycle: %+v", st)
	}
	// The next cycle does see it, dead, and starts its grace.
	failpoint.Arm("")
	st = v.mustCycle()
	if _, ok := v.deadline(late); !ok || st.NewDeadlines != 1 {
		t.Fatalf("next cycle: %+v; want a deadline for %x", st, late)
	}
}
