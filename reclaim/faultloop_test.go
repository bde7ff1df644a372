package reclaim

import (
	"bytes"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// TestFaultLoop injects one store error at the i-th reclamation request
// of a cycle that deletes and repacks (and of a sweep), for i = 0, 1, 2,
// ... until a run sees no fault. Every failure must leave a consistent
// filesystem with unchanged contents, and a clean retry must finish the
// work.
func TestFaultLoop(t *testing.T) {
	for i := 0; ; i++ {
		v := newFakeEnv(t, noSweep, noCooling)
		v.r.chunkForTests = 8
		inoB, deadB := v.deadSegment("b")
		v.mustCycle()
		inoA, fragA := v.fragmented("a")
		orph := v.orphan(1)
		v.clk.Advance(MinGrace)
		wantA, wantB := v.readAll(inoA, 64), v.readAll(inoB, 4)
		// Every request but LIST (a failed shard listing is
		// TestSweepOnlyCompletedUpdatesTimestamp's); odd runs lose the
		// response of a request that took effect.
		ops := []objstore.Op{objstore.OpGet, objstore.OpGetRange, objstore.OpHead, objstore.OpPut, objstore.OpDelete, objstore.OpDeleteMany}
		id := v.faulty.AddRule(objstore.Rule{Ops: ops, Prefix: segment.KeyPrefix, Skip: i, Count: 1, Fail: true, Applied: i%2 == 1})
		_, cerr := v.cycle()
		_, serr := v.r.sweep(v.ctx)
		fired := v.faulty.Fired(id)
		v.faulty.Clear()
		if fired == 0 {
			if cerr != nil || serr != nil {
				t.Fatalf("run %d without a fault failed: %v / %v", i, cerr, serr)
			}
			if i < 8 {
				t.Fatalf("only %d requests: the scenario is too small", i)
			}
			break
		}
		v.barrier()
		v.consistent()
		// Clean retries finish the job.
		for k := 0; k < 3; k++ {
			v.mustCycle()
			v.clk.Advance(MinGrace)
		}
		if _, err := v.r.sweep(v.ctx); err != nil {
			t.Fatalf("run %d: clean sweep: %v", i, err)
		}
		if v.exists(deadB) || v.exists(fragA) || v.exists(orph) {
			t.Fatalf("run %d: garbage left: dead %v drained %v orphan %v", i, v.exists(deadB), v.exists(fragA), v.exists(orph))
		}
		if !bytes.Equal(v.readAll(inoA, 64), wantA) || !bytes.Equal(v.readAll(inoB, 4), wantB) {
			t.Fatalf("run %d: contents changed", i)
		}
		v.barrier()
		v.consistent()
	}
}
