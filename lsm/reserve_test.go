package lsm

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/diskspace"
	"ebbfs.dev/ebbfs/objstore"
)

// fakeDisk has StatfsDir report a filesystem of total bytes with the
// returned number free (half of it to start with), until the test ends.
func fakeDisk(t *testing.T, total int64) *atomic.Int64 {
	avail := new(atomic.Int64)
	avail.Store(total / 2)
	prev := StatfsDir
	StatfsDir = func(string) (int64, int64, error) { return total, avail.Load(), nil }
	t.Cleanup(func() { StatfsDir = prev })
	return avail
}

// TestReserveReleasedWhenFull: a writer holds ReserveSize bytes in
// Dir/RESERVE. With the local filesystem below reserveCritical the file is
// deleted (after MakeRoom was asked first), MetadataRoom fails with
// ErrLocalFull, publication waits, and commits and barriers still go on;
// with room for the reserve above the floor it is created again.
func TestReserveReleasedWhenFull(t *testing.T) {
	const total = 100 << 20
	avail := fakeDisk(t, total)

	s := objstore.NewMem()
	o := testOpts(t, s, testKeys(t))
	var asked atomic.Int64
	o.MakeRoom = func(n int64) int64 { asked.Add(n); return 0 }
	db := mustOpen(t, o)
	defer db.Close()
	fi, err := os.Stat(db.reservePath())
	if err != nil || fi.Size() != ReserveSize {
		t.Fatalf("reserve after open: %v, %v", fi, err)
	}
	if err := db.MetadataRoom(); err != nil {
		t.Fatalf("metadata room with the disk half empty: %v", err)
	}

	// Below the floor but above the critical level: the reserve stays.
	avail.Store(LocalFloor(total) - 1)
	if db.ReserveReleased() || asked.Load() != 0 {
		t.Fatalf("reserve released (or room asked for) above the critical level")
	}

	avail.Store(0)
	set(t, db, "a", "1") // a commit looks first, and goes on
	if !db.res.released.Load() {
		t.Fatal("a commit on a full disk did not release the reserve")
	}
	if asked.Load() == 0 {
		t.Fatal("the reserve was released before MakeRoom was asked")
	}
	if _, err := os.Stat(db.reservePath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reserve file after release: %v", err)
	}
	if err := db.MetadataRoom(); !errors.Is(err, ErrLocalFull) {
		t.Fatalf("metadata room with the reserve released: %v", err)
	}
	barrier(t, db)
	avail.Store(ReserveSize) // the freed reserve: still released
	if _, err := db.Publish(context.Background()); !errors.Is(err, ErrLocalFull) {
		t.Fatalf("publish with the reserve released: %v, want ErrLocalFull", err)
	}
	avail.Store(LocalFloor(total) + ReserveSize - 1)
	if !db.ReserveReleased() {
		t.Fatal("reserve re-created without room for it above the floor")
	}

	avail.Store(LocalFloor(total) + ReserveSize)
	if err := db.MetadataRoom(); err != nil {
		t.Fatalf("metadata room with room again: %v", err)
	}
	if fi, err := os.Stat(db.reservePath()); err != nil || fi.Size() != ReserveSize {
		t.Fatalf("reserve after room returned: %v, %v", fi, err)
	}
	if seq, err := db.Publish(context.Background()); err != nil || seq == 0 {
		t.Fatalf("publish with room again: %d, %v", seq, err)
	}
	wantVal(t, db, "a", "1")
}

// The periodic check runs on the injected clock, through the watcher it
// is given: a disk that fills while nothing is committed has the reserve
// released at the watcher's next look, not later, and not on wall time.
func TestReserveWatchedOnInjectedClock(t *testing.T) {
	const total = 100 << 20
	avail := fakeDisk(t, total)

	clk := clock.NewFake(time.Unix(1, 0))
	space := diskspace.Start(clk)
	defer space.Close()
	o := testOpts(t, objstore.NewMem(), testKeys(t))
	o.Space = space
	db := mustOpen(t, o)
	defer db.Close()
	avail.Store(0)
	if db.res.released.Load() {
		t.Fatal("reserve released before anything looked")
	}
	deadline := time.Now().Add(time.Minute) // only so that a hang fails
	for !db.res.released.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the watcher's check did not release the reserve on a full disk")
		}
		clk.Advance(diskspace.Every)
		time.Sleep(time.Millisecond) // real time for the watcher to run; the fake clock decides when it does
	}
}
