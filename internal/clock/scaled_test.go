package clock

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestFromEnvUnsetIsBase(t *testing.T) {
	t.Setenv(TimeScaleEnv, "")
	base := NewFake(time.Unix(1000, 0))
	c, err := FromEnv(base, nil)
	if err != nil || c != Clock(base) {
		t.Fatalf("FromEnv with the variable unset = %v, %v; want the base clock", c, err)
	}
}

func TestFromEnvBuildBehaviour(t *testing.T) {
	t.Setenv(TimeScaleEnv, "100")
	var logs bytes.Buffer
	base := NewFake(time.Unix(1000, 0))
	c, err := FromEnv(base, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !TestClockBuild {
		if c != Clock(base) {
			t.Fatal("a production build scaled the clock")
		}
		if !strings.Contains(logs.String(), "ignoring") {
			t.Fatalf("no warning logged: %q", logs.String())
		}
		return
	}
	base.Advance(time.Second)
	if got := c.Mono(); got < 99*time.Second || got > 101*time.Second {
		t.Fatalf("scaled mono after 1 s = %v, want ~100 s", got)
	}
}
