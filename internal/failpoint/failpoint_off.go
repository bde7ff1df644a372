//go:build !ebbfs_testclock

package failpoint

// Enabled reports whether this is a test build with working failpoints.
// This one is a production build: failpoints do nothing.
const Enabled = false

// Env names the environment variable that arms a failpoint in a test
// build; a production build ignores it (the daemon logs a warning).
const Env = "EBBFS_FAILPOINT"

// Arm does nothing in a production build.
func Arm(spec string) {}

// SetAction does nothing in a production build.
func SetAction(f func(name string)) {}

// Hit does nothing in a production build.
func Hit(n string) {}
