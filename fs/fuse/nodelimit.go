package fuse

import (
	"sync"
	"sync/atomic"
	"weak"

	"ebbfs.dev/ebbfs/internal/worker"
)

// The kernel keeps a dentry and an inode for every name it looked up or
// created until memory pressure makes it drop them, and go-fuse keeps a
// node (with its place in the parent's children) for each until the
// kernel's FORGET. On a machine with plenty of RAM that is never: a
// million files created or stat'ed meant a million nodes, about 500 bytes
// each, in the writer, past its memory bound.
//
// nodeLimit bounds them: past max nodes, a worker asks the kernel to drop
// the dentries of the oldest ones (an entry invalidation on the parent;
// the kernel then forgets the inode). The next access to such a name is a
// lookup again, which the 1 s entry timeout makes the kernel send anyway
// once the dentry is older than that. Directories and open files are left
// alone: the kernel would unhash their dentries all the same, and a
// working directory's getcwd or an open file's /proc/PID/fd link would
// then read "(deleted)". The notifications go out from the worker, never from a request:
// the kernel takes the directory's lock for them, which a request in that
// directory may hold while it waits for its own reply.

// DefaultMaxNodes is MountOptions.MaxNodes's default.
const DefaultMaxNodes = 100_000

type nodeLimit struct {
	f    *fsys
	max  int64
	live atomic.Int64 // nodes the kernel holds (counted, not yet forgotten)
	w    *worker.Worker

	mu struct {
		sync.Mutex
		closed bool
		// fifo holds the nodes in the order the kernel first got them
		// (from head); weak, so a forgotten node is not kept.
		fifo []weak.Pointer[Node]
		head int
	}
	invalidated atomic.Int64 // entry invalidations sent (tests)
}

func startNodeLimit(f *fsys, max int) *nodeLimit {
	l := &nodeLimit{f: f, max: int64(max)}
	l.w = worker.Start("fuse-nodelimit", nil, l.loop)
	return l
}

// added records that the kernel holds nd (a lookup or a create returned
// it). It never blocks on the kernel.
func (l *nodeLimit) added(nd *Node) {
	if !nd.counted.Swap(true) {
		l.live.Add(1)
	}
	if !nd.queued.Swap(true) {
		l.mu.Lock()
		if !l.mu.closed {
			l.mu.fifo = append(l.mu.fifo, weak.Make(nd))
			l.compactLocked()
		}
		l.mu.Unlock()
	}
	if l.live.Load() > l.max {
		l.w.Notify()
	}
}

// forgotten records the kernel's FORGET of nd.
func (l *nodeLimit) forgotten(nd *Node) {
	if nd.counted.Swap(false) {
		l.live.Add(-1)
	}
}

// compactLocked keeps the queue within about twice the nodes it can hold:
// it drops the consumed head and the entries of forgotten nodes.
func (l *nodeLimit) compactLocked() {
	q := l.mu.fifo
	if l.mu.head > 1024 && l.mu.head > len(q)/2 {
		n := copy(q, q[l.mu.head:])
		clear(q[n:])
		q, l.mu.head = q[:n], 0
	}
	if int64(len(q)-l.mu.head) > 2*l.max+1024 {
		kept := q[:l.mu.head]
		for _, w := range q[l.mu.head:] {
			if nd := w.Value(); nd != nil && nd.counted.Load() {
				kept = append(kept, w)
			} else if nd != nil {
				nd.queued.Store(false)
			}
		}
		clear(q[len(kept):])
		q = kept
	}
	l.mu.fifo = q
}

// pop takes up to n entries from the head.
func (l *nodeLimit) pop(n int) []weak.Pointer[Node] {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.mu.fifo[l.mu.head:]
	n = min(n, len(q))
	out := append([]weak.Pointer[Node](nil), q[:n]...)
	clear(q[:n])
	l.mu.head += n
	l.compactLocked()
	return out
}

func (l *nodeLimit) loop(w *worker.Worker) {
	for w.Wait(0) {
		// Drop down to 90% of max, once: the kernel's FORGETs arrive
		// after the invalidations, and the next wake-up sees them.
		excess := l.live.Load() - l.max*9/10
		for excess > 0 {
			batch := l.pop(int(min(excess, 1024)))
			if len(batch) == 0 {
				break
			}
			for _, w := range batch {
				nd := w.Value()
				if nd == nil {
					continue
				}
				nd.queued.Store(false)
				if !nd.counted.Load() || nd.IsDir() || l.f.e.IsOpen(nd.ino()) {
					continue
				}
				name, parent := nd.Parent()
				if parent == nil {
					continue
				}
				_ = parent.NotifyEntry(name) // ENOENT: the kernel had dropped it already
				l.invalidated.Add(1)
				excess--
			}
		}
	}
}

// close stops the worker (once the mount is gone) and waits for it.
func (l *nodeLimit) close() {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return
	}
	l.mu.closed = true
	l.mu.fifo, l.mu.head = nil, 0
	l.mu.Unlock()
	l.w.Close()
}
