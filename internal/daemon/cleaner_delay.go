package daemon

import (
	"log/slog"
	"os"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

// testCleanerDelayEnv names the tombstone cleaner's wake-up delay (a
// duration, at most a minute) in binaries built with the ebbfs_testclock
// tag, so that end-to-end tests can watch tombstones pending in the
// monitor and on the page. Production builds ignore it (testbuild_off.go
// warns about it).
const testCleanerDelayEnv = "EBBFS_TEST_CLEANER_DELAY"

// testCleanerDelay returns reclaim.Options.CleanerDelay for this build.
func testCleanerDelay(log *slog.Logger) time.Duration {
	v := os.Getenv(testCleanerDelayEnv)
	if v == "" || !clock.TestClockBuild {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Minute {
		log.Warn("ignoring an invalid test cleaner delay", "env", testCleanerDelayEnv, "value", v)
		return 0
	}
	log.Warn("TEST BUILD: the tombstone cleaner waits after every wake-up", "delay", d)
	return d
}
