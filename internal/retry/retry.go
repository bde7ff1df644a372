// Package retry is the one backoff loop of ebbfs for object-store requests
// that must eventually succeed (segment uploads, journal and manifest
// writes): it waits out outages instead of failing, backs off
// exponentially with jitter so that many writers never retry in step
// against a store that answers 503 or SlowDown, and stops at once on a
// permanent error or when the caller's context ends.
package retry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

// Policy says how to retry.
type Policy struct {
	// Clock times the waits (default: the real clock).
	Clock clock.Clock
	// Logger gets a warning at the first failure and every tenth after
	// (default: slog.Default()).
	Logger *slog.Logger
	// Min and Max bound the delay before jitter (defaults 50 ms and 5 s).
	Min, Max time.Duration
	// Permanent reports errors that retrying cannot fix. Any error once
	// ctx is done, and context.Canceled, are always permanent; a
	// context.DeadlineExceeded while ctx lives is a transport timeout and
	// is retried.
	Permanent func(error) bool
}

// Do runs op until it succeeds, fails permanently, or ctx ends. The error
// after ctx ended wraps ctx's error and names the last store error.
func Do(ctx context.Context, p Policy, what string, op func() error) error {
	if p.Clock == nil {
		p.Clock = clock.Real{}
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	if p.Min <= 0 {
		p.Min = 50 * time.Millisecond
	}
	if p.Max < p.Min {
		p.Max = max(p.Min, 5*time.Second)
	}
	delay := p.Min
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := op()
		if err == nil {
			return nil
		}
		// A deadline that is not ctx's own is a transport timeout (net/http's
		// "timeout awaiting response headers" matches
		// context.DeadlineExceeded): a store that took the request and
		// went silent, which is an outage to wait out.
		if errors.Is(err, context.Canceled) || (p.Permanent != nil && p.Permanent(err)) {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			if errors.Is(err, cerr) {
				return err
			}
			return fmt.Errorf("%s: %w (last error: %v)", what, cerr, err)
		}
		wait := Jitter(delay)
		if attempt == 1 || attempt%10 == 0 {
			p.Logger.Warn("object store request failed; retrying", "op", what, "attempt", attempt, "next_in", wait.Round(time.Millisecond), "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-p.Clock.After(wait):
		}
		delay = min(2*delay, p.Max)
	}
}

// Jitter returns a delay drawn uniformly from [d/2, d].
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
