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

// A heartbeat that adopted a standby's announcement (its IfMatch failed,
// the record was still ours) keeps its later writes conditional: once a
// standby took the lease, the old writer's next heartbeat fences it and
// does not overwrite the new writer's record. Rejoin then makes the
// fenced writer a follower of the new writer's state, without the batches
// it committed after the takeover.
func TestHeartbeatAfterAnnounceStaysConditionalAndRejoin(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	k := testKeys(t)
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := testOpts(t, s, k)
	a.Host, a.Clock = "alpha", fc
	w := mustOpen(t, a)
	defer w.Close()
	set(t, w, "ia", "acked")
	barrier(t, w)

	b := testOpts(t, s, k)
	b.Host, b.Clock, b.ReadOnly, b.StandbyID = "beta", fc, true, "sb-beta"
	sb := mustOpen(t, b)
	defer sb.Close()
	entry := StandbyEntry{ID: "sb-beta", Holder: "beta", TakeoverAfterMS: 5000, Renewal: 1}
	if _, _, _, err := AnnounceStandby(ctx, s, entry, false); err != nil {
		t.Fatal(err)
	}
	fc.Advance(a.LeaseTTL / 3)
	testutil.Eventually(t, 10*time.Second, "the writer adopting the standby", func() bool {
		return w.HeartbeatEvery() == 1250*time.Millisecond
	})
	if _, _, err := sb.FollowNext(ctx); err != nil {
		t.Fatal(err)
	}
	l, etag, _, err := ReadLeaseTag(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := sb.TakeLease(ctx, l, etag)
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if _, err := sb.BecomeWriter(ctx); err != nil {
		t.Fatal(err)
	}
	set(t, w, "ic", "committed by the zombie, never acknowledged")
	beats := w.Heartbeats()
	fc.Advance(1300 * time.Millisecond)
	testutil.Eventually(t, 10*time.Second, "the zombie's heartbeat fencing it", func() bool { return w.Fenced() != nil })
	if w.Heartbeats() != beats {
		t.Fatalf("the zombie heartbeated %d times after the takeover", w.Heartbeats()-beats)
	}
	if got, _, err := ReadLease(ctx, s); err != nil || got.Epoch != mine.Epoch || got.Host != "beta" {
		t.Fatalf("the lease after the zombie's heartbeat: %+v, %v; want the new writer's (epoch %d)", got, err, mine.Epoch)
	}

	set(t, sb, "id", "the new writer's")
	barrier(t, sb)
	if err := w.Rejoin(ctx); err != nil {
		t.Fatalf("Rejoin: %v", err)
	}
	if w.Fenced() != nil || w.Epoch() != 0 {
		t.Fatalf("after Rejoin: fenced %v, epoch %d", w.Fenced(), w.Epoch())
	}
	wantVal(t, w, "ia", "acked")
	wantVal(t, w, "id", "the new writer's")
	wantVal(t, w, "ic", "")
	set(t, sb, "ie", "followed")
	barrier(t, sb)
	if _, ok, err := w.FollowNext(ctx); err != nil || !ok {
		t.Fatalf("the rejoined follower's next journal: %v, %v", ok, err)
	}
	wantVal(t, w, "ie", "followed")
	if err := w.Barrier(ctx); err == nil {
		t.Fatal("a barrier on the rejoined follower succeeded")
	}
}
