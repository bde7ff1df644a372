package fuse

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/internal/worker"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// WriteInterruptAfter is how long a write to a regular file must have run
// before it honours an interrupt (a FUSE_INTERRUPT: the caller caught a
// signal). A write that finishes sooner ignores it and never fails with
// EINTR, as on a local disk: programs that take signals all the time (a
// profiler's timer, a language runtime's own signals) and do not retry
// EINTR would otherwise fail writes that were never stuck. Only a write
// that waits this long is waiting for the store (back-pressure behind a
// slow store, a store outage under a read-modify-write); a signal then
// ends it (EINTR, or the bytes already copied), so a program stuck on an
// unreachable store can still be interrupted. A fatal signal (SIGKILL, or
// one the caller neither catches, blocks nor ignores whose default is to
// end the process) is honoured at once: the kernel would otherwise keep
// the dying process until ebbfs answered.
const WriteInterruptAfter = time.Second

// patientCtx is the context a write runs on: the request's values, done
// only once the request was interrupted and the call has run for
// WriteInterruptAfter, or at once when the interrupt is a fatal signal.
// It costs nothing until someone waits on Done: then one goroutine, owned
// by the call (end stops it), watches for the interrupt.
type patientCtx struct {
	context.Context // the request's: its values; its Done is the interrupt

	clk    clock.Clock
	start  time.Duration // clk.Mono() when the call began
	caller uint32        // the calling thread (0: unknown)
	done   chan struct{}
	cancel func() // closes done once
	stop   chan struct{}

	mu       sync.Mutex
	watching bool // the watcher was started (or end was called)
	g        worker.Group
}

// patient returns ctx made patient and the function that ends it, which
// the caller must call (deferred) when the operation returns.
func (f *fsys) patient(ctx context.Context) (context.Context, func()) {
	clk := f.clk
	if clk == nil {
		clk = clock.Real{}
	}
	c := &patientCtx{Context: ctx, clk: clk, start: clk.Mono(), done: make(chan struct{}), stop: make(chan struct{})}
	if caller, ok := fuse.FromContext(ctx); ok {
		c.caller = caller.Pid
	}
	var once sync.Once
	c.cancel = func() { once.Do(func() { close(c.done) }) }
	return c, c.end
}

func (c *patientCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.watching {
		c.watching = true
		c.g.Go(c.watch)
	}
	return c.done
}

func (c *patientCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
	}
	if c.Context.Err() != nil && c.clk.Mono()-c.start >= WriteInterruptAfter {
		c.cancel()
		return context.Canceled
	}
	return nil
}

// watch cancels the context when the interrupt is due.
func (c *patientCtx) watch() {
	select {
	case <-c.stop:
		return
	case <-c.Context.Done():
	}
	if !fatalCheck(c.caller) {
		if wait := WriteInterruptAfter - (c.clk.Mono() - c.start); wait > 0 {
			select {
			case <-c.stop:
				return
			case <-c.clk.After(wait):
			}
		}
	}
	c.cancel()
}

// end stops the watcher and waits for it.
func (c *patientCtx) end() {
	c.mu.Lock()
	if !c.watching {
		c.watching = true // no watcher may start from now on
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	close(c.stop)
	c.g.Wait()
}

// defaultIgnored are the signals whose default action is not to end the
// process: SIGCHLD, SIGCONT, SIGURG, SIGWINCH (ignored) and SIGSTOP,
// SIGTSTP, SIGTTIN, SIGTTOU (stop).
var defaultIgnored = sigMask(syscall.SIGCHLD, syscall.SIGCONT, syscall.SIGURG, syscall.SIGWINCH,
	syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)

func sigMask(sigs ...syscall.Signal) uint64 {
	var m uint64
	for _, s := range sigs {
		m |= 1 << (uint(s) - 1)
	}
	return m
}

// fatalCheck is fatalPending; tests replace it.
var fatalCheck = fatalPending

// fatalPending reports whether thread tid has a signal pending that ends
// its process: SIGKILL (which the kernel queues on every thread of a
// process a fatal signal is ending), or a signal it neither blocks,
// ignores nor catches whose default action ends the process. It reads
// /proc/<tid>/status; anything it cannot read is not fatal (the write then
// ends after WriteInterruptAfter).
func fatalPending(tid uint32) bool {
	if tid == 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(tid), 10) + "/status")
	if err != nil {
		return false
	}
	return fatalIn(b)
}

// fatalIn is fatalPending's decision on a /proc/<tid>/status text.
func fatalIn(status []byte) bool {
	var pnd, shd, blk, ign, cgt uint64
	fields := map[string]*uint64{"SigPnd": &pnd, "ShdPnd": &shd, "SigBlk": &blk, "SigIgn": &ign, "SigCgt": &cgt}
	for _, line := range bytes.Split(status, []byte("\n")) {
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		if p := fields[string(name)]; p != nil {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 16, 64)
			if err != nil {
				return false
			}
			*p = v
		}
	}
	pending := (pnd | shd) &^ blk
	if pending&sigMask(syscall.SIGKILL) != 0 {
		return true
	}
	return pending&^ign&^cgt&^defaultIgnored != 0
}
