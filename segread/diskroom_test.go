package segread

import (
	"bytes"
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// fillDiskRoom makes the disk cache's queue and overflow look full, and
// returns a func that gives their room back.
func fillDiskRoom(c *diskCache) (unfill func()) {
	c.queued.Add(diskQueueBytes)
	c.ovMu.Lock()
	full := diskOverflowBytes - c.overflowBytes
	c.overflowBytes += full
	c.ovMu.Unlock()
	return func() {
		c.ovMu.Lock()
		c.overflowBytes -= full
		c.ovMu.Unlock()
		c.queued.Add(-diskQueueBytes)
	}
}

// TestFetchedSpanWaitsForDiskRoom: a span fetched from the store while
// the disk cache's queue and overflow are full waits for the writer to
// free room and is then cached, not left out (left out, the next read of
// it once the memory cache let it go would fetch it again); a cache disk
// that frees no room within diskRoomWait costs the read no more than that
// wait, and the span is left out.
func TestFetchedSpanWaitsForDiskRoom(t *testing.T) {
	f, r, free := heldWriter(t, 8, 7)
	c := r.disk
	deadline := make(chan time.Time)
	setDisk(r, func(c *diskCache) { c.after = func(time.Duration) <-chan time.Time { return deadline } })
	unfill := fillDiskRoom(c)

	got := make(chan error, 1)
	go func() {
		out, err := runOf(r, context.Background(), f.ids[:4], f.ps[:4])
		for i := range out {
			if err == nil && !bytes.Equal(out[i], f.plains[i]) {
				t.Errorf("frame %d read wrong", i)
			}
		}
		got <- err
	}()
	// The read has fetched its span and waits for room: its frames are
	// in no cache yet, and it has not returned.
	testutil.Eventually(t, 30*time.Second, "the span fetched", func() bool { return f.cs.count("getrange") == 1 })
	select {
	case err := <-got:
		t.Fatalf("the read returned (%v) with no room in the disk cache and no deadline", err)
	default:
	}
	unfill()
	free() // the writer writes its put and frees room
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	c.sync()
	if s := r.Stats(); s.DiskSkipped != 0 {
		t.Fatalf("DiskSkipped = %d, want 0: the fetched span was left out", s.DiskSkipped)
	}
	if have := c.present(f.ps, []int{0, 1, 2, 3}); len(have) != 4 {
		t.Fatalf("the disk cache holds frames %v of the fetched span 0-3", have)
	}

	// A cache disk that frees nothing: the wait ends at its deadline and
	// the span is left out.
	unfill = fillDiskRoom(c)
	defer unfill()
	go func() {
		_, err := runOf(r, context.Background(), f.ids[4:7], f.ps[4:7])
		got <- err
	}()
	testutil.Eventually(t, 30*time.Second, "the second span fetched", func() bool { return f.cs.count("getrange") == 2 })
	deadline <- time.Time{}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if s, want := r.Stats(), uint64(sumLength(f.ps[4:7])); s.DiskSkipped != want {
		t.Fatalf("DiskSkipped = %d, want %d (the span left out at the deadline)", s.DiskSkipped, want)
	}
}
