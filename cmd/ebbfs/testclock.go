//go:build ebbfs_testclock

package main

import (
	"log/slog"
	"os"
	"strconv"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
)

// This file exists only in binaries built with -tags ebbfs_testclock (the
// end-to-end tests build one). It lets EBBFS_TEST_TIME_SCALE speed up the
// reclamation stages' monotonic time and timers, so that tests see the
// 60 s grace and the 24 h sweep pass in a fraction of the time, without
// weakening any rule. Production builds do not contain it.

// testTimeScaleEnv names the scale factor variable.
const testTimeScaleEnv = "EBBFS_TEST_TIME_SCALE"

// reclaimClock returns the clock of the reclamation stages.
func reclaimClock(log *slog.Logger) clock.Clock {
	v := os.Getenv(testTimeScaleEnv)
	if v == "" {
		return clock.Real{}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || f > 100000 {
		log.Warn("ignoring an invalid test time scale", "env", testTimeScaleEnv, "value", v)
		return clock.Real{}
	}
	log.Warn("TEST BUILD: reclamation time runs faster than real time", "scale", f)
	return &scaledClock{scale: f, start: time.Now()}
}

// scaledClock runs monotonic time and timers scale times faster; wall time
// (persisted timestamps) stays real.
type scaledClock struct {
	scale float64
	start time.Time
}

func (c *scaledClock) Now() time.Time { return time.Now() }

func (c *scaledClock) Mono() time.Duration {
	return time.Duration(float64(time.Since(c.start)) * c.scale)
}

func (c *scaledClock) After(d time.Duration) <-chan time.Time {
	return time.After(time.Duration(float64(d) / c.scale))
}
