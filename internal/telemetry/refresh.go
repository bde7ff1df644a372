package telemetry

import (
	"context"
	"sync"
	"time"
)

// refreshWait bounds how long a reader of a stale cached value waits for
// its refresh before it takes the stale value: a store that does not
// answer (an outage) must not stall status, the monitor or /metrics.
const refreshWait = 2 * time.Second

// refreshTimeout bounds one refresh.
const refreshTimeout = 20 * time.Second

// refreshed is a value fetched from the store, reused for a time to live
// and refreshed by one fetch at a time in the background. A reader waits
// for the first fetch (bounded by its context), and for a refresh of a
// stale value at most refreshWait; after that it gets the stale value and
// its error. Each fetch ends within refreshTimeout.
type refreshed[T any] struct {
	mu      sync.Mutex
	val     T
	err     string // the last fetch's error ("" if it succeeded)
	at      time.Time
	running chan struct{} // closed when the fetch under way ends; nil: none
	// start runs a fetch in a goroutine its owner waits for (the
	// Sampler's group), with the owner's context, which ends at Close.
	start func(fetch func(context.Context))
}

// get returns the value, its last error and when it was fetched.
func (r *refreshed[T]) get(ctx context.Context, ttl time.Duration, fetch func(context.Context) (T, error)) (T, string, time.Time) {
	r.mu.Lock()
	if !r.at.IsZero() && time.Since(r.at) < ttl {
		defer r.mu.Unlock()
		return r.val, r.err, r.at
	}
	if r.running == nil {
		done := make(chan struct{})
		r.running = done
		r.start(func(ctx context.Context) { r.fetch(ctx, done, fetch) })
	}
	done, have := r.running, !r.at.IsZero()
	r.mu.Unlock()
	var bound <-chan time.Time
	if have {
		bound = time.After(refreshWait)
	}
	select {
	case <-done:
	case <-bound:
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.val, r.err, r.at
}

func (r *refreshed[T]) fetch(ctx context.Context, done chan struct{}, fetch func(context.Context) (T, error)) {
	ctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	defer cancel()
	v, err := fetch(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = err.Error() // the last good value stays
	} else {
		r.val, r.err = v, ""
	}
	r.at = time.Now()
	r.running = nil
	close(done)
}
