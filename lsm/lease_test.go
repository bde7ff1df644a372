package lsm

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

func TestSecondWriterRefused(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	a := testOpts(t, s, k)
	a.Holder = "alpha:1234"
	db := mustOpen(t, a)
	defer db.Close()

	// Same host, live pid (this process).
	_, err := Open(context.Background(), testOpts(t, s, k))
	if !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), "a writer holds the lease") || !strings.Contains(err.Error(), "alpha:1234") {
		t.Fatalf("same-host second writer: %v", err)
	}
	// Another host, fresh heartbeat.
	b := testOpts(t, s, k)
	b.Host = "beta"
	_, err = Open(context.Background(), b)
	if !errors.Is(err, ErrLeaseHeld) || !strings.Contains(err.Error(), "alpha:1234") {
		t.Fatalf("other-host second writer: %v", err)
	}
	// The refused writers changed nothing: the first one still works.
	set(t, db, "ia", "1")
	barrier(t, db)
}

func TestTakeoverAfterHolderDeathSameHost(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	a := testOpts(t, s, k)
	a.PID = deadPID(t)
	db := mustOpen(t, a)
	set(t, db, "ia", "1")
	barrier(t, db)
	crash(db) // lease still names the (dead) pid with a fresh heartbeat

	// The clock stands still: a takeover that waited for the lease to
	// expire would never finish (Open would report the lease held).
	b := testOpts(t, s, k)
	b.Clock = clock.NewFake(time.Now())
	db2 := mustOpen(t, b)
	defer db2.Close()
	if db2.Epoch() != 2 {
		t.Fatalf("epoch %d, want 2", db2.Epoch())
	}
	wantVal(t, db2, "ia", "1")
}

func TestTakeoverAfterTTLOtherHost(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := testOpts(t, s, k)
	a.Host, a.Clock = "alpha", fc
	db := mustOpen(t, a)
	set(t, db, "ia", "1")
	barrier(t, db)
	crash(db) // died on another host: its pid cannot be checked

	b := testOpts(t, s, k)
	b.Host, b.Clock = "beta", fc
	fc.Advance(10 * time.Second)
	if _, err := Open(context.Background(), b); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("takeover before TTL: %v", err)
	}
	fc.Advance(11 * time.Second)
	db2 := mustOpen(t, b)
	defer db2.Close()
	wantVal(t, db2, "ia", "1")
}

func TestHeartbeatKeepsLeaseAndCloseReleases(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	fc := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := testOpts(t, s, k)
	a.Host, a.Clock = "alpha", fc
	db := mustOpen(t, a)
	b := testOpts(t, s, k)
	b.Host, b.Clock = "beta", fc
	start := fc.Now()
	for fc.Now().Sub(start) < time.Minute { // a minute of heartbeats
		prev := readLease(t, s).Heartbeat
		fc.Advance(6 * time.Second)
		testutil.Eventually(t, time.Minute, "a newer heartbeat", func() bool {
			if readLease(t, s).Heartbeat.After(prev) {
				return true
			}
			fc.Advance(100 * time.Millisecond)
			return false
		})
	}
	if _, err := Open(context.Background(), b); !errors.Is(err, ErrLeaseHeld) {
		t.Fatalf("heartbeating writer was taken over: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if l := readLease(t, s); !l.Released {
		t.Fatalf("lease not released on Close: %+v", l)
	}
	db2 := mustOpen(t, b) // immediately, no TTL wait
	defer db2.Close()
	if db2.Epoch() != 2 {
		t.Fatalf("epoch %d", db2.Epoch())
	}
}

func readLease(t testing.TB, s objstore.Store) Lease {
	t.Helper()
	b, err := s.Get(context.Background(), leaseKey)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ParseLease(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A zombie (partitioned from the lease, still able to write journals) is
// fenced by the next writer's epoch-start journal.
func TestZombieBarrierFenced(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	a := testOpts(t, s, k)
	a.Host = "alpha"
	a.Clock = clock.NewFake(time.Now()) // never advances: no heartbeats
	zombie := mustOpen(t, a)
	defer zombie.Close()
	set(t, zombie, "ia", "acked")
	barrier(t, zombie)

	b := testOpts(t, s, k)
	b.Host = "beta"
	b.Clock = &offsetClock{d: time.Minute}
	db := mustOpen(t, b)
	defer db.Close()
	wantVal(t, db, "ia", "acked")

	set(t, zombie, "ib", "never")
	err := zombie.Barrier(context.Background())
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie barrier: %v, want ErrFenced", err)
	}
	if err := zombie.Commit(zombie.NewBatch()); err == nil {
		t.Fatal("empty commit after fencing succeeded")
	}
	bt := zombie.NewBatch()
	_ = bt.Set([]byte("ic"), []byte("x"))
	if err := zombie.Commit(bt); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie commit: %v", err)
	}
	if _, err := zombie.Publish(context.Background()); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie publish: %v", err)
	}
	// The new writer's history never contains the zombie's unacked batch.
	set(t, db, "id", "new")
	barrier(t, db)
	crash(db)
	c := testOpts(t, s, k)
	c.Host = "gamma"
	c.Clock = &offsetClock{d: 2 * time.Minute}
	db3 := mustOpen(t, c)
	defer db3.Close()
	wantVal(t, db3, "ib", "")
	wantVal(t, db3, "id", "new")
	wantVal(t, db3, "ia", "acked")
}

// The zombie wins the race for the new writer's epoch-start sequence: the
// new writer replays the zombie's (acknowledged) journal and moves on.
func TestZombieWinsEpochStartRace(t *testing.T) {
	mem := objstore.NewMem()
	k := testKeys(t)
	a := testOpts(t, mem, k)
	a.Host = "alpha"
	a.Clock = clock.NewFake(time.Now())
	zombie := mustOpen(t, a)
	defer zombie.Close()
	set(t, zombie, "ia", "1")
	barrier(t, zombie)

	var once sync.Once
	var zerr error
	hs := &hookStore{Store: mem}
	hs.beforePut = func(key string) {
		if strings.HasPrefix(key, journalPrefix) {
			once.Do(func() {
				set(t, zombie, "ib", "zombie-acked")
				zerr = zombie.Barrier(context.Background())
			})
		}
	}
	b := testOpts(t, hs, k)
	b.Host = "beta"
	b.Clock = &offsetClock{d: time.Minute}
	db := mustOpen(t, b)
	defer db.Close()
	if zerr != nil {
		t.Fatalf("zombie barrier before epoch start: %v", zerr)
	}
	wantVal(t, db, "ib", "zombie-acked")
	set(t, zombie, "ic", "late")
	if err := zombie.Barrier(context.Background()); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie's next barrier: %v", err)
	}
	set(t, db, "id", "ok")
	barrier(t, db)
	wantVal(t, db, "ic", "")
}

func TestHeartbeatLossFences(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	fc := clock.NewFake(time.Now())
	a := testOpts(t, s, k)
	a.Host, a.Clock = "alpha", fc
	db := mustOpen(t, a)
	defer db.Close()
	// Someone else rewrites the lease.
	l := readLease(t, s)
	l.Epoch++
	l.Host = "beta"
	if _, err := s.Put(context.Background(), leaseKey, l.marshal(), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.Advance(7 * time.Second)
	testutil.Eventually(t, time.Minute, "the zombie fenced", func() bool { return db.Fenced() != nil })
	set2 := db.NewBatch()
	_ = set2.Set([]byte("ia"), []byte("1"))
	if err := db.Commit(set2); !errors.Is(err, ErrFenced) {
		t.Fatalf("commit after heartbeat loss: %v", err)
	}
	if err := db.Barrier(context.Background()); !errors.Is(err, ErrFenced) {
		t.Fatalf("barrier after heartbeat loss: %v", err)
	}
}

func TestParseLeaseRejects(t *testing.T) {
	for _, in := range []string{``, `{`, `{"format":2,"epoch":1}`, `{"format":1,"epoch":0}`, `[]`} {
		if _, err := ParseLease([]byte(in)); err == nil {
			t.Errorf("ParseLease(%q) accepted", in)
		}
	}
	l, err := ParseLease([]byte(`{"format":1,"epoch":7,"holder":"h:1","host":"h","pid":1,"heartbeat":"2030-01-01T00:00:00Z"}`))
	if err != nil || l.Epoch != 7 || l.Holder != "h:1" {
		t.Fatalf("ParseLease = %+v, %v", l, err)
	}
}

func TestLeaseFromEarlierProcessWithOurPID(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	// An earlier incarnation (same host, same pid, other instance) died
	// without releasing; its heartbeat is fresh.
	old := Lease{Format: 1, Epoch: 4, Holder: "testhost:old", Host: "testhost", PID: os.Getpid(), Instance: "dead", Heartbeat: time.Now()}
	if _, err := s.Put(context.Background(), leaseKey, old.marshal(), objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	db := mustOpen(t, testOpts(t, s, k))
	defer db.Close()
	if db.Epoch() != 5 {
		t.Fatalf("epoch %d, want 5", db.Epoch())
	}
}

// TestTakeOverFencesLiveHolder: --take-over on another host takes the lease
// from a holder with a fresh heartbeat. The old holder is fenced at its
// next barrier: it acknowledges nothing more, and nothing it committed
// after the take-over is in the new writer's state.
func TestTakeOverFencesLiveHolder(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	a := testOpts(t, s, k)
	a.Holder, a.Host = "alpha:1", "alpha"
	old := mustOpen(t, a)
	defer old.Close()
	set(t, old, "ia", "before")
	barrier(t, old)

	b := testOpts(t, s, k)
	b.Holder, b.Host, b.TakeOver = "beta:2", "beta", true
	nw := mustOpen(t, b)
	defer nw.Close()
	if nw.Epoch() <= old.Epoch() {
		t.Fatalf("new epoch %d not above the old %d", nw.Epoch(), old.Epoch())
	}
	wantVal(t, nw, "ia", "before")

	// The old writer goes on as if nothing happened: its barrier fails.
	set(t, old, "ib", "zombie")
	if err := old.Barrier(context.Background()); !errors.Is(err, ErrFenced) {
		t.Fatalf("old writer's barrier after the take-over: %v, want ErrFenced", err)
	}
	set(t, nw, "ic", "new")
	barrier(t, nw)
	// A third process sees the new writer's state only.
	ro := testOpts(t, s, k)
	ro.ReadOnly = true
	r := mustOpen(t, ro)
	defer r.Close()
	wantVal(t, r, "ic", "new")
	if _, ok, _ := r.Get([]byte("ib")); ok {
		t.Fatal("a write the fenced writer committed after the take-over is in the durable state")
	}
}
