package reclaim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// scheduledGC returns a constructor of metadata GCs on e that keep their
// schedule in state: each call stands for a new writer process.
func (e *metaEnv) scheduledGC(state string) func() *MetaGC {
	return func() *MetaGC {
		return NewMetaGC(MetaGCOptions{Store: e.s, DB: e.db, Clock: e.clk, StatePath: state})
	}
}

// TestMetaGCScheduleSurvivesRestarts: with a schedule file, a writer
// with no record of a pass runs one at once; the next writer within the
// interval waits for the rest of it; a clean stop runs a pass that is due
// and none that is not; a time in the future waits at most one interval.
func TestMetaGCScheduleSurvivesRestarts(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 4)
	state := filepath.Join(t.TempDir(), MetaGCStateFile)
	gc := e.scheduledGC(state)
	e.clk.Advance(2 * time.Minute) // old enough to delete

	// No record: a pass at once, without fake time passing.
	g := gc()
	g.Start()
	testutil.Eventually(t, 10*time.Second, "a pass at start", func() bool { _, n := g.LastPass(); return n > 0 })
	last, _ := g.LastPass()
	g.Stop(ctx)
	if last.Err != nil || last.Stats.Deleted == 0 {
		t.Fatalf("first pass: %+v", last)
	}
	if _, n := g.LastPass(); n != 1 {
		t.Fatalf("a stop right after a pass ran %d passes, want none more", n-1)
	}
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("schedule not recorded: %v", err)
	}

	// Ten minutes later: the next writer waits the remaining 20.
	e.clk.Advance(10 * time.Minute)
	e.round()
	e.round()
	e.clk.Advance(2 * time.Minute)
	g = gc()
	if w := g.firstWait(); w < 17*time.Minute || w > 18*time.Minute {
		t.Fatalf("first wait 12 minutes after a pass: %v, want 18m", w)
	}
	// A stop before it is due runs nothing.
	g.Start()
	g.Stop(ctx)
	if _, n := g.LastPass(); n != 0 {
		t.Fatalf("a stop before the pass was due ran %d", n)
	}
	// Past the interval: a stop runs the due pass.
	e.clk.Advance(20 * time.Minute)
	g = gc()
	g.Start()
	g.Stop(ctx)
	if last, n := g.LastPass(); n != 1 || last.Err != nil || last.Stats.Deleted == 0 {
		t.Fatalf("stop with a pass due: %d passes, last %+v", n, last)
	}

	// A record from the future waits one interval, not longer.
	if err := os.WriteFile(state, encodeLastSweep(e.clk.Now().Add(24*time.Hour)), 0o600); err != nil {
		t.Fatal(err)
	}
	if w := gc().firstWait(); w != DefaultMetaGCInterval {
		t.Fatalf("first wait after a future record: %v", w)
	}
	// A damaged record: a pass at once.
	if err := os.WriteFile(state, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if w := gc().firstWait(); w != 0 {
		t.Fatalf("first wait after a damaged record: %v", w)
	}
}

// TestMetaGCDueAfterManyJournals: within the interval, a writer's start
// and clean stop run a pass once the newest manifest covers
// MetaGCDueJournals journals more than the last pass saw (short writers
// that each publish at their stop), and not before.
func TestMetaGCDueAfterManyJournals(t *testing.T) {
	ctx := context.Background()
	e := newMetaEnv(t, 2)
	state := filepath.Join(t.TempDir(), MetaGCStateFile)
	gc := e.scheduledGC(state)
	g := gc()
	if _, err := g.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// journals moves the newest manifest n journal sequences on.
	journals := func(n int) {
		t.Helper()
		for i := range n {
			b := e.db.NewBatch()
			if err := b.Set([]byte("j"), fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
			if err := e.db.Commit(b); err != nil {
				t.Fatal(err)
			}
			if err := e.db.Barrier(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.db.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	journals(MetaGCDueJournals / 2)
	g = gc()
	if w := g.firstWait(); w < DefaultMetaGCInterval-time.Minute {
		t.Fatalf("first wait %v with the manifest %d journals on, want the interval", w, MetaGCDueJournals/2)
	}
	g.Start()
	g.Stop(ctx)
	if _, n := g.LastPass(); n != 0 {
		t.Fatalf("a stop %d journals on ran %d passes", MetaGCDueJournals/2, n)
	}
	journals(MetaGCDueJournals / 2)
	if w := gc().firstWait(); w != 0 {
		t.Fatalf("first wait %v with the manifest %d journals on, want none", w, MetaGCDueJournals)
	}
	g = gc()
	g.Start()
	g.Stop(ctx)
	if last, n := g.LastPass(); n == 0 || last.Err != nil {
		t.Fatalf("start and stop %d journals on: %d passes, last %+v", MetaGCDueJournals, n, last)
	}
	// The pass recorded the new manifest: the next writer waits.
	if w := gc().firstWait(); w < DefaultMetaGCInterval-time.Minute {
		t.Fatalf("first wait %v right after a pass, want the interval", w)
	}
}
