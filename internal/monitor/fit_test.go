package monitor

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"

	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/reclaim"
)

func TestFitLineBreaksBetweenPhrases(t *testing.T) {
	line := "tombstones cleaned 12 of 14 created · 896 extents, 56.0 MiB · last batch 3s ago: 64 extents"
	got := fitLine(line, 40, 13)
	for _, l := range got {
		if ansi.StringWidth(l) > 40 {
			t.Errorf("line %q is wider than 40", l)
		}
	}
	// The words come back in order; a separator where a line breaks goes.
	words := strings.Fields(strings.ReplaceAll(line, "·", ""))
	var back []string
	for _, l := range got {
		back = append(back, strings.Fields(strings.ReplaceAll(l, "·", ""))...)
	}
	if strings.Join(back, " ") != strings.Join(words, " ") {
		t.Errorf("fitting changed the words:\n%q\n%q", strings.Join(back, " "), strings.Join(words, " "))
	}
	if !strings.HasPrefix(got[1], strings.Repeat(" ", 13)) {
		t.Errorf("continuation %q not indented to the value column", got[1])
	}
	if long := fitLine(strings.Repeat("x", 50), 20, 0); len(long) != 1 || ansi.StringWidth(long[0]) != 20 || !strings.HasSuffix(long[0], "…") {
		t.Errorf("a word wider than the panel: %q", long)
	}
}

// TestViewFitsTheTerminal renders the full-screen view at 80x24, 120x40
// and 200x60: no line wider than the terminal (the terminal would wrap
// it mid-phrase), exactly the terminal's height, and the health line.
func TestViewFitsTheTerminal(t *testing.T) {
	t0 := time.Now()
	for _, size := range [][2]int{{80, 24}, {120, 40}, {200, 60}, {150, 45}} {
		m := &tuiModel{interval: time.Second, width: size[0], height: size[1]}
		for i, at := range []time.Time{t0, t0.Add(time.Second)} {
			st := sampleState(at, uint64(i)<<20, 5)
			st.Store = "s3://a-bucket-with-a-rather-long-name/and/a/prefix/under/it"
			st.Mountpoint = "/srv/ebbfs/a/deep/mountpoint/directory"
			st.Health = telemetry.Health{Role: telemetry.RoleWriter, LeaseEpoch: 7, LeaseHeartbeat: at.Add(-time.Minute),
				LastBarrier: at.Add(-2 * time.Second), DirtyBytes: 3 << 20, Replicas: 2, StoreReachable: true, Damaged: 3,
				CacheDirFree: 40 << 30, CacheDirFloor: 1 << 30}
			st.Reclaim = &reclaim.Activity{Phase: reclaim.PhaseIdle, LastCycle: &reclaim.CycleSummary{CycleStats: reclaim.CycleStats{Blocked: "paused by persistent checkpoint"}, End: at, Result: "blocked",
				Trigger: "dead bytes", Error: "reclaim: checkpoint list unreadable, reclaiming nothing"}}
			m.Update(sampleMsg{st: *st})
		}
		v := m.View()
		lines := strings.Split(v, "\n")
		if len(lines) != size[1] {
			t.Errorf("%dx%d: the view has %d lines, want the full height:\n%s", size[0], size[1], len(lines), v)
		}
		for i, l := range lines {
			if w := ansi.StringWidth(l); w > size[0] {
				t.Errorf("%dx%d: line %d is %d cells wide: %q", size[0], size[1], i, w, ansi.Strip(l))
			}
		}
		if !strings.Contains(ansi.Strip(v), "lease epoch 7") || !strings.Contains(ansi.Strip(v), "DAMAGE: 3 corrupt frames") {
			t.Errorf("%dx%d: no health line:\n%s", size[0], size[1], ansi.Strip(v))
		}
	}
}
