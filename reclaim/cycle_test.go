package reclaim

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// deadSegment writes a 4-extent file and overwrites it completely: the
// first segment is dead. It returns the file and the dead segment.
func (v *env) deadSegment(name string) (uint64, uint64) {
	v.t.Helper()
	ino := v.writeFile(name, 4)
	old := v.segOf(ino, 0)
	v.writeExtents(ino, 0, 4)
	if c, ok := v.counter(old); !ok || c.live != 0 {
		v.t.Fatalf("segment %016x: counter %+v ok=%v, want dead", old, c, ok)
	}
	return ino, old
}

func TestDeadSegmentDeletedAfterGrace(t *testing.T) {
	v := newFakeEnv(t)
	ino, dead := v.deadSegment("f")
	want := v.readAll(ino, 4)

	st := v.mustCycle()
	if st.NewDeadlines != 1 || st.Deleted != 0 {
		t.Fatalf("first cycle: %+v; want one new deadline, no delete", st)
	}
	if !v.exists(dead) {
		t.Fatal("dead segment deleted before its deadline")
	}
	v.clk.Advance(MinGrace - time.Second)
	if st := v.mustCycle(); st.Deleted != 0 {
		t.Fatalf("deleted %d segments a second before the deadline", st.Deleted)
	}
	v.clk.Advance(time.Second)
	st = v.mustCycle()
	if st.Deleted != 1 || st.BytesFreed <= 0 {
		t.Fatalf("cycle after the deadline: %+v; want one delete", st)
	}
	if v.exists(dead) {
		t.Fatal("dead segment still in the store")
	}
	if _, ok := v.counter(dead); ok {
		t.Fatal("dead segment's counter still present")
	}
	if _, ok := v.deadline(dead); ok {
		t.Fatal("deadline of a deleted segment kept")
	}
	if got := v.readAll(ino, 4); !bytes.Equal(got, want) {
		t.Fatal("file content changed")
	}
	v.barrier()
	v.consistent()
}

func TestCycleRequestsMatchDesign(t *testing.T) {
	v := newFakeEnv(t)
	const n = 5
	var dead []uint64
	for i := 0; i < n; i++ {
		_, d := v.deadSegment(string(rune('a' + i)))
		dead = append(dead, d)
	}
	seg0 := v.count.CountsFor(segment.KeyPrefix)
	mine0 := v.r.Requests()
	v.mustCycle()
	if got := v.count.CountsFor(segment.KeyPrefix).Sub(seg0); got.Requests() != 0 {
		t.Fatalf("a cycle that only records deadlines sent %+v to segments/", got)
	}
	if got := v.r.Requests().Sub(mine0); got.Requests() != 0 {
		t.Fatalf("a cycle that only records deadlines sent %+v", got)
	}
	v.clk.Advance(MinGrace)
	seg0 = v.count.CountsFor(segment.KeyPrefix)
	st := v.mustCycle()
	got := v.count.CountsFor(segment.KeyPrefix).Sub(seg0)
	if st.Deleted != n {
		t.Fatalf("deleted %d, want %d", st.Deleted, n)
	}
	want := objstore.Counts{GetRange: 2 * n, Delete: n}
	if got.GetRange != want.GetRange || got.Delete != want.Delete || got.List != 0 || got.Get != 0 || got.Head != 0 || got.Put != 0 || got.DeleteMany != 0 {
		t.Fatalf("requests to segments/ = %+v; want exactly footer GET + directory GET + DELETE per dead segment (%+v), no LIST", got, want)
	}
	if st.Requests.GetRange != 2*n || st.Requests.Delete != n || st.Requests.List != 0 {
		t.Fatalf("cycle summary requests %+v", st.Requests)
	}
	for _, d := range dead {
		if v.exists(d) {
			t.Fatalf("segment %016x not deleted", d)
		}
	}
}

func TestCycleLogsOneSummary(t *testing.T) {
	v := newFakeEnv(t)
	v.deadSegment("f")
	before := bytes.Count([]byte(v.logBuf.String()), []byte("reclaim: cycle"))
	v.mustCycle()
	after := bytes.Count([]byte(v.logBuf.String()), []byte("reclaim: cycle"))
	if after-before != 1 {
		t.Fatalf("%d summary lines for one cycle", after-before)
	}
	for _, k := range []string{"deletes=", "repacks=", "relocated_frames=", "bytes_freed=", "duration=", "requests.get_range="} {
		if !bytes.Contains([]byte(v.logBuf.String()), []byte(k)) {
			t.Fatalf("summary lacks %s: %s", k, v.logBuf.String())
		}
	}
}

func TestRenewalDoesNotMoveRecordedDeadline(t *testing.T) {
	v := newFakeEnv(t)
	create := t0.Add(-time.Minute)
	v.cps.set(nil, ephemeral("reader", create, 10*time.Minute))
	_, a := v.deadSegment("a")
	v.mustCycle()
	da, ok := v.deadline(a)
	if !ok || da != v.clk.Mono()+10*time.Minute+GraceMargin {
		t.Fatalf("deadline %v (ok %v), want now + span + 30 s", da, ok)
	}
	// The reader renews: expire_time moves, create_time does not.
	v.cps.set(nil, ephemeral("reader", create, 20*time.Minute))
	_, b := v.deadSegment("b")
	v.mustCycle()
	if d, _ := v.deadline(a); d != da {
		t.Fatalf("renewal moved a recorded deadline from %v to %v", da, d)
	}
	db, _ := v.deadline(b)
	if db != v.clk.Mono()+20*time.Minute+GraceMargin {
		t.Fatalf("new deadline %v does not use the renewed span", db)
	}
	// A shorter span later does not shorten b's deadline either.
	v.cps.set(nil)
	v.clk.Advance(10*time.Minute + GraceMargin)
	st := v.mustCycle()
	if st.Deleted != 1 || v.exists(a) || !v.exists(b) {
		t.Fatalf("after a's deadline: %+v, a exists %v, b exists %v", st, v.exists(a), v.exists(b))
	}
	if d, _ := v.deadline(b); d != db {
		t.Fatalf("b's deadline moved from %v to %v", db, d)
	}
	v.clk.Advance(10 * time.Minute)
	if st := v.mustCycle(); st.Deleted != 1 || v.exists(b) {
		t.Fatalf("after b's deadline: %+v", st)
	}
}

func TestGraceFloorIsSixtySeconds(t *testing.T) {
	v := newFakeEnv(t)
	v.cps.set(nil, ephemeral("short", t0, time.Second))
	_, a := v.deadSegment("a")
	v.mustCycle()
	if d, _ := v.deadline(a); d != v.clk.Mono()+MinGrace {
		t.Fatalf("deadline %v, want now + 60 s", d)
	}
}

func TestPersistentCheckpointPauses(t *testing.T) {
	v := newFakeEnv(t)
	v.cps.set(nil, persistent("keep"))
	_, dead := v.deadSegment("a")
	ino := v.writeFile("big", 64)
	frag := v.segOf(ino, 0)
	v.writeExtents(ino, 0, 40)
	seg0 := v.count.CountsFor(segment.KeyPrefix)
	st := v.mustCycle()
	if !st.Paused || !st.Retry || st.Deleted != 0 || st.Repacks != 0 {
		t.Fatalf("paused cycle: %+v", st)
	}
	if _, ok := v.deadline(dead); ok {
		t.Fatal("a paused cycle recorded a deadline")
	}
	v.clk.Advance(time.Hour)
	st = v.mustCycle()
	if got := v.count.CountsFor(segment.KeyPrefix).Sub(seg0); got.Requests() != 0 || st.Deleted != 0 {
		t.Fatalf("paused cycles sent %+v to segments/ (deleted %d)", got, st.Deleted)
	}
	sp, err := v.r.Space(v.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Pinned["keep"] <= 0 || sp.Pinned["keep"] != sp.DeadBytes+sp.FragmentedBytes {
		t.Fatalf("space: pinned %v, dead %d, fragmented %d", sp.Pinned, sp.DeadBytes, sp.FragmentedBytes)
	}
	// Deleting the checkpoint lets reclamation catch up.
	v.cps.set(nil)
	st = v.mustCycle()
	if st.Paused || st.NewDeadlines != 1 || st.Repacks != 1 {
		t.Fatalf("first cycle after the checkpoint went: %+v", st)
	}
	v.clk.Advance(MinGrace)
	v.mustCycle() // the drained source gets its deadline
	v.clk.Advance(MinGrace)
	v.mustCycle()
	if v.exists(dead) || v.exists(frag) {
		t.Fatalf("not caught up: dead exists %v, drained exists %v", v.exists(dead), v.exists(frag))
	}
	v.barrier()
	v.consistent()
}

func TestUnreadableCheckpointListBlocksCycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*fakeCheckpoints)
	}{
		{"unreadable", func(f *fakeCheckpoints) { f.set(errors.New("checkpoints/x: access denied")) }},
		{"invalid-span", func(f *fakeCheckpoints) {
			f.set(nil, checkpoint.Record{Name: "bad", Kind: checkpoint.Ephemeral, ManifestSeq: 1, CreateTime: t0, ExpireTime: t0.Add(-time.Hour)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newFakeEnv(t)
			_, dead := v.deadSegment("a")
			v.mustCycle()
			v.clk.Advance(MinGrace)
			tc.set(v.cps)
			seg0 := v.count.CountsFor(segment.KeyPrefix)
			st, err := v.cycle()
			if err == nil || st.Blocked == "" {
				t.Fatalf("cycle with a bad checkpoint list: %+v, err %v; want an error", st, err)
			}
			if got := v.count.CountsFor(segment.KeyPrefix).Sub(seg0); got.Requests() != 0 || !v.exists(dead) {
				t.Fatalf("a blocked cycle reclaimed: requests %+v, dead exists %v", got, v.exists(dead))
			}
			v.cps.set(nil)
			if st := v.mustCycle(); st.Deleted != 1 {
				t.Fatalf("after the list is readable again: %+v", st)
			}
		})
	}
}

func TestBlockedCycleRecordsNoDeadline(t *testing.T) {
	v := newFakeEnv(t)
	v.cps.set(errors.New("unreadable"))
	_, dead := v.deadSegment("a")
	v.cycle()
	if _, ok := v.deadline(dead); ok {
		t.Fatal("a blocked cycle recorded a deadline")
	}
}

func TestDeleteBeforeCounterRemoved(t *testing.T) {
	for _, fp := range []string{"delete-after-verify", "delete-after-object-delete"} {
		t.Run(fp, func(t *testing.T) {
			v := newFakeEnv(t)
			_, dead := v.deadSegment("a")
			v.mustCycle()
			v.clk.Advance(MinGrace)
			hits := 0
			armFailpoint(t, fp, func(name string) {
				hits++
				_, hasCounter := v.counter(dead)
				obj := v.exists(dead)
				switch name {
				case "delete-after-verify":
					if !obj || !hasCounter {
						t.Errorf("%s: object %v counter %v; want both", name, obj, hasCounter)
					}
				case "delete-after-object-delete":
					if obj || !hasCounter {
						t.Errorf("%s: object %v counter %v; want the object gone first, the counter still there", name, obj, hasCounter)
					}
				}
			})
			v.mustCycle()
			if hits != 1 {
				t.Fatalf("failpoint %s hit %d times", fp, hits)
			}
			if _, ok := v.counter(dead); ok || v.exists(dead) {
				t.Fatal("not deleted")
			}
		})
	}
}

// needFailpoints fails a test that needs failpoints in a build without them.
func needFailpoints(t testing.TB) {
	t.Helper()
	if !failpoint.Enabled {
		t.Fatal("failpoints exist only in test builds: run the tests with -tags ebbfs_testclock (make test does)")
	}
}

// armFailpoint arms name with action for the rest of the test.
func armFailpoint(t testing.TB, name string, action func(string)) {
	t.Helper()
	needFailpoints(t)
	failpoint.SetAction(action)
	failpoint.Arm(name)
	t.Cleanup(func() {
		failpoint.Arm("")
		failpoint.SetAction(func(string) {})
	})
}

func TestStaleCounterDropped(t *testing.T) {
	v := newFakeEnv(t)
	_, dead := v.deadSegment("a")
	v.mustCycle()
	v.clk.Advance(MinGrace)
	// A crash between DELETE and the counter removal leaves this state.
	v.mem.Delete(v.ctx, segment.Key(dead))
	st := v.mustCycle()
	if st.StaleDropped != 1 || st.Deleted != 0 {
		t.Fatalf("%+v; want one stale counter dropped", st)
	}
	if _, ok := v.counter(dead); ok {
		t.Fatal("stale counter kept")
	}
	if st.Requests.GetRange != 1 || st.Requests.Delete != 0 {
		t.Fatalf("requests %+v; want the one footer GET", st.Requests)
	}
}

func TestUnderCountRepaired(t *testing.T) {
	v := newFakeEnv(t)
	ino := v.writeFile("f", 4)
	seg := v.segOf(ino, 0)
	c, _ := v.counter(seg)
	// Corrupt the counter: it claims the live segment is dead.
	if err := v.host.AdjustCounter(seg, -c.live, 0, 0); err != nil {
		t.Fatal(err)
	}
	v.mustCycle()
	v.clk.Advance(MinGrace)
	st := v.mustCycle()
	if st.Repaired != 1 || st.Deleted != 0 {
		t.Fatalf("%+v; want the counter repaired and nothing deleted", st)
	}
	if !v.exists(seg) {
		t.Fatal("under-counted segment deleted")
	}
	if got, _ := v.counter(seg); got.live != c.live {
		t.Fatalf("repaired live %d, want %d", got.live, c.live)
	}
	if _, ok := v.deadline(seg); ok {
		t.Fatal("repaired segment kept its deadline")
	}
	if !bytes.Contains([]byte(v.logBuf.String()), []byte("under-counted")) {
		t.Fatal("repair not logged")
	}
	v.barrier()
	v.consistent()
}

// TestUnderCountDeletionWaitsForDurableState: an under-counted segment
// (live 0, still referenced) gets a deadline; its last references are
// removed after the deleting cycle's first barrier, in no journal yet.
// The deletion check then finds no pointer; the cycle must make that state
// durable before its DELETE, or a crash right after brings the pointers
// back into a deleted object (the model's undercount-durable-ref run).
func TestUnderCountDeletionWaitsForDurableState(t *testing.T) {
	v := newEngineEnv(t)
	ino := v.writeFile("f", 4)
	seg := v.segOf(ino, 0)
	c, _ := v.counter(seg)
	if err := v.host.AdjustCounter(seg, -c.live, 0, 0); err != nil {
		t.Fatal(err)
	}
	v.mustCycle() // the deadline
	if _, ok := v.deadline(seg); !ok {
		t.Fatal("no deadline for the under-counted segment")
	}
	v.clk.Advance(MinGrace)

	fresh := make([]byte, 4*segment.ExtentSize)
	for i := range fresh {
		fresh[i] = byte(i*7 + 1)
	}
	var once sync.Once
	armFailpoint(t, "cycle-after-deadlines", func(string) {
		once.Do(func() {
			// The overwrite is committed (sealed), not journaled.
			if _, err := v.e.Write(v.ctx, ino, fresh, 0); err != nil {
				t.Error(err)
			}
			if err := v.e.Seal(v.ctx); err != nil {
				t.Error(err)
			}
		})
	})
	st := v.mustCycle()
	if st.Deleted != 1 || v.exists(seg) {
		t.Fatalf("%+v; want the unreferenced segment deleted", st)
	}

	// A crash right after the cycle: only the store survives.
	n := v.restart()
	if p := n.pointer(ino, 0); p.Segment == seg {
		t.Fatalf("after the crash extent 0 points into deleted segment %016x", seg)
	}
	if got := n.readAll(ino, 4); !bytes.Equal(got, fresh) {
		t.Fatal("after the crash the file does not hold its overwrite")
	}
	// The counter's removal after the DELETE was in no journal either:
	// the next cycles find its object gone and drop it.
	n.mustCycle()
	n.clk.Advance(MinGrace)
	if st := n.mustCycle(); st.StaleDropped != 1 {
		t.Fatalf("%+v; want the stale counter dropped", st)
	}
	n.barrier()
	n.durablyConsistent()
}

func TestReadErrorKeepsSegmentAndDeadline(t *testing.T) {
	for _, which := range []struct {
		name string
		rule objstore.Rule
	}{
		{"footer", objstore.Rule{Ops: []objstore.Op{objstore.OpGetRange}, Prefix: segment.KeyPrefix, Fail: true, Count: 1}},
		{"directory", objstore.Rule{Ops: []objstore.Op{objstore.OpGetRange}, Prefix: segment.KeyPrefix, Fail: true, Skip: 1, Count: 1}},
		{"corrupt", objstore.Rule{Ops: []objstore.Op{objstore.OpGetRange}, Prefix: segment.KeyPrefix, Err: segment.ErrCorrupt, Count: 1}},
		{"delete", objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, Prefix: segment.KeyPrefix, Fail: true, Count: 1}},
	} {
		t.Run(which.name, func(t *testing.T) {
			v := newFakeEnv(t)
			_, dead := v.deadSegment("a")
			v.mustCycle()
			d0, _ := v.deadline(dead)
			v.clk.Advance(MinGrace)
			v.faulty.AddRule(which.rule)
			st, err := v.cycle()
			if err == nil || st.Kept != 1 || st.Deleted != 0 {
				t.Fatalf("cycle with a read error: %+v, err %v", st, err)
			}
			if !v.exists(dead) {
				t.Fatal("segment deleted despite the error")
			}
			if _, ok := v.counter(dead); !ok {
				t.Fatal("counter removed despite the error")
			}
			if d, ok := v.deadline(dead); !ok || d != d0 {
				t.Fatalf("deadline %v (ok %v), want the original %v", d, ok, d0)
			}
			if st := v.mustCycle(); st.Deleted != 1 {
				t.Fatalf("retry: %+v", st)
			}
		})
	}
}

func TestSegmentsAboveCutoffIgnored(t *testing.T) {
	v := newFakeEnv(t)
	// A counter for an id above every sealed segment (as if sealed after
	// the cutoff) is neither aged nor repacked.
	future := v.host.SweepHorizon() + 100
	if err := v.host.AdjustCounter(future, 0, 1000, 2000); err != nil {
		t.Fatal(err)
	}
	st := v.mustCycle()
	if st.Dead != 0 || st.NewDeadlines != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestCycleSealsAndBarriersFirst(t *testing.T) {
	v := newEngineEnv(t)
	a, err := v.e.Create(v.ctx, 1, "dirty", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.e.Write(v.ctx, a.Ino, bytes.Repeat([]byte{7}, 3*segment.ExtentSize), 0); err != nil {
		t.Fatal(err)
	}
	before := len(v.objects())
	st := v.mustCycle()
	if v.e.DB().Pending() != 0 {
		t.Fatal("the cycle did not run the barrier")
	}
	if len(v.objects()) != before+1 {
		t.Fatal("the cycle did not seal the dirty data")
	}
	if p := v.pointer(a.Ino, 0); p.Segment >= st.Cutoff {
		t.Fatalf("sealed segment %016x not below the cutoff %016x", p.Segment, st.Cutoff)
	}
}
