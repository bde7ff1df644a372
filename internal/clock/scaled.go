//go:build ebbfs_testclock

package clock

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// TimeScaleEnv names the environment variable that speeds up the
// reclamation clock of a binary built with the ebbfs_testclock tag.
// Production builds (without the tag) ignore it and log a warning.
const TimeScaleEnv = "EBBFS_TEST_TIME_SCALE"

// TestClockBuild reports whether this binary was built with the
// ebbfs_testclock tag.
const TestClockBuild = true

// Scaled runs monotonic time and timers factor times faster than base,
// for end-to-end tests of the real binary: a 60 s deadline passes in
// 60/factor seconds without any rule being weakened. Wall time (persisted
// timestamps) stays base's. It exists only in binaries built with the
// ebbfs_testclock tag.
type Scaled struct {
	base      Clock
	factor    float64
	monoStart time.Duration
}

// NewScaled returns a clock running factor (> 0) times faster than base.
func NewScaled(base Clock, factor float64) *Scaled {
	return &Scaled{base: base, factor: factor, monoStart: base.Mono()}
}

// Now is base's wall time.
func (s *Scaled) Now() time.Time { return s.base.Now() }

// Mono is the scaled monotonic time.
func (s *Scaled) Mono() time.Duration {
	return s.monoStart + time.Duration(float64(s.base.Mono()-s.monoStart)*s.factor)
}

// After fires once d of scaled time has passed.
func (s *Scaled) After(d time.Duration) <-chan time.Time {
	return s.base.After(time.Duration(float64(d) / s.factor))
}

// FromEnv returns base, or, when EBBFS_TEST_TIME_SCALE holds a factor, a
// clock running that many times faster. A malformed value is an error: a
// test that asked for speed must not silently run at real speed.
func FromEnv(base Clock, log *slog.Logger) (Clock, error) {
	v := os.Getenv(TimeScaleEnv)
	if v == "" {
		return base, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 || f > 1e6 {
		return nil, fmt.Errorf("clock: %s=%q: want a factor between 1 and 1000000", TimeScaleEnv, v)
	}
	if log != nil {
		log.Warn("TEST BUILD: reclamation time runs faster than real time; never use this build in production", "scale", f)
	}
	return NewScaled(base, f), nil
}
