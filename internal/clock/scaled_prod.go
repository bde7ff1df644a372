//go:build !ebbfs_testclock

package clock

import (
	"log/slog"
	"os"
)

// TimeScaleEnv names the environment variable that speeds up the clock of
// a binary built with the ebbfs_testclock tag. This build does not have the
// tag: the variable has no effect.
const TimeScaleEnv = "EBBFS_TEST_TIME_SCALE"

// TestClockBuild reports whether this binary was built with the
// ebbfs_testclock tag.
const TestClockBuild = false

// FromEnv returns base unchanged: production builds cannot scale time. If
// EBBFS_TEST_TIME_SCALE is set anyway, it logs a warning saying so.
func FromEnv(base Clock, log *slog.Logger) (Clock, error) {
	if v := os.Getenv(TimeScaleEnv); v != "" && log != nil {
		log.Warn("ignoring "+TimeScaleEnv+": this binary was not built with the ebbfs_testclock tag; time runs at real speed", "value", v)
	}
	return base, nil
}
