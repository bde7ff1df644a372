package fs

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// lockedBuf collects log output from several goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCloseWaitsForCleanerBeforeFinalBarrier is the case behind "closing
// with batches not in any journal": the tombstone cleaner committed its
// transaction after Close had run the final barrier. Close must stop the
// cleaner first, so its work is journaled and a new machine sees it.
func TestCloseWaitsForCleanerBeforeFinalBarrier(t *testing.T) {
	f := newTestFS(t)
	var logs lockedBuf
	f.e.Close(context.Background())
	e, err := Open(context.Background(), Options{
		Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), SegmentTarget: 1 << 20,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), DeferBackground: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.e = e
	ino := f.create("big")
	f.write(ino, randBytes(1, (InlineDeleteExtents+5)*extentSize), 0)
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
	e.StartBackground()
	if err := e.Unlink(context.Background(), RootIno, "big"); err != nil {
		t.Fatal(err)
	}
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
	time.Sleep(50 * time.Millisecond) // let Close get as far as it will without the cleaner
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
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
