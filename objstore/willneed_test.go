package objstore

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWillNeedReadsAhead: the hint, given through the stores that wrap a
// local one, has the kernel read the range into its page cache; on other
// stores, and for a missing object, it does nothing.
func TestWillNeedReadsAhead(t *testing.T) {
	ctx := context.Background()
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const key, n = "segments/00/0000000000000001", 1 << 20
	if _, err := l.Put(ctx, key, bytes.Repeat([]byte{7}, n), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	path := l.path(key)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	f.Close()
	pages := n / os.Getpagesize()
	if k := resident(t, path, n); k == pages {
		t.Skipf("this filesystem kept all %d pages after FADV_DONTNEED: nothing to measure", k)
	}
	WillNeed(NewTimed(NewCounting(l)), key, 0, n)
	deadline := time.Now().Add(5 * time.Second)
	for resident(t, path, n) < pages {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pages in the page cache 5 s after the hint", resident(t, path, n), pages)
		}
		time.Sleep(10 * time.Millisecond)
	}
	WillNeed(l, "segments/00/missing", 0, n) // an error is ignored
	WillNeed(NewMem(), key, 0, n)            // not a local store: ignored
}
