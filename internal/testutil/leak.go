package testutil

import (
	"bytes"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Goroutines is a snapshot of the goroutines running when it was taken;
// Check, called once the code under test has been closed, fails the test
// if any goroutine started since is still running. It is the check that
// every goroutine has an owner that waits for it (internal/worker).
//
//	leaks := testutil.SnapshotGoroutines()
//	... open, use and close the code under test ...
//	leaks.Check(t, 10*time.Second)
type Goroutines struct {
	before map[int]bool
}

// SnapshotGoroutines records the goroutines running now.
func SnapshotGoroutines() Goroutines {
	g := Goroutines{before: map[int]bool{}}
	for _, s := range goroutineStacks() {
		g.before[s.id] = true
	}
	return g
}

// Check waits up to within for the goroutines started since the snapshot
// to end (an owner's Close may still be returning while its last
// goroutines exit) and fails t with the stacks of those left. The
// runtime's goroutines and the testing package's (other tests run in
// parallel) are not counted.
func (g Goroutines) Check(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := g.Leftover()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines outlived the code under test (waited %v):\n\n%s", len(left), within, strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Leftover returns the stacks of the goroutines started since the
// snapshot and still running, leaving out those Check ignores.
func (g Goroutines) Leftover() []string {
	var left []string
	for _, s := range goroutineStacks() {
		if !g.before[s.id] && !ignoredGoroutine(s.stack) {
			left = append(left, s.stack)
		}
	}
	sort.Strings(left)
	return left
}

type goroutineStack struct {
	id    int
	stack string
}

// goroutineStacks returns every goroutine's stack (runtime.Stack leaves
// out the runtime's own: the garbage collector's, the finalizer's when
// idle).
func goroutineStacks() []goroutineStack {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutineStack
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		s := string(bytes.TrimSpace(block))
		head, _, _ := strings.Cut(s, " [")
		id, err := strconv.Atoi(strings.TrimPrefix(head, "goroutine "))
		if err != nil {
			continue
		}
		out = append(out, goroutineStack{id: id, stack: s})
	}
	return out
}

// ignoredGoroutine reports whether a goroutine belongs to the runtime or
// the testing package rather than to the code under test.
func ignoredGoroutine(stack string) bool {
	for _, own := range []string{
		"created by testing.",        // other tests and their timers
		"testing.tRunner(",           // a test's own goroutine
		"testing.(*M).",              // the test binary's main loop
		"os/signal.signal_recv",      // started once by signal.Notify
		"runtime.ensureSigM",         // the same
		"runtime/trace.Start",        // go test -trace
		"runtime.ReadTrace",          // the same
		"created by runtime.gc",      // the runtime's workers
		"created by runtime.init",    // the runtime's forcegc and sweeper
		"runtime.runFinalizers",      // the finalizer goroutine
		"runtime.runfinq",            // the same, older runtimes
		"runtime.unique_runtime_reg", // unique's cleanup
	} {
		if strings.Contains(stack, own) {
			return true
		}
	}
	return false
}
