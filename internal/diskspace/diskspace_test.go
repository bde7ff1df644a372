package diskspace

import (
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

func TestStatfs(t *testing.T) {
	total, avail, err := Statfs(t.TempDir())
	if err != nil || total <= 0 || avail < 0 || avail > total {
		t.Fatalf("Statfs: total %d, avail %d, %v", total, avail, err)
	}
	if _, _, err := Statfs("/nonexistent/diskspace"); err == nil {
		t.Fatal("Statfs of a missing directory: no error")
	}
}

// waitCount waits, on the real clock, for n to reach want.
func waitCount(t *testing.T, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs, want %d", n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// The checks run every Every of the injected clock, each in turn, and a
// removed check runs no more.
func TestWatcherRunsChecksOnItsClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	ws := Start(clk)
	defer ws.Close()
	var a, b atomic.Int64
	ws.Add(func() { a.Add(1) })
	removeB := ws.Add(func() { b.Add(1) })
	for i := int64(1); i <= 3; i++ {
		for clk.Waiters() == 0 {
			time.Sleep(time.Millisecond)
		}
		clk.Advance(Every)
		waitCount(t, &a, i)
		waitCount(t, &b, i)
	}
	removeB()
	removeB() // twice is fine
	ws.Notify()
	waitCount(t, &a, 4) // b was removed before this run began
	if got := b.Load(); got != 3 {
		t.Fatalf("a removed check ran: %d runs, want 3", got)
	}
}
