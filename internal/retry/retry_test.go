package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestRetriesTransientUntilSuccess(t *testing.T) {
	calls := 0
	err := Do(context.Background(), Policy{Logger: quiet, Min: time.Microsecond, Max: time.Millisecond}, "put x", func() error {
		calls++
		if calls < 5 {
			return errors.New("503 SlowDown")
		}
		return nil
	})
	if err != nil || calls != 5 {
		t.Fatalf("err %v after %d calls; want success on the 5th", err, calls)
	}
}

func TestPermanentStopsAtOnce(t *testing.T) {
	perm := errors.New("precondition failed")
	calls := 0
	err := Do(context.Background(), Policy{Logger: quiet, Permanent: func(e error) bool { return errors.Is(e, perm) }}, "put x", func() error {
		calls++
		return perm
	})
	if !errors.Is(err, perm) || calls != 1 {
		t.Fatalf("err %v after %d calls; want the permanent error after one", err, calls)
	}
}

func TestContextEndStopsWaiting(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Do(ctx, Policy{Clock: clk, Logger: quiet}, "put x", func() error { return errors.New("down") })
	}()
	time.Sleep(10 * time.Millisecond) // it is waiting on the fake clock now
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do kept waiting after its context ended")
	}
}

// A transport timeout matches context.DeadlineExceeded (net/http's "timeout
// awaiting response headers" does) but is not the caller giving up: it is
// retried while ctx lives, and final once ctx itself has expired.
func TestTransportTimeoutIsRetried(t *testing.T) {
	timeout := fmt.Errorf("put x: %w", &url.Error{Op: "Put", URL: "http://s3/x", Err: context.DeadlineExceeded})
	calls := 0
	err := Do(context.Background(), Policy{Logger: quiet, Min: time.Microsecond, Max: time.Millisecond}, "put x", func() error {
		calls++
		if calls < 3 {
			return timeout
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls; want success on the 3rd", err, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	calls = 0
	err = Do(ctx, Policy{Logger: quiet, Min: time.Microsecond}, "put x", func() error {
		calls++
		<-ctx.Done()
		return fmt.Errorf("put x: %w", ctx.Err())
	})
	if !errors.Is(err, context.DeadlineExceeded) || calls != 1 {
		t.Fatalf("ctx expired in the call: err %v after %d calls; want DeadlineExceeded after one", err, calls)
	}
}

// Once ctx ends, the error returned says so even when the last attempt
// failed for another reason (a 503 that arrived as the deadline passed).
func TestContextEndWrapsLastError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	down := errors.New("503 SlowDown")
	err := Do(ctx, Policy{Logger: quiet}, "put x", func() error {
		<-ctx.Done()
		return down
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("err %v; want one wrapping DeadlineExceeded that names the last error", err)
	}
}

func TestJitterBounds(t *testing.T) {
	d := 100 * time.Millisecond
	lo, hi := d, time.Duration(0)
	for i := 0; i < 1000; i++ {
		j := Jitter(d)
		lo, hi = min(lo, j), max(hi, j)
		if j < d/2 || j > d {
			t.Fatalf("Jitter(%v) = %v, outside [d/2, d]", d, j)
		}
	}
	if hi-lo < d/4 {
		t.Fatalf("jitter spread only %v over 1000 draws", hi-lo)
	}
}
