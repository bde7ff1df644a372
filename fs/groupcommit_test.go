package fs

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
)

// countingFS is a test filesystem on a counting local-directory store
// with stats.
func countingFS(t *testing.T) (*testFS, *objstore.Counting, *Stats) {
	t.Helper()
	local, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cs := objstore.NewCounting(local)
	f := newTestFSOn(t, cs)
	f.e.Close(context.Background())
	st := NewStats()
	e, err := Open(context.Background(), Options{Store: cs, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20, Stats: st})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	return f, cs, st
}

// TestSyncWithNothingDirtyCostsNothing: an fsync of a file whose data,
// attributes and metadata are all in the store sends no request, even
// while other files have dirty data or unjournaled changes; one of a file
// with anything not yet durable runs a barrier.
func TestSyncWithNothingDirtyCostsNothing(t *testing.T) {
	f, cs, st := countingFS(t)
	ctx := context.Background()
	a := f.create("a")
	f.write(a, bytes.Repeat([]byte("a"), 40000), 0)
	requests := func(what string, fn func() error) int64 {
		t.Helper()
		before := cs.Snapshot()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n := cs.Snapshot().Sub(before).Requests()
		t.Logf("%s: %d requests", what, n)
		return n
	}
	sync := func(ino uint64) func() error { return func() error { return f.e.Sync(ctx, ino) } }
	if n := requests("fsync of a written file", sync(a)); n < 2 {
		t.Fatalf("the first fsync sent %d requests, want a segment and a journal", n)
	}
	for i := 0; i < 3; i++ {
		if n := requests("fsync again", sync(a)); n != 0 {
			t.Fatalf("fsync of a clean file sent %d requests", n)
		}
	}
	// Another file's dirty data and unjournaled metadata are not a's.
	b := f.create("b")
	f.write(b, []byte("dirty"), 0)
	if _, err := f.e.Mkdir(ctx, RootIno, "d", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	if n := requests("fsync of a clean file while others are dirty", sync(a)); n != 0 {
		t.Fatalf("sent %d requests", n)
	}
	if got := st.Snapshot().SyncsClean; got != 4 {
		t.Fatalf("SyncsClean %d, want 4", got)
	}
	// The root's entries changed: its fsync (fsyncdir) runs a barrier.
	if n := requests("fsyncdir of the changed root", sync(RootIno)); n == 0 {
		t.Fatal("fsyncdir of a directory with new entries sent nothing")
	}
	// A change of a's attributes only, committed but not journaled.
	if _, err := f.e.SetAttr(ctx, a, SetAttr{Valid: SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if n := requests("fsync after chmod", sync(a)); n != 1 {
		t.Fatalf("fsync after chmod sent %d requests, want the journal", n)
	}
	// A write that only changes bytes in place (no new size).
	f.write(a, []byte("z"), 5)
	if n := requests("fsync after an overwrite", sync(a)); n < 2 {
		t.Fatalf("fsync after an overwrite sent %d requests", n)
	}
	if n := requests("fsync again", sync(a)); n != 0 {
		t.Fatalf("sent %d requests", n)
	}
	// Everything fsynced is there after a reopen from the store alone.
	f.e.Close(ctx)
	f.e = nil
	f.open()
	if got := f.read(a, 40000, 0); got[5] != 'z' || got[39999] != 'a' {
		t.Fatal("fsynced data lost")
	}
}

// TestGroupCommitSharesBarriers: 8 goroutines each doing write+fsync on
// their own file share barriers: far fewer barriers run, and far fewer
// store writes are sent, than fsyncs are made, and every fsync still
// makes its own write durable.
func TestGroupCommitSharesBarriers(t *testing.T) {
	f, cs, st := countingFS(t)
	ctx := context.Background()
	const threads, rounds = 8, 100
	inos := make([]uint64, threads)
	for i := range inos {
		inos[i] = f.create(fmt.Sprintf("f%d", i))
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	before, stBefore := cs.Snapshot(), st.Snapshot()
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for i, ino := range inos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				b := bytes.Repeat([]byte{byte(i*rounds + r)}, 4096)
				if _, err := f.e.Write(ctx, ino, b, int64(r)*4096); err != nil {
					errs <- err
					return
				}
				if err := f.e.Sync(ctx, ino); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d, sd := cs.Snapshot().Sub(before), st.Snapshot()
	fsyncs := int64(threads * rounds)
	barriers := int64(sd.Barriers - stBefore.Barriers)
	joins := int64(sd.BarrierJoins - stBefore.BarrierJoins)
	clean := int64(sd.SyncsClean - stBefore.SyncsClean)
	t.Logf("%d fsyncs: %d barriers run, %d joined another's, %d found their file durable already; %d store writes (%.2f per fsync)",
		fsyncs, barriers, joins, clean, d.Put, float64(d.Put)/float64(fsyncs))
	// (The periodic barrier may add one.)
	if barriers+joins+clean < fsyncs {
		t.Errorf("%d barriers, %d joins and %d clean fsyncs for %d fsyncs", barriers, joins, clean, fsyncs)
	}
	if barriers*2 > fsyncs {
		t.Errorf("%d barriers for %d fsyncs: barriers were not shared", barriers, fsyncs)
	}
	// One thread alone would run a barrier (a segment and a journal:
	// two writes) per fsync.
	if d.Put > fsyncs {
		t.Errorf("%d store writes for %d fsyncs: barriers were not shared", d.Put, fsyncs)
	}
	f.e.Close(ctx)
	f.e = nil
	f.open()
	for i, ino := range inos {
		got := f.read(ino, threads*rounds*4096, 0)
		for r := 0; r < rounds; r++ {
			if len(got) < (r+1)*4096 || got[r*4096] != byte(i*rounds+r) {
				t.Fatalf("file %d round %d: fsynced write lost", i, r)
			}
		}
	}
}

// BenchmarkGroupCommit: 4 KiB write+fsync (Engine.Sync) loops on a local
// store in process, one goroutine then eight, each on its own file, for
// 4 s each; it reports commits per second and their ratio. Run once
// (-benchtime=1x): make bench. BenchmarkMountGroupCommit in tests/ is the
// same through the mount.
func BenchmarkGroupCommit(b *testing.B) {
	rate := func(threads int) float64 {
		local, err := objstore.NewLocal(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		k, err := Init(ctx, local, "password123")
		if err != nil {
			b.Fatal(err)
		}
		e, err := Open(ctx, Options{Store: local, Keys: k, CacheDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close(ctx)
		var commits atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, threads)
		start := time.Now()
		for i := 0; i < threads; i++ {
			a, err := e.Create(ctx, RootIno, fmt.Sprintf("f%d", i), 0o644, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for r := 0; time.Since(start) < 4*time.Second; r++ {
					buf[0] = byte(r)
					if _, err := e.Write(ctx, a.Ino, buf, int64(r%256)*4096); err != nil {
						errs <- err
						return
					}
					if err := e.Sync(ctx, a.Ino); err != nil {
						errs <- err
						return
					}
					commits.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return float64(commits.Load()) / time.Since(start).Seconds()
	}
	one, eight := rate(1), rate(8)
	b.ReportMetric(one, "commits/s-1thread")
	b.ReportMetric(eight, "commits/s-8threads")
	b.ReportMetric(eight/one, "ratio-8:1")
}

func TestTouches(t *testing.T) {
	for _, c := range []struct {
		k    []byte
		want bool
	}{
		{schema.InodeKey(5), true},
		{schema.ExtentKey(5, 9), true},
		{schema.DirentKey(5, "x"), true},
		{schema.InodeKey(6), false},
		{schema.XattrKey(6, "user.a"), false},
		{schema.CounterKey(5), false},
		{lsm.KeyAppliedSeq, false},
		{[]byte{schema.PFsSystem, 'n'}, false},
		{[]byte{'?', 0, 0, 0, 0, 0, 0, 0, 6}, true}, // unknown kind: counts
		{nil, true},
	} {
		if got := touches(c.k, 5); got != c.want {
			t.Errorf("touches(%q, 5) = %v, want %v", c.k, got, c.want)
		}
	}
}
