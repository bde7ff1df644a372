package reclaim

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

const mib = 1 << 20

// testBudget is the job budget the selection tests are written for.
const testBudget = 256 * mib

func TestSelectionNeedsOneMiB(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []counterEntry
		want  int // jobs
	}{
		{"one tiny segment, mostly dead", []counterEntry{{id: 1, live: 100 << 10, total: 900 << 10, size: 901 << 10}}, 0},
		{"two tiny segments under 1 MiB live", []counterEntry{
			{id: 1, live: 200 << 10, total: 300 << 10, size: 301 << 10},
			{id: 2, live: 300 << 10, total: 300 << 10, size: 301 << 10}}, 0},
		{"several small sources with 1 MiB live", []counterEntry{
			{id: 1, live: 600 << 10, total: 600 << 10, size: 601 << 10},
			{id: 2, live: 600 << 10, total: 600 << 10, size: 601 << 10}}, 1},
		{"one source freeing 1 MiB", []counterEntry{{id: 1, live: 1 * mib, total: 2*mib + 100, size: 2*mib + 200}}, 1},
		{"one source freeing less", []counterEntry{{id: 1, live: 9 * mib, total: 10 * mib, size: 10*mib - 100<<10}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := selectJobs(tc.cands, testBudget); len(got) != tc.want {
				t.Fatalf("%d jobs, want %d: %+v", len(got), tc.want, got)
			}
		})
	}
}

func TestSelectionMostFragmentedFirstAndBudget(t *testing.T) {
	cands := []counterEntry{
		{id: 1, live: 150 * mib, total: 200 * mib, size: 200 * mib}, // 25% dead
		{id: 2, live: 20 * mib, total: 200 * mib, size: 200 * mib},  // 90% dead
		{id: 3, live: 300 * mib, total: 600 * mib, size: 600 * mib}, // 50% dead, over budget alone
		{id: 4, live: 100 * mib, total: 200 * mib, size: 200 * mib}, // 50% dead
	}
	jobs := selectJobs(cands, testBudget)
	var order [][]uint64
	for _, j := range jobs {
		var ids []uint64
		for _, s := range j.srcs {
			ids = append(ids, s.id)
		}
		order = append(order, ids)
		if len(j.srcs) > 1 && j.live > testBudget {
			t.Fatalf("job %v holds %d live bytes, over the budget", ids, j.live)
		}
	}
	// 2 (90%) first; then 4 and 3 (50%, less live first), 1 last.
	want := [][]uint64{{2, 4}, {3}, {1}}
	if len(order) != len(want) {
		t.Fatalf("jobs %v, want %v", order, want)
	}
	for i := range want {
		if len(order[i]) != len(want[i]) {
			t.Fatalf("jobs %v, want %v", order, want)
		}
		for k := range want[i] {
			if order[i][k] != want[i][k] {
				t.Fatalf("jobs %v, want %v", order, want)
			}
		}
	}
}

// fragmented writes a 64-extent file and overwrites its first 40
// extents: the first segment is 62% dead. It returns the file and that
// segment.
func (v *env) fragmented(name string) (uint64, uint64) {
	v.t.Helper()
	ino := v.writeFile(name, 64)
	src := v.segOf(ino, 0)
	v.writeExtents(ino, 0, 40)
	return ino, src
}

func TestRepackRelocatesLiveFrames(t *testing.T) {
	v := newFakeEnv(t)
	ino, src := v.fragmented("f")
	want := v.readAll(ino, 64)
	srcSize := v.objects()[src]
	st := v.mustCycle()
	if st.Repacks != 1 || st.RelocatedFrames != 24 {
		t.Fatalf("%+v; want one repack relocating the 24 live frames", st)
	}
	// One output PUT, and the frames are fetched with coalesced GETs.
	if st.Requests.Put != 1 || st.Requests.GetRange != 3 {
		t.Fatalf("requests %+v; want footer + directory + 1 coalesced run GET, 1 PUT", st.Requests)
	}
	out := v.segOf(ino, 40)
	if out == src {
		t.Fatal("extent 40 still in the source")
	}
	var last segment.Pointer
	for i := uint64(40); i < 64; i++ {
		p := v.pointer(ino, i)
		if p.Segment != out {
			t.Fatalf("extent %d in %016x, want the output %016x", i, p.Segment, out)
		}
		if i > 40 && p.Offset <= last.Offset {
			t.Fatal("output frames not ordered by extent")
		}
		last = p
	}
	if c, _ := v.counter(src); c.live != 0 {
		t.Fatalf("drained source has %d live bytes", c.live)
	}
	if oc, _ := v.counter(out); oc.live <= 0 || oc.live != oc.total || oc.size != v.objects()[out] {
		t.Fatalf("output counter %+v, object %d bytes", oc, v.objects()[out])
	}
	if v.objects()[out] >= srcSize {
		t.Fatal("output not smaller than the source")
	}
	// What the engine had cached (the reads above) is cached at its new
	// place: reading it again asks the store for nothing.
	before := v.count.Snapshot()
	if got := v.readAll(ino, 64); !bytes.Equal(got, want) {
		t.Fatal("content changed by repack")
	}
	if after := v.count.Snapshot(); after.Get != before.Get || after.GetRange != before.GetRange {
		t.Fatalf("reading the relocated frames took %d GETs and %d ranged GETs; they were cached before the repack",
			after.Get-before.Get, after.GetRange-before.GetRange)
	}
	v.barrier()
	v.consistent()
}

func TestDrainedSourceNotDeletedSameCycle(t *testing.T) {
	v := newFakeEnv(t)
	ino, src := v.fragmented("f")
	want := v.readAll(ino, 64)
	st := v.mustCycle()
	if st.Repacks != 1 || !v.exists(src) {
		t.Fatalf("%+v, source exists %v", st, v.exists(src))
	}
	if _, ok := v.deadline(src); ok {
		t.Fatal("the draining cycle gave the source a deadline")
	}
	v.clk.Advance(time.Hour)
	st = v.mustCycle()
	if st.NewDeadlines != 1 || st.Deleted != 0 || !v.exists(src) {
		t.Fatalf("the next cycle must only age the source: %+v", st)
	}
	v.clk.Advance(MinGrace)
	if st := v.mustCycle(); st.Deleted != 1 || v.exists(src) {
		t.Fatalf("after the grace: %+v", st)
	}
	if got := v.readAll(ino, 64); !bytes.Equal(got, want) {
		t.Fatal("content changed")
	}
	v.barrier()
	v.consistent()
}

func TestRepackCombinesSmallSegments(t *testing.T) {
	v := newFakeEnv(t)
	var inos []uint64
	var srcs []uint64
	for _, n := range []string{"a", "b", "c"} {
		ino := v.writeFile(n, 20) // 640 KiB each: small
		inos = append(inos, ino)
		srcs = append(srcs, v.segOf(ino, 0))
	}
	st := v.mustCycle()
	if st.Repacks != 1 || st.RelocatedFrames != 60 {
		t.Fatalf("%+v; want the three small segments combined", st)
	}
	out := v.segOf(inos[0], 0)
	for _, ino := range inos {
		for i := uint64(0); i < 20; i++ {
			if v.segOf(ino, i) != out {
				t.Fatal("not all frames in one output")
			}
		}
	}
	// The output is over 1 MiB: not a candidate again.
	v.clk.Advance(time.Hour)
	st = v.mustCycle()
	if st.Repacks != 0 || st.NewDeadlines != 3 {
		t.Fatalf("second cycle %+v", st)
	}
	v.clk.Advance(MinGrace)
	st = v.mustCycle()
	if st.Deleted != 3 || st.Repacks != 0 {
		t.Fatalf("third cycle %+v", st)
	}
	for _, s := range srcs {
		if v.exists(s) {
			t.Fatal("source left")
		}
	}
	v.barrier()
	v.consistent()
}

func TestConcurrentOverwriteWinsOverRepoint(t *testing.T) {
	v := newFakeEnv(t)
	ino, _ := v.fragmented("f")
	var once sync.Once
	armFailpoint(t, "repack-after-upload", func(string) {
		once.Do(func() {
			// Overwrite extent 50 after the output was built.
			v.writeExtents(ino, 50, 1)
		})
	})
	newer := v.readAll(ino, 64)
	_ = newer
	st := v.mustCycle()
	if st.RelocatedFrames != 23 {
		t.Fatalf("relocated %d, want 23 (the overwritten extent stays with the newer write)", st.RelocatedFrames)
	}
	out := v.segOf(ino, 40)
	if v.segOf(ino, 50) == out {
		t.Fatal("repoint moved an extent that was overwritten meanwhile")
	}
	if c, _ := v.counter(out); c.live >= c.total {
		t.Fatalf("output counter %+v: the overwritten frame must be dead in it", c)
	}
	v.barrier()
	v.consistent()
}

func TestRepackFailureStopsAdmissions(t *testing.T) {
	v := newFakeEnv(t, func(o *Options) { o.MaxConcurrentRepacks = 1 })
	v.r.budgetForTests = 1 // every source is its own job
	for _, n := range []string{"a", "b", "c"} {
		v.fragmented(n)
	}
	v.faulty.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: segment.KeyPrefix, Fail: true, Count: 1})
	puts0 := v.count.CountsFor(segment.KeyPrefix).Put
	st, err := v.cycle()
	if err == nil || st.RepackFailed != 1 || st.Repacks != 0 {
		t.Fatalf("%+v, err %v; want one failed job and no further admissions", st, err)
	}
	if got := v.count.CountsFor(segment.KeyPrefix).Put - puts0; got != 1 {
		t.Fatalf("%d output PUTs, want the one that failed", got)
	}
	// The next cycle repacks everything.
	st = v.mustCycle()
	if st.Repacks != 3 {
		t.Fatalf("retry %+v", st)
	}
	v.barrier()
	v.consistent()
}

func TestRepackMidRepointIsConsistent(t *testing.T) {
	v := newEngineEnv(t)
	v.r.chunkForTests = 5
	ino, _ := v.fragmented("f")
	hits := 0
	armFailpoint(t, "repack-mid-repoint", func(string) {
		hits++
		// Between two repoint transactions the metadata is consistent.
		rep, err := v.e.Check(v.ctx, false)
		if err != nil || !rep.OK() {
			t.Errorf("mid-repoint check: %v\n%s", err, rep)
		}
	})
	st := v.mustCycle()
	// A failpoint fires once (on its first hit).
	if hits != 1 || st.RelocatedFrames != 24 {
		t.Fatalf("hits %d, %+v", hits, st)
	}
	_ = ino
	v.barrier()
	v.consistent()
}

// The repack jobs running at once hold at most RepackMemory live bytes;
// a job larger than that runs, alone.
func TestByteGate(t *testing.T) {
	g := newByteGate(64)
	g.take(40)
	took := make(chan int64, 2)
	// waits takes n in the background and checks that it waits for the
	// give of held, and then gets through.
	waits := func(n, held int64, why string) {
		t.Helper()
		go func() { g.take(n); took <- n }()
		select {
		case <-took:
			t.Fatal(why)
		case <-time.After(50 * time.Millisecond):
		}
		g.give(held)
		if got := <-took; got != n {
			t.Fatal(got)
		}
	}
	waits(30, 40, "admitted 30 bytes with 40 of 64 in use")
	waits(100, 30, "admitted 100 bytes beside 30")
	g.give(100)
}
