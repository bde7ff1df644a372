package lsm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"ebbfs.dev/ebbfs/objstore"
)

// eioFS fails every write to the local directory with EIO once on is set.
func eioFS(on *atomic.Bool) func(*pebble.Options) {
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	})
	return func(po *pebble.Options) { po.FS = errorfs.Wrap(vfs.Default, inj) }
}

// TestLocalEIOFailsTheDB: once the local directory returns EIO, the next
// publication finds out (before Pebble rotates its log), the DB fails with
// ErrLocalFailed, and from then on commits, reads and barriers fail with
// it and Close returns it, without a panic; a new DB on a healthy
// directory recovers every barrier'd batch from the store.
func TestLocalEIOFailsTheDB(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	var on atomic.Bool
	o := testOpts(t, s, k)
	o.Tune = eioFS(&on)
	o.PID = deadPID(t) // the next DB takes the lease over, as after the process exited
	db := mustOpen(t, o)
	set(t, db, "a", "1")
	barrier(t, db)

	on.Store(true)
	if _, err := db.Publish(context.Background()); !errors.Is(err, ErrLocalFailed) {
		t.Fatalf("publish with the local disk failing: %v, want ErrLocalFailed", err)
	}
	b := db.NewBatch()
	b.Set([]byte("b"), []byte("2"))
	if err := db.Commit(b); !errors.Is(err, ErrLocalFailed) {
		t.Fatalf("commit after the failure: %v", err)
	}
	if _, _, err := db.Get([]byte("a")); !errors.Is(err, ErrLocalFailed) {
		t.Fatalf("get after the failure: %v", err)
	}
	if err := db.Barrier(context.Background()); !errors.Is(err, ErrLocalFailed) {
		t.Fatalf("barrier after the failure: %v", err)
	}
	if err := db.Close(); !errors.Is(err, ErrLocalFailed) {
		t.Fatalf("close after the failure: %v", err)
	}

	o2 := testOpts(t, s, k)
	db2 := mustOpen(t, o2)
	defer db2.Close()
	wantVal(t, db2, "a", "1")
}

// TestLocalEIOInCommit: with the local directory failing while batches
// are committed, Pebble's own failure (its log write) fails the DB instead
// of the process, and nothing committed after that is journaled.
func TestLocalEIOInCommit(t *testing.T) {
	s := objstore.NewMem()
	k := testKeys(t)
	var on atomic.Bool
	o := testOpts(t, s, k)
	o.Tune = eioFS(&on)
	o.PID = deadPID(t) // the next DB takes the lease over, as after the process exited
	db := mustOpen(t, o)
	set(t, db, "a", "1")
	barrier(t, db)
	on.Store(true)
	// Pebble writes its log in the background: the failure reaches the
	// DB a moment after the write that met it, so commit until it does.
	var err error
	i := 0
	for deadline := time.Now().Add(time.Minute); err == nil && time.Now().Before(deadline); i++ {
		b := db.NewBatch()
		b.Set([]byte(fmt.Sprintf("k%06d", i)), make([]byte, 100))
		err = db.Commit(b)
		if i%100 == 99 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !errors.Is(err, ErrLocalFailed) {
		t.Fatalf("%d commits in a minute with the local disk failing: %v, want ErrLocalFailed", i, err)
	}
	if err := db.Barrier(context.Background()); !errors.Is(err, ErrLocalFailed) {
		t.Fatalf("barrier after the failure: %v", err)
	}
	db.Close()
	db2 := mustOpen(t, testOpts(t, s, k))
	defer db2.Close()
	wantVal(t, db2, "a", "1")
}
