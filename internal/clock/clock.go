// Package clock injects time: a real clock for production and a fake one
// that tests advance by hand. Deadlines use Mono, which never jumps.
package clock

import (
	"sync"
	"time"
)

// Clock gives wall time, monotonic time and timers.
type Clock interface {
	// Now is wall-clock time (persisted timestamps).
	Now() time.Time
	// Mono is time since an arbitrary origin; it never goes backwards.
	Mono() time.Duration
	// After fires once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

// Real is the system clock.
type Real struct{}

var start = time.Now()

func (Real) Now() time.Time                         { return time.Now() }
func (Real) Mono() time.Duration                    { return time.Since(start) }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a clock that moves only when Advance is called.
type Fake struct {
	mu      sync.Mutex
	wall    time.Time
	mono    time.Duration
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Duration
	ch chan time.Time
}

// NewFake returns a fake clock at the given wall time.
func NewFake(wall time.Time) *Fake { return &Fake{wall: wall} }

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wall
}

func (f *Fake) Mono() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.wall
		return ch
	}
	f.waiters = append(f.waiters, fakeWaiter{at: f.mono + d, ch: ch})
	return ch
}

// Advance moves both wall and monotonic time forward by d and fires due timers.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
	f.mono += d
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at <= f.mono {
			w.ch <- f.wall
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

// SetWall sets wall time only (simulates a wall-clock jump).
func (f *Fake) SetWall(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = t
}

// Waiters is how many timers of After are waiting to fire: a test waits
// for a loop to be waiting on the clock before it advances it.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}
