package lsm

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
)

// TestPublishWaitsForLocalRoom: below LocalFloor on the local directory's
// filesystem a publication fails with ErrLocalFull before it touches
// Pebble (no flush, no log rotation) and publishes nothing; commits and
// barriers go on; with room again it publishes.
func TestPublishWaitsForLocalRoom(t *testing.T) {
	const total = 100 << 20
	if LocalFloor(total) != 8<<20 || LocalFloor(1<<30) != (1<<30)/50 || LocalFloor(1<<40) != 256<<20 {
		t.Fatalf("floors %d %d %d", LocalFloor(total), LocalFloor(1<<30), LocalFloor(1<<40))
	}
	var avail atomic.Int64
	avail.Store(total / 2)
	prev := StatfsDir
	StatfsDir = func(string) (int64, int64, error) { return total, avail.Load(), nil }
	t.Cleanup(func() { StatfsDir = prev })

	s := objstore.NewMem()
	o := testOpts(t, s, testKeys(t))
	db := mustOpen(t, o)
	defer db.Close()
	set(t, db, "a", "1")
	barrier(t, db)

	avail.Store(LocalFloor(total) - 1)
	_, err := db.Publish(context.Background())
	if !errors.Is(err, ErrLocalFull) {
		t.Fatalf("publish with the local disk full: %v, want ErrLocalFull", err)
	}
	if got := keysUnder(t, s, manifestPrefix); len(got) != 0 {
		t.Fatalf("manifests %v published with the local disk full", got)
	}
	set(t, db, "b", "2")
	barrier(t, db)

	avail.Store(LocalFloor(total))
	seq, err := db.Publish(context.Background())
	if err != nil || seq == 0 {
		t.Fatalf("publish with room again: %d, %v", seq, err)
	}
	wantVal(t, db, "b", "2")
}
