package lsm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// A standby's announcement reaches the writer at its next lease write,
// which then heartbeats at a quarter of the standby's takeover_after; the
// standby's takeover fences the writer at its next barrier, and carries
// every acknowledged batch.
func TestStandbyAnnounceTakeOverFences(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	k := testKeys(t)
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := testOpts(t, s, k)
	a.Host, a.Clock = "alpha", fc
	w := mustOpen(t, a)
	defer w.Close()
	if got := w.HeartbeatEvery(); got != a.LeaseTTL/3 {
		t.Fatalf("heartbeat every %v with no standby, want %v", got, a.LeaseTTL/3)
	}
	set(t, w, "ia", "acked")
	barrier(t, w)

	b := testOpts(t, s, k)
	b.Host, b.Clock, b.ReadOnly, b.StandbyID = "beta", fc, true, "sb-beta"
	sb := mustOpen(t, b)
	defer sb.Close()
	entry := StandbyEntry{ID: "sb-beta", Holder: "beta", TakeoverAfterMS: 5000, Renewal: 1}
	if _, _, found, err := AnnounceStandby(ctx, s, entry, false); err != nil || !found {
		t.Fatalf("announce: found %v, %v", found, err)
	}
	// The writer hears of it at its next lease write.
	fc.Advance(a.LeaseTTL / 3)
	testutil.Eventually(t, 10*time.Second, "the writer heartbeating for the standby", func() bool {
		return w.HeartbeatEvery() == 1250*time.Millisecond
	})
	l, etag, _, err := ReadLeaseTag(ctx, s)
	if err != nil || len(l.Standbys) != 1 || l.Standbys[0].ID != "sb-beta" {
		t.Fatalf("lease after the writer adopted the standby: %+v, %v", l, err)
	}
	beats := w.Heartbeats()
	fc.Advance(1300 * time.Millisecond)
	testutil.Eventually(t, 10*time.Second, "a heartbeat at the standby's pace", func() bool { return w.Heartbeats() > beats })

	// Takeover on a stale ETag loses.
	if _, err := sb.TakeLease(ctx, l, etag); !errors.Is(err, ErrLeaseMoved) {
		t.Fatalf("takeover on a stale ETag: %v, want ErrLeaseMoved", err)
	}
	l, etag, _, _ = ReadLeaseTag(ctx, s)
	if _, _, err := sb.FollowNext(ctx); err != nil {
		t.Fatal(err)
	}
	mine, err := sb.TakeLease(ctx, l, etag)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if mine.Epoch != l.Epoch+1 || len(mine.Standbys) != 0 {
		t.Fatalf("new lease %+v", mine)
	}
	// The zombie gets its journal in before the new writer's epoch start:
	// it is replayed, so nothing acknowledged is lost.
	set(t, w, "ib", "acked-late")
	barrier(t, w)
	if n, err := sb.BecomeWriter(ctx); err != nil || n != 1 {
		t.Fatalf("BecomeWriter: replayed %d, %v", n, err)
	}
	wantVal(t, sb, "ia", "acked")
	wantVal(t, sb, "ib", "acked-late")
	set(t, w, "ic", "never")
	if err := w.Barrier(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie barrier after the takeover: %v, want ErrFenced", err)
	}
	set(t, sb, "id", "new")
	barrier(t, sb)
	wantVal(t, sb, "ic", "")
}

// Of several standbys taking over on the same record, exactly one wins.
func TestStandbysRaceOneWins(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	k := testKeys(t)
	a := testOpts(t, s, k)
	a.Host = "alpha"
	w := mustOpen(t, a)
	crash(w)
	l, etag, _, err := ReadLeaseTag(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  int
		dbs  []*DB
		errs []error
	)
	for i := range n {
		o := testOpts(t, s, k)
		o.Host, o.ReadOnly = "sb"+string(rune('a'+i)), true
		db := mustOpen(t, o)
		dbs = append(dbs, db)
	}
	for _, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := db.TakeLease(ctx, l, etag)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won++
			} else {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	for _, db := range dbs {
		db.Close()
	}
	if won != 1 {
		t.Fatalf("%d standbys won the lease, want 1 (errors %v)", won, errs)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrLeaseMoved) {
			t.Fatalf("a loser's error: %v", err)
		}
	}
}
