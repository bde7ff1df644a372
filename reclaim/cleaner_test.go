package reclaim

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/objstore"
)

// fakeEnv is a Reclaimer on a fakeHost: no engine, a memory store, a fake
// clock.
type fakeEnv struct {
	t      testing.TB
	ctx    context.Context
	mem    *objstore.Mem
	keys   *keys.Keys
	clk    *clock.Fake
	logBuf *syncBuffer
	h      *fakeHost
	stats  *CleanerStats
	r      *Reclaimer
}

func newFakeEnv(t testing.TB, mod ...func(*Options)) *fakeEnv {
	t.Helper()
	kdf := keys.DefaultKDF()
	kdf.Time, kdf.MemoryKiB, kdf.Threads = 1, 64, 1
	_, k, err := keys.NewDescriptor("password123", kdf)
	if err != nil {
		t.Fatal(err)
	}
	v := &fakeEnv{t: t, ctx: context.Background(), mem: objstore.NewMem(), keys: k, clk: clock.NewFake(t0),
		logBuf: &syncBuffer{}, stats: NewCleanerStats()}
	v.h = newFakeHost(t, v.mem, k)
	o := Options{Host: v.h, Store: v.mem, Keys: k, Checkpoints: &fakeCheckpoints{}, Clock: v.clk,
		Logger: slog.New(slog.NewTextHandler(v.logBuf, nil)), FlushInterval: 10 * time.Second, CleanerStats: v.stats, DisableSweep: true}
	for _, m := range mod {
		m(&o)
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	v.r = r
	t.Cleanup(func() { r.Close() })
	return v
}

// extents counts the pointers of ino.
func (v *fakeEnv) extents(ino uint64) int {
	lo, hi := schema.ExtentRange(ino, 0, 0)
	n := 0
	v.h.MetaScan(lo, hi, func(_, _ []byte) error { n++; return nil })
	return n
}

func (v *fakeEnv) live(seg uint64) int64 {
	b, ok, _ := v.h.MetaGet(schema.CounterKey(seg))
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
	v := newFakeEnv(t)
	gone := v.h.write(v.ctx, 1, 10, 0, 12)
	kept := v.h.write(v.ctx, 2, 11, 0, 3)
	v.h.unlink(10)
	v.r.Start()
	waitFor(t, "the cleaner to remove the deleted file's pointers", func() bool { return v.extents(10) == 0 })
	if l := v.live(gone); l != 0 {
		t.Errorf("deleted file's segment: %d live bytes, want 0", l)
	}
	if v.extents(11) != 3 || v.live(kept) <= 0 {
		t.Errorf("the other file: %d extents, %d live bytes; want 3 and its bytes", v.extents(11), v.live(kept))
	}
	if _, ok, _ := v.h.MetaGet(schema.TombstoneKey(10)); ok {
		t.Error("the tombstone survived its file's last pointer")
	}
	waitFor(t, "the cleaner's figures", func() bool { return v.stats.Snapshot().CleanerBatches == 1 })
	s := v.stats.Snapshot()
	if s.TombstonesProcessed != 1 || s.ExtentsCleaned != 12 || s.BytesCleaned == 0 || s.LastBatch.Extents != 12 || s.LastBatch.At.IsZero() {
		t.Errorf("cleaner figures %+v, want 1 tombstone, 12 extents and their bytes", s)
	}
}

// TestCleanerWakesOnTombstone: an idle cleaner (the fake clock never lets
// CleanerIdle pass) runs when the engine reports a tombstone, through
// Triggers as the daemon wires it; without a report it runs once
// CleanerIdle passed.
func TestCleanerWakesOnTombstone(t *testing.T) {
	v := newFakeEnv(t)
	var calls atomic.Int32
	v.h.clean = func(ctx context.Context) (int, int, int64, error) {
		calls.Add(1)
		return v.h.cleanAll()
	}
	trig := &Triggers{}
	trig.Tombstoned() // before Attach: dropped; the first pass finds it
	trig.Attach(v.r)
	v.r.Start()
	waitFor(t, "the cleaner's first pass", func() bool { return calls.Load() == 1 && v.clk.Waiters() > 0 })

	v.h.write(v.ctx, 1, 10, 0, 2)
	v.h.unlink(10)
	trig.Tombstoned()
	waitFor(t, "the woken cleaner", func() bool { return v.extents(10) == 0 })
	// The pass that cleaned is followed by one that finds nothing; then
	// the cleaner sleeps.
	waitFor(t, "the pass after the cleaning one", func() bool { return calls.Load() == 3 })

	v.h.write(v.ctx, 2, 11, 0, 2)
	v.h.unlink(11)
	waitFor(t, "a timer on the fake clock", func() bool { return v.clk.Waiters() > 0 })
	if v.extents(11) != 2 || calls.Load() != 3 {
		t.Fatal("the cleaner ran with neither a wake-up nor its idle time passed")
	}
	waitFor(t, "the cleaner after its idle time", func() bool {
		v.clk.Advance(CleanerIdle)
		return v.extents(11) == 0
	})
}

// TestCleanerRepeatsWhileWorkRemains: a pass that removed pointers is
// followed at once by another, until one finds nothing.
func TestCleanerRepeatsWhileWorkRemains(t *testing.T) {
	v := newFakeEnv(t)
	var calls atomic.Int32
	v.h.clean = func(ctx context.Context) (int, int, int64, error) {
		if calls.Add(1) <= 3 {
			return 0, 100, 1000, nil
		}
		return 1, 0, 0, nil // the last pass finishes a tombstone
	}
	v.r.Start()
	waitFor(t, "four passes", func() bool { return calls.Load() >= 4 && v.clk.Waiters() > 0 })
	if n := calls.Load(); n != 4 {
		t.Fatalf("%d passes without a wake-up, want 4", n)
	}
	s := v.stats.Snapshot()
	if s.ExtentsCleaned != 300 || s.BytesCleaned != 3000 || s.TombstonesProcessed != 1 || s.CleanerBatches != 4 {
		t.Fatalf("figures %+v, want 300 extents, 3000 bytes, 1 tombstone in 4 batches", s)
	}
}

// TestCleanerLogsErrorsAndGoesOn: a failed pass is logged and the cleaner
// sleeps, then works again when woken; what the failed pass committed
// before its error is counted.
func TestCleanerLogsErrorsAndGoesOn(t *testing.T) {
	v := newFakeEnv(t)
	var calls atomic.Int32
	boom := errors.New("metadata store unhappy")
	v.h.clean = func(ctx context.Context) (int, int, int64, error) {
		if calls.Add(1) == 1 {
			return 0, 5, 50, boom
		}
		return 0, 0, 0, nil
	}
	v.r.Start()
	waitFor(t, "the failed pass", func() bool { return calls.Load() == 1 && v.clk.Waiters() > 0 })
	if !strings.Contains(v.logBuf.String(), "tombstone cleaner") || !strings.Contains(v.logBuf.String(), boom.Error()) {
		t.Fatalf("the failure was not logged:\n%s", v.logBuf)
	}
	if s := v.stats.Snapshot(); s.ExtentsCleaned != 5 || s.BytesCleaned != 50 {
		t.Fatalf("figures %+v: the failed pass's committed part not counted", s)
	}
	v.r.Tombstoned()
	waitFor(t, "the cleaner to run again", func() bool { return calls.Load() == 2 })
}

// TestCleanerStopsAtClose: Close stops the cleaner (no pass after it), a
// Reclaimer never started has none, and the engine's reports after Close
// do nothing.
func TestCleanerStopsAtClose(t *testing.T) {
	v := newFakeEnv(t)
	var calls atomic.Int32
	v.h.clean = func(ctx context.Context) (int, int, int64, error) {
		calls.Add(1)
		return 0, 0, 0, nil
	}
	v.r.Tombstoned() // not started: nothing to wake
	v.r.Start()
	waitFor(t, "the first pass", func() bool { return calls.Load() == 1 })
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

	idle := newFakeEnv(t)
	idle.h.clean = func(ctx context.Context) (int, int, int64, error) {
		t.Error("a Reclaimer never started ran the cleaner")
		return 0, 0, 0, nil
	}
	idle.h.write(idle.ctx, 1, 10, 0, 1)
	idle.h.unlink(10)
	idle.r.Tombstoned()
	if err := idle.r.Close(); err != nil {
		t.Fatal(err)
	}
}
