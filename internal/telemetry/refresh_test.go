package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/worker"
)

// TestRefreshedDoesNotStallOnTheStore: the first get waits for its fetch;
// once the value is stale, a fetch that hangs (a store that does not
// answer) holds a reader back at most refreshWait, and a failed fetch
// keeps the last good value with the error.
func TestRefreshedDoesNotStallOnTheStore(t *testing.T) {
	var owner worker.Group
	defer owner.Wait() // every fetch has ended when the test does
	var r refreshed[int]
	r.start = func(f func(context.Context)) { owner.Go(func() { f(context.Background()) }) }
	ctx := context.Background()
	v, errStr, at := r.get(ctx, time.Hour, func(context.Context) (int, error) { return 1, nil })
	if v != 1 || errStr != "" || at.IsZero() {
		t.Fatalf("first get = %v %q %v", v, errStr, at)
	}
	// Fresh: no fetch.
	if v, _, _ := r.get(ctx, time.Hour, func(context.Context) (int, error) { t.Error("fetched a fresh value"); return 0, nil }); v != 1 {
		t.Fatalf("fresh get = %v", v)
	}
	// Stale, and the store hangs.
	release := make(chan struct{})
	start := time.Now()
	v, _, _ = r.get(ctx, 0, func(ctx context.Context) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 0, errors.New("store unreachable")
	})
	if took := time.Since(start); v != 1 || took > refreshWait+5*time.Second {
		t.Fatalf("stale get with a hanging fetch = %v after %v", v, took)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		running, errStr, v := r.running, r.err, r.val
		r.mu.Unlock()
		if running == nil {
			if v != 1 || errStr != "store unreachable" {
				t.Fatalf("after a failed fetch: %v %q; want the last good value and the error", v, errStr)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The store answers again.
	if v, errStr, _ := r.get(ctx, 0, func(context.Context) (int, error) { return 2, nil }); v != 2 || errStr != "" {
		t.Fatalf("get after recovery = %v %q", v, errStr)
	}
}
