package mirror

import (
	"context"
	"fmt"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// limiter spreads copies to at most rate bytes per second (a token bucket
// of one second's burst); rate 0 is unbounded.
type limiter struct {
	clk  clock.Clock
	rate int64
	mu   sync.Mutex
	at   time.Duration // when the bytes reserved so far are paid for
}

func newLimiter(clk clock.Clock, rate int64) *limiter { return &limiter{clk: clk, rate: rate} }

func (l *limiter) wait(ctx context.Context, n int64) error {
	d := l.reserve(n)
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-l.clk.After(d):
		return nil
	}
}

// reserve books n bytes and returns how long to wait before sending them.
func (l *limiter) reserve(n int64) time.Duration {
	if l.rate <= 0 || n <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Mono()
	start := max(l.at, now-time.Second)
	l.at = start + time.Duration(float64(n)/float64(l.rate)*float64(time.Second))
	return l.at - time.Second - now
}

// copyObject copies one object as it is. It reports false when the
// source no longer has it.
func (m *Mirror) copyObject(ctx context.Context, key string) (found bool, err error) {
	b, err := m.opts.Source.Get(ctx, key)
	if objstore.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mirror: reading %s from the source: %w", key, err)
	}
	if err := m.putObject(ctx, key, b); err != nil {
		return true, err
	}
	return true, nil
}

func (m *Mirror) putObject(ctx context.Context, key string, b []byte) error {
	if err := m.lim.wait(ctx, int64(len(b))); err != nil {
		return err
	}
	if _, err := m.opts.Dest.Put(ctx, key, b, objstore.PutOptions{}); err != nil {
		return fmt.Errorf("mirror: writing %s to the mirror: %w", key, err)
	}
	m.stats.CopiedObjects.Add(1)
	m.stats.CopiedBytes.Add(int64(len(b)))
	m.opts.Log.Debug("mirror: copied", "key", key, "bytes", len(b))
	return nil
}

// inDest reports whether the mirror store has key already, of size bytes
// (size < 0: any size; tables, whose listed size is their plaintext's).
// After a restart, what was copied since the last saved position is
// looked up rather than copied again: a HEAD is cheaper than a GET and a
// PUT.
func (m *Mirror) inDest(ctx context.Context, key string, size int64) bool {
	info, err := m.opts.Dest.Head(ctx, key)
	if err != nil || (size >= 0 && info.Size != size) {
		return false
	}
	m.stats.Skipped.Add(1)
	return true
}

// bigObject is copied alone, so that at most about Concurrency x 64 MiB
// are in memory (repack outputs can be far larger than segments).
const bigObject = 64 << 20

// copyMany copies keys (each with its expected size, 0 if unknown) with up
// to Concurrency copies at once; missing reports the keys the source no
// longer has.
func (m *Mirror) copyMany(ctx context.Context, keys []string, sizes []int64) (missing []string, err error) {
	var (
		mu   sync.Mutex
		g    worker.Group
		sem  = make(chan struct{}, m.opts.Concurrency)
		errs error
	)
	for i, k := range keys {
		n := 1
		if sizes[i] > bigObject {
			n = m.opts.Concurrency
		}
		for range n {
			sem <- struct{}{}
		}
		g.Go(func() {
			defer func() {
				for range n {
					<-sem
				}
			}()
			if m.resuming && m.inDest(ctx, k, sizes[i]) {
				return
			}
			found, err := m.copyObject(ctx, k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && errs == nil {
				errs = err
			}
			if err == nil && !found {
				missing = append(missing, k)
			}
		})
	}
	g.Wait()
	return missing, errs
}
