//go:build ebbfs_testclock

// Package failpoint names points in ebbfs where tests can abort the process.
// Failpoints exist only in test builds (-tags ebbfs_testclock, the tag of
// the test time scale): there a failpoint is armed by the EBBFS_FAILPOINT
// environment variable ("name" or "name=N" to fire on the N-th hit) read
// once at start, and when none is armed Hit costs one atomic load. In a
// production build Hit does nothing and the variable is ignored
// (failpoint_off.go).
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Enabled reports whether this is a test build with working failpoints.
const Enabled = true

// Env names the environment variable that arms a failpoint.
const Env = "EBBFS_FAILPOINT"

var (
	armed  atomic.Bool
	name   string
	after  int64
	hits   atomic.Int64
	onFire = func(n string) { fmt.Fprintf(os.Stderr, "failpoint %s: aborting\n", n); os.Exit(97) }
)

func init() { Arm(os.Getenv(Env)) }

// Arm sets the failpoint spec ("" disarms). Used at start and by tests.
func Arm(spec string) {
	armed.Store(false)
	hits.Store(0)
	if spec == "" {
		return
	}
	name, after = spec, 1
	if i := strings.IndexByte(spec, '='); i >= 0 {
		name = spec[:i]
		if n, err := strconv.ParseInt(spec[i+1:], 10, 64); err == nil && n > 0 {
			after = n
		}
	}
	armed.Store(true)
}

// SetAction replaces what a firing failpoint does (tests in-process).
func SetAction(f func(name string)) { onFire = f }

// Hit marks that execution reached the named point.
func Hit(n string) {
	if !armed.Load() || n != name {
		return
	}
	if hits.Add(1) == after {
		onFire(n)
	}
}
