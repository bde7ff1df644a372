package fs

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// TestCloseWaitsForCleanerBeforeFinalBarrier is the case behind "closing
// with batches not in any journal": the tombstone cleaner committed its
// transaction after Close had run the final barrier. Close must wait for
// a cleaner transaction under way (reclaim's cleaner calls CleanTombstones
// from a goroutine of its own), so its work is journaled and a new machine
// sees it.
func TestCloseWaitsForCleanerBeforeFinalBarrier(t *testing.T) {
	f := newTestFS(t)
	var logs testutil.SyncBuffer
	f.e.Close(context.Background())
	e, err := Open(context.Background(), Options{
		Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	ino := f.create("big")
	f.write(ino, testutil.RandBytes(1, (InlineDeleteExtents+5)*extentSize), 0)
	if err := e.Barrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	inHook, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.cleanerHook = func() {
		once.Do(func() {
			close(inHook)
			<-release
		})
	}
	if err := e.Unlink(context.Background(), RootIno, "big"); err != nil {
		t.Fatal(err)
	}
	type cleaned struct {
		extents int
		err     error
	}
	cleanerDone := make(chan cleaned, 1)
	go func() {
		_, n, _, err := e.CleanTombstones(context.Background())
		cleanerDone <- cleaned{n, err}
	}()
	select {
	case <-inHook:
	case <-time.After(30 * time.Second):
		t.Fatal("the cleaner never reached its commit")
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close(context.Background()) }()
	for !e.closed.Load() {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a cleaner transaction was under way", err)
	case <-time.After(50 * time.Millisecond): // Close gets as far as it will without the cleaner
	}
	close(release)
	if c := <-cleanerDone; c.err != nil || c.extents != InlineDeleteExtents+5 {
		t.Fatalf("the cleaner's transaction: %d pointers removed, err %v; want %d, nil", c.extents, c.err, InlineDeleteExtents+5)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.CleanTombstones(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("CleanTombstones after Close: %v, want ErrClosed", err)
	}
	if strings.Contains(logs.String(), "not in any journal") {
		t.Fatalf("Close lost a batch:\n%s", logs.String())
	}
	// A new machine: only the store.
	f.open()
	lo, hi := schema.ExtentRange(ino, 0, 0)
	n := 0
	if err := f.e.scan(lo, hi, func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d pointers of the deleted file survived: the cleaner's transaction was lost", n)
	}
	f.e.Close(context.Background())
	f.e = nil
	f.fsck()
}
