//go:build !ebbfs_testclock

package main

import (
	"log/slog"
	"os"

	"ebbfs.dev/ebbfs/internal/clock"
)

// reclaimClock returns the clock of the reclamation stages: always the
// real one in production builds. A test time scale in the environment is
// refused loudly rather than silently honoured or dropped.
func reclaimClock(log *slog.Logger) clock.Clock {
	if v := os.Getenv("EBBFS_TEST_TIME_SCALE"); v != "" {
		log.Warn("EBBFS_TEST_TIME_SCALE is ignored: this is a production build (the test clock exists only with -tags ebbfs_testclock)", "value", v)
	}
	return clock.Real{}
}
