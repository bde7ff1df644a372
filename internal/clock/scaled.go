//go:build ebbfs_testclock

package clock

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// TimeScaleEnv names the environment variable that speeds up the clock of
// a binary built with the ebbfs_testclock tag. Production builds (without
// the tag) ignore it and log a warning.
const TimeScaleEnv = "EBBFS_TEST_TIMESCALE"

// TestClockBuild reports whether this binary was built with the
// ebbfs_testclock tag.
const TestClockBuild = true

// Scaled is a clock that runs Factor times faster than base, for end-to-end
// tests of the real binary: a 60 s deadline passes in 60/Factor seconds.
// It exists only in binaries built with the ebbfs_testclock tag.
type Scaled struct {
	base      Clock
	factor    float64
	wallStart time.Time
	monoStart time.Duration
}

// NewScaled returns a clock running factor (> 0) times faster than base.
func NewScaled(base Clock, factor float64) *Scaled {
	return &Scaled{base: base, factor: factor, wallStart: base.Now(), monoStart: base.Mono()}
}

func (s *Scaled) elapsed() time.Duration {
	return time.Duration(float64(s.base.Mono()-s.monoStart) * s.factor)
}

// Now is the wall time at the start plus the scaled elapsed time.
func (s *Scaled) Now() time.Time { return s.wallStart.Add(s.elapsed()) }

// Mono is the scaled monotonic time.
func (s *Scaled) Mono() time.Duration { return s.monoStart + s.elapsed() }

// After fires once d of scaled time has passed.
func (s *Scaled) After(d time.Duration) <-chan time.Time {
	return s.base.After(time.Duration(float64(d) / s.factor))
}

// FromEnv returns base, or, when EBBFS_TEST_TIMESCALE holds a factor > 1, a
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
		log.Warn("TEST CLOCK: time runs faster than real time; never use this build in production", "factor", f)
	}
	return NewScaled(base, f), nil
}
