package reclaim

import (
	"testing"
	"time"

	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

func (v *env) setLastSweep(val []byte) {
	v.t.Helper()
	if val == nil {
		v.metaDelete(LastSweepKey)
	} else {
		v.metaSet(LastSweepKey, val)
	}
}

func (v *env) firstSweepDelay() time.Duration {
	v.t.Helper()
	v.r.scheduleFirstSweep()
	v.r.mu.Lock()
	defer v.r.mu.Unlock()
	if !v.r.mu.sweepKnown {
		v.t.Fatal("no sweep scheduled")
	}
	return v.r.mu.sweepAt - v.clk.Mono()
}

func TestSweepStartupDelayPastTimestamp(t *testing.T) {
	v := newFakeEnv(t)
	v.setLastSweep(encodeLastSweep(t0.Add(-5 * time.Hour)))
	if d := v.firstSweepDelay(); d != 19*time.Hour {
		t.Fatalf("delay %v, want 19h (24h after the last sweep)", d)
	}
	v.setLastSweep(encodeLastSweep(t0.Add(-30 * time.Hour)))
	if d := v.firstSweepDelay(); d != 0 {
		t.Fatalf("delay %v for an overdue sweep, want 0", d)
	}
}

func TestSweepStartupDelayFutureTimestamp(t *testing.T) {
	v := newFakeEnv(t)
	v.setLastSweep(encodeLastSweep(t0.Add(100 * time.Hour)))
	if d := v.firstSweepDelay(); d != SweepInterval {
		t.Fatalf("delay %v for a future timestamp, want at most one interval (24h)", d)
	}
	v.setLastSweep(encodeLastSweep(t0.Add(time.Hour)))
	if d := v.firstSweepDelay(); d != SweepInterval {
		t.Fatalf("delay %v for a slightly future timestamp, want 24h", d)
	}
}

func TestSweepStartupDelayMissingTimestamp(t *testing.T) {
	v := newFakeEnv(t)
	if d := v.firstSweepDelay(); d != 0 {
		t.Fatalf("delay %v without a timestamp, want 0", d)
	}
}

func TestSweepStartupDelayInvalidTimestamp(t *testing.T) {
	v := newFakeEnv(t)
	for _, bad := range [][]byte{{}, []byte("yesterday"), make([]byte, 8), {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		v.setLastSweep(bad)
		if d := v.firstSweepDelay(); d != 0 {
			t.Fatalf("delay %v for invalid timestamp %x, want 0", d, bad)
		}
	}
}

func TestOrphanSweepDeletesOnlyUnreferenced(t *testing.T) {
	v := newFakeEnv(t)
	ino := v.writeFile("f", 4)
	live := v.segOf(ino, 0)
	orphan := v.orphan(3)
	// An unreadable counter-less object (directory will not parse).
	badID := v.host.NewSegmentID()
	v.host.SegmentDone(badID)
	v.mem.Put(v.ctx, segment.Key(badID), make([]byte, 500), objstore.PutOptions{})
	// A referenced segment whose counter was lost.
	ino2 := v.writeFile("g", 2)
	lost := v.segOf(ino2, 0)
	lostCounter, _ := v.counter(lost)
	v.metaDelete(schema.CounterKey(lost))
	// An upload still in flight (above the horizon).
	inflight := v.host.NewSegmentID()
	bl := segment.NewBuilder(v.keys, inflight, segment.CodecNone)
	bl.Add(segment.FrameID{Ino: 5, Extent: 0, Gen: inflight}, []byte("x"))
	segment.Upload(v.ctx, v.mem, inflight, bl.Finish())
	// A key that is not a segment key.
	v.mem.Put(v.ctx, "segments/42/not-a-segment", []byte("?"), objstore.PutOptions{})

	st, err := v.r.sweep(v.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 1 || st.Unreadable != 1 || st.Referenced != 1 || st.Unrecognised != 1 || !st.Complete {
		t.Fatalf("%+v", st)
	}
	if v.exists(orphan) {
		t.Fatal("unreferenced orphan kept")
	}
	for name, id := range map[string]uint64{"live": live, "unreadable": badID, "referenced": lost, "in flight": inflight} {
		if !v.exists(id) {
			t.Fatalf("%s segment deleted", name)
		}
	}
	if _, err := v.mem.Head(v.ctx, "segments/42/not-a-segment"); err != nil {
		t.Fatal("unrecognised key deleted")
	}
	if c, ok := v.counter(lost); !ok || c != lostCounter {
		t.Fatalf("recreated counter %+v (ok %v), want %+v", c, ok, lostCounter)
	}
	v.host.SegmentDone(inflight)
	v.mem.Delete(v.ctx, segment.Key(badID))
	v.mem.Delete(v.ctx, segment.Key(inflight))
	v.barrier()
	v.consistent()
}

func TestOrphanSweepConsidersCompleteListing(t *testing.T) {
	v := newFakeEnv(t)
	// 1,100 counter-less objects in one shard (more than one listing page),
	// every 100th unreadable.
	const n = 1100
	bad := 0
	for k := 1; k <= n; k++ {
		id := uint64(k)<<8 | 0x42 // epoch 0: below this writer's horizon
		if k%100 == 0 {
			v.mem.Put(v.ctx, segment.Key(id), make([]byte, 100), objstore.PutOptions{})
			bad++
			continue
		}
		b := segment.NewBuilder(v.keys, id, segment.CodecNone)
		b.Add(segment.FrameID{Ino: 777, Extent: uint64(k), Gen: id}, []byte("orphan"))
		if err := segment.Upload(v.ctx, v.mem, id, b.Finish()); err != nil {
			t.Fatal(err)
		}
	}
	st, err := v.r.sweep(v.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != n-bad || st.Unreadable != bad || !st.Complete {
		t.Fatalf("%+v; want every readable orphan deleted in one sweep", st)
	}
	if got := len(v.objects()); got != bad {
		t.Fatalf("%d objects left, want the %d unreadable", got, bad)
	}
}

func TestOrphanSweepOnlyListOfSegments(t *testing.T) {
	v := newFakeEnv(t)
	v.deadSegment("a")
	v.fragmented("b")
	v.orphan(2)
	list0 := v.count.CountsFor(segment.KeyPrefix).List
	for i := 0; i < 3; i++ {
		st := v.mustCycle()
		if st.Requests.List != 0 {
			t.Fatalf("cycle %d listed: %+v", i, st.Requests)
		}
		v.clk.Advance(MinGrace)
	}
	if got := v.count.CountsFor(segment.KeyPrefix).List - list0; got != 0 {
		t.Fatalf("cycles sent %d LISTs of segments/", got)
	}
	st, err := v.r.sweep(v.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deleted != 1 {
		t.Fatalf("%+v", st)
	}
	if got := v.count.CountsFor(segment.KeyPrefix).List - list0; got != 256 || st.Requests.List != 256 {
		t.Fatalf("sweep sent %d LISTs of segments/ (summary %d), want one per shard", got, st.Requests.List)
	}
	v.barrier()
	v.consistent()
}

func TestSweepOnlyCompletedUpdatesTimestamp(t *testing.T) {
	v := newEngineEnv(t, func(o *Options) { o.DisableSweep = false })
	old := t0.Add(-48 * time.Hour)
	v.setLastSweep(encodeLastSweep(old))
	orphan := v.orphan(1)
	v.faulty.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpList}, Prefix: segment.ShardPrefix(7), Fail: true, Count: 1})
	st, err := v.r.runScheduledSweep(v.ctx)
	if err == nil || st.Complete {
		t.Fatalf("sweep with a failed LIST: %+v, %v; want incomplete", st, err)
	}
	if v.exists(orphan) && orphan&0xff != 7 {
		t.Fatal("an incomplete sweep must still judge the shards it listed")
	}
	val, _, _ := v.host.MetaGet(LastSweepKey)
	if got, ok := decodeLastSweep(val); !ok || !got.Equal(old) {
		t.Fatalf("incomplete sweep changed the timestamp to %v", got)
	}
	v.r.mu.Lock()
	retry := v.r.mu.sweepAt - v.clk.Mono()
	v.r.mu.Unlock()
	if retry != RetryDelay {
		t.Fatalf("retry in %v, want %v", retry, RetryDelay)
	}
	v.clk.Advance(time.Hour)
	st, err = v.r.runScheduledSweep(v.ctx)
	if err != nil || !st.Complete {
		t.Fatalf("%+v %v", st, err)
	}
	val, _, _ = v.host.MetaGet(LastSweepKey)
	if got, ok := decodeLastSweep(val); !ok || !got.Equal(v.clk.Now()) {
		t.Fatalf("timestamp %v, want %v", got, v.clk.Now())
	}
	// Committed and barriered: the durable metadata has it.
	if v.e.DB().Pending() != 0 {
		t.Fatal("timestamp not barriered")
	}
}
