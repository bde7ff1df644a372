// Package diskspace watches the free space of the local filesystem that
// holds the cache directory: one statfs (Statfs) and one periodic loop
// (Watcher) on the injected clock, whose checks (the metadata store's
// emergency reserve, the disk cache's own reserve) look at the free space
// in turn.
package diskspace

import (
	"sync"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/worker"
)

// Statfs reports the size of dir's filesystem and the bytes free for use
// (by an unprivileged user).
func Statfs(dir string) (total, avail int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// Every is how often a Watcher runs its checks: often enough that a disk
// something else fills gets the caches' space back before the metadata
// store runs out.
const Every = time.Second

// A Watcher runs its checks every Every on its clock, one after the
// other, from one worker. Each check looks at the free space itself (with
// a statfs its tests can replace) and acts on it.
type Watcher struct {
	w  *worker.Worker
	mu struct {
		sync.Mutex
		checks map[int]func()
		next   int
	}
}

// Start starts a Watcher on clk (nil: the real clock).
func Start(clk clock.Clock) *Watcher {
	ws := &Watcher{}
	ws.mu.checks = map[int]func(){}
	ws.w = worker.Start("diskspace", clk, func(w *worker.Worker) {
		for w.Wait(Every) {
			ws.run()
		}
	})
	return ws
}

// run calls every check once. Checks run outside the Watcher's lock, so
// one may remove itself.
func (ws *Watcher) run() {
	ws.mu.Lock()
	checks := make([]func(), 0, len(ws.mu.checks))
	for i := 0; i < ws.mu.next; i++ {
		if c, ok := ws.mu.checks[i]; ok {
			checks = append(checks, c)
		}
	}
	ws.mu.Unlock()
	for _, c := range checks {
		c()
	}
}

// Add has check run every Every until the returned function is called;
// once that function returns, check is not running and will not run
// again. It may be called more than once.
func (ws *Watcher) Add(check func()) (remove func()) {
	var state struct {
		sync.Mutex // held while check runs
		removed    bool
	}
	ws.mu.Lock()
	id := ws.mu.next
	ws.mu.next++
	ws.mu.checks[id] = func() {
		state.Lock()
		defer state.Unlock()
		if !state.removed {
			check()
		}
	}
	ws.mu.Unlock()
	return func() {
		ws.mu.Lock()
		delete(ws.mu.checks, id)
		ws.mu.Unlock()
		state.Lock()
		state.removed = true
		state.Unlock()
	}
}

// Notify has the checks run now (soon), not at the next period.
func (ws *Watcher) Notify() { ws.w.Notify() }

// Close stops the Watcher and waits for a run in progress.
func (ws *Watcher) Close() { ws.w.Close() }
