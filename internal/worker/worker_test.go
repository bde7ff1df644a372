package worker

import (
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

func TestNotifyWakesAndMerges(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	woken := make(chan int, 10)
	var n int
	release := make(chan struct{})
	w := Start("test", clk, func(w *Worker) {
		for w.Wait(0) {
			n++
			woken <- n
			<-release
		}
	})
	w.Notify()
	if got := <-woken; got != 1 {
		t.Fatalf("first wake-up: %d", got)
	}
	// Three wake-ups while the loop is busy merge into one.
	w.Notify()
	w.Notify()
	w.Notify()
	release <- struct{}{}
	if got := <-woken; got != 2 {
		t.Fatalf("second wake-up: %d", got)
	}
	go func() { release <- struct{}{} }()
	w.Close()
	select {
	case got := <-woken:
		t.Fatalf("a merged wake-up ran the loop a third time (%d)", got)
	default:
	}
	if !w.Closed() {
		t.Fatal("Closed is false after Close")
	}
}

func TestWaitRunsOnTheInjectedClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var ticks atomic.Int32
	w := Start("ticker", clk, func(w *Worker) {
		for w.Wait(time.Hour) {
			ticks.Add(1)
		}
	})
	defer w.Close()
	for i := int32(1); i <= 3; i++ {
		// Wait for the loop to be waiting on the clock before moving it.
		for clk.Waiters() == 0 {
			time.Sleep(time.Millisecond)
		}
		clk.Advance(time.Hour)
		for ticks.Load() < i {
			time.Sleep(time.Millisecond)
		}
	}
	if got := ticks.Load(); got != 3 {
		t.Fatalf("%d ticks after three hours of fake time", got)
	}
}

func TestCloseCancelsThenWaits(t *testing.T) {
	returned := make(chan struct{})
	w := Start("blocked", nil, func(w *Worker) {
		<-w.Context().Done()
		time.Sleep(10 * time.Millisecond) // cleanup after the cancel
		close(returned)
	})
	w.Close()
	select {
	case <-returned:
	default:
		t.Fatal("Close returned before the loop did")
	}
	w.Close() // a second Close returns at once
	<-w.Done()
}

func TestLoopRunsUnderItsLabel(t *testing.T) {
	got := make(chan string, 1)
	w := Start("labelled", nil, func(w *Worker) {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		got <- b.String()
		<-w.Context().Done()
	})
	defer w.Close()
	if dump := <-got; !strings.Contains(dump, `"worker":"labelled"`) {
		t.Fatalf("goroutine dump has no worker label:\n%s", dump)
	}
}

func TestGroupWaitsForAll(t *testing.T) {
	var g Group
	var done atomic.Int32
	for i := 0; i < 8; i++ {
		g.Go(func() {
			time.Sleep(time.Millisecond)
			done.Add(1)
		})
	}
	g.Wait()
	if got := done.Load(); got != 8 {
		t.Fatalf("Wait returned with %d of 8 done", got)
	}
}
