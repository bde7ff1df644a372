package fuse

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/testutil"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// TestPatientContextWaitsOutTheBound: an interrupted write's context is
// not done (Err nil, Done open) until the call has run for
// WriteInterruptAfter on the injected clock, and is done after; one that
// was never interrupted is never done; end stops the watcher.
func TestPatientContextWaitsOutTheBound(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	f := &fsys{clk: clk}
	cancel := make(chan struct{})
	ctx, end := f.patient(&fuse.Context{Cancel: cancel})
	defer end()
	done := ctx.Done()
	clk.Advance(WriteInterruptAfter / 2)
	close(cancel) // the interrupt, half way through the bound
	if err := ctx.Err(); err != nil {
		t.Fatalf("Err %v right after the interrupt, want nil", err)
	}
	testutil.Eventually(t, 5*time.Second, "watcher waits on the clock", func() bool { return clk.Waiters() == 1 })
	select {
	case <-done:
		t.Fatal("done before the bound")
	default:
	}
	clk.Advance(WriteInterruptAfter/2 - time.Millisecond)
	if err := ctx.Err(); err != nil {
		t.Fatalf("Err %v 1 ms before the bound", err)
	}
	clk.Advance(time.Millisecond)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not done after the bound")
	}
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err %v after the bound, want context.Canceled", err)
	}

	// Never interrupted: never done, however long it runs.
	ctx2, end2 := f.patient(&fuse.Context{Cancel: make(chan struct{})})
	d2 := ctx2.Done()
	clk.Advance(time.Hour)
	if ctx2.Err() != nil {
		t.Fatal("a request never interrupted was cancelled")
	}
	end2() // stops the watcher it started
	select {
	case <-d2:
		t.Fatal("done after end")
	default:
	}

	// Err alone (nobody waiting) also honours the bound.
	c3 := make(chan struct{})
	ctx3, end3 := f.patient(&fuse.Context{Cancel: c3})
	defer end3()
	close(c3)
	if ctx3.Err() != nil {
		t.Fatal("cancelled before the bound")
	}
	clk.Advance(WriteInterruptAfter)
	if !errors.Is(ctx3.Err(), context.Canceled) {
		t.Fatal("not cancelled after the bound")
	}
	select {
	case <-ctx3.Done():
	default:
		t.Fatal("Err reported cancelled while Done stayed open")
	}
}

// TestPatientContextFatalSignal: an interrupt from a thread that a fatal
// signal is ending is honoured at once, before the bound.
func TestPatientContextFatalSignal(t *testing.T) {
	if fatalPending(uint32(unix.Gettid())) {
		t.Fatal("this thread reads as being killed")
	}
	var asked uint32
	fatalCheck = func(tid uint32) bool { asked = tid; return true }
	t.Cleanup(func() { fatalCheck = fatalPending })
	clk := clock.NewFake(time.Unix(0, 0))
	f := &fsys{clk: clk}
	cancel := make(chan struct{})
	ctx, end := f.patient(&fuse.Context{Caller: fuse.Caller{Pid: 4242}, Cancel: cancel})
	defer end()
	done := ctx.Done()
	close(cancel)
	select {
	case <-done: // without the clock moving
	case <-time.After(10 * time.Second):
		t.Fatal("an interrupt by a fatal signal was not honoured at once")
	}
	if asked != 4242 {
		t.Fatalf("asked about thread %d, want the caller 4242", asked)
	}
}

func TestFatalIn(t *testing.T) {
	status := func(pnd, shd, blk, ign, cgt uint64) []byte {
		return fmt.Appendf(nil, "Name:\tx\nSigQ:\t0/1\nSigPnd:\t%016x\nShdPnd:\t%016x\nSigBlk:\t%016x\nSigIgn:\t%016x\nSigCgt:\t%016x\n", pnd, shd, blk, ign, cgt)
	}
	bit := func(n uint) uint64 { return 1 << (n - 1) }
	for _, c := range []struct {
		name                    string
		pnd, shd, blk, ign, cgt uint64
		want                    bool
	}{
		{"nothing", 0, 0, 0, 0, 0, false},
		{"SIGKILL", bit(9), 0, 0, 0, 0, true},
		{"caught SIGUSR1", bit(10), 0, 0, 0, bit(10), false},
		{"default SIGTERM, shared", 0, bit(15), 0, 0, 0, true},
		{"blocked SIGTERM", 0, bit(15), bit(15), 0, 0, false},
		{"ignored SIGINT", bit(2), 0, 0, bit(2), 0, false},
		{"default SIGCHLD", bit(17), 0, 0, 0, 0, false},
		{"default SIGWINCH", bit(28), 0, 0, 0, 0, false},
		{"default real-time signal", bit(40), 0, 0, 0, 0, true},
	} {
		if got := fatalIn(status(c.pnd, c.shd, c.blk, c.ign, c.cgt)); got != c.want {
			t.Errorf("%s: fatal %v, want %v", c.name, got, c.want)
		}
	}
	if fatalIn([]byte("SigPnd:\tzz\n")) {
		t.Error("a malformed status read as fatal")
	}
}
