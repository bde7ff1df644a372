// Package worker gives every long-running background loop of ebbfs one
// shape. A loop is started by Start and owned by the *Worker it returns;
// others wake it with Notify, which never blocks (a buffered-1 channel
// merges wake-ups that arrive while the loop is busy); Close cancels the
// loop's context and then waits for it to return, so no goroutine outlives
// its owner. Periodic loops wait with Wait, which runs on the injected
// clock, so tests drive them with clock.Fake. Each loop runs under a pprof
// label naming it, so a goroutine dump or a profile says whose it is.
package worker

import (
	"context"
	"runtime/pprof"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

// Worker is one background loop.
type Worker struct {
	name   string
	clk    clock.Clock
	notify chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs loop in a goroutine of its own, labelled "worker"=name. loop
// must return once w.Context() is done; it reads wake-ups through Wait or
// Woken. A nil clock means the real one.
func Start(name string, clk clock.Clock, loop func(w *Worker)) *Worker {
	if clk == nil {
		clk = clock.Real{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{name: name, clk: clk, notify: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		pprof.Do(ctx, pprof.Labels("worker", name), func(context.Context) { loop(w) })
	}()
	return w
}

// Name is the name the worker was started with.
func (w *Worker) Name() string { return w.name }

// Context is done once Close has been called.
func (w *Worker) Context() context.Context { return w.ctx }

// Notify wakes the loop if it waits, or makes its next wait return at
// once; it never blocks, and wake-ups sent while the loop is busy merge
// into one.
func (w *Worker) Notify() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Woken delivers the wake-ups sent by Notify, for loops that select on
// channels of their own as well.
func (w *Worker) Woken() <-chan struct{} { return w.notify }

// After fires once d has passed on the worker's clock.
func (w *Worker) After(d time.Duration) <-chan time.Time { return w.clk.After(d) }

// Wait returns when Notify was called, when d has passed on the worker's
// clock (d <= 0 waits for a wake-up alone), or when the worker is closed;
// it reports false in the last case, when the loop should return.
func (w *Worker) Wait(d time.Duration) bool {
	var timer <-chan time.Time
	if d > 0 {
		timer = w.clk.After(d)
	}
	select {
	case <-w.ctx.Done():
		return false
	case <-w.notify:
	case <-timer:
	}
	return w.ctx.Err() == nil
}

// Closed reports whether Close has been called.
func (w *Worker) Closed() bool { return w.ctx.Err() != nil }

// Done is closed once the loop has returned.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Close cancels the loop's context and waits for the loop to return. It
// may be called more than once and from several goroutines.
func (w *Worker) Close() {
	w.cancel()
	<-w.done
}

// Group owns short-lived goroutines that a worker or a request starts
// (uploads in flight, fan-out reads): Go starts one, Wait waits for all.
// A Group's zero value is ready to use.
type Group struct {
	wg sync.WaitGroup
}

// Go runs f in a goroutine the group owns.
func (g *Group) Go(f func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
}

// Wait returns once every goroutine started by Go has returned.
func (g *Group) Wait() { g.wg.Wait() }
