package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/admin"
)

func TestRenderSample(t *testing.T) {
	t0 := time.Now()
	prev := &sample{at: t0, st: admin.Status{Extra: map[string]any{extraStoreRequests: float64(10), extraBytesUp: float64(0)}}}
	cur := &sample{at: t0.Add(2 * time.Second), st: admin.Status{Barriers: 3, Extra: map[string]any{
		extraStoreRequests: float64(30), extraBytesUp: float64(4 << 20), extraLiveBytes: float64(1 << 20),
	}}, space: &spaceReply{}}
	var b bytes.Buffer
	renderSample(&b, prev, cur, false)
	line := b.String()
	for _, want := range []string{"live=1.0 MiB", "req/s=10.0", "up=2.0 MiB/s", "barriers=3", "stored=0 B"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if strings.Count(line, "\n") != 1 {
		t.Errorf("non-terminal output is not one line: %q", line)
	}
	b.Reset()
	renderSample(&b, nil, cur, true)
	if !strings.HasPrefix(b.String(), "\x1b[H\x1b[2J") || !strings.Contains(b.String(), "live data") {
		t.Errorf("terminal output: %q", b.String())
	}
}
