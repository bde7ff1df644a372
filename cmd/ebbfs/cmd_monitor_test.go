package main

import (
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

func sampleState(at time.Time, readBytes, reqs uint64) *monitorState {
	return &monitorState{
		At: at, Role: roleWriter, Version: "v1", Store: "file:///s", Mountpoint: "/mnt",
		FUSE:          map[string]stats.OpSnapshot{"read": {Count: readBytes / 4096, Bytes: readBytes}},
		StoreRequests: objstore.Counts{Get: int64(reqs)},
		Engine:        engineStats{StatsSnapshot: fs.StatsSnapshot{Barriers: 3, TombstonesCreated: 1}},
		Space: &spaceReply{SpaceReport: reclaim.SpaceReport{LiveBytes: 1 << 20, SegmentBytes: 3 << 20, DeadBytes: 2 << 20,
			AwaitingBytes: 2 << 20, AwaitingSegments: 1, DeadSegments: 1, TombstonesPending: 1, TombstoneBytes: 2 << 20,
			EarliestDeadline: at.Add(5 * time.Second)}},
		Reclaim:       &reclaim.Activity{Phase: reclaim.PhaseIdle},
		ReclaimTotals: &reclaim.Totals{Cycles: map[string]uint64{"ok": 2}},
	}
}

func TestPlainLine(t *testing.T) {
	t0 := time.Now()
	prev, cur := sampleState(t0, 0, 10), sampleState(t0.Add(2*time.Second), 4<<20, 30)
	line := plainLine(prev, cur)
	for _, want := range []string{"writer", "read=2.0 MiB/s", "req/s=10.0", "barriers=3", "awaiting=2.0 MiB", "tombstones=1", "cycle=idle"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("plain output is not one line: %q", line)
	}
}

func TestTUIViewAndKeys(t *testing.T) {
	m := &tuiModel{interval: time.Second, width: 120, height: 60}
	t0 := time.Now()
	m.Update(sampleMsg{st: *sampleState(t0, 0, 0)})
	m.Update(sampleMsg{st: *sampleState(t0.Add(time.Second), 1<<20, 5)})
	v := m.View()
	for _, want := range []string{"writer", "tombstones pending 1", "awaiting", "2.0 MiB", "I/O and store", "Reclamation"} {
		if !strings.Contains(v, want) {
			t.Errorf("view lacks %q:\n%s", want, v)
		}
	}
	m.Update(tea.KeyMsg{Type: tea.KeyTab})
	if m.focus != panelFootprint {
		t.Errorf("tab: focus %d", m.focus)
	}
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	if m.confirm != "cycle" || !strings.Contains(m.View(), "Run a reclamation cycle now? (y/n)") {
		t.Errorf("r does not ask: confirm=%q", m.confirm)
	}
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("n")})
	if m.confirm != "" || m.busy != "" {
		t.Errorf("n does not cancel: %q %q", m.confirm, m.busy)
	}
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("s")})
	if m.confirm != "sweep" || !strings.Contains(m.View(), "Run an orphan sweep now? (y/n)") {
		t.Errorf("s does not ask: confirm=%q", m.confirm)
	}
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("y")}); cmd == nil || m.busy != "sweep" {
		t.Errorf("y does not start the sweep: busy=%q", m.busy)
	}
	m.Update(actionMsg{what: "sweep", text: "sweep done: listed 3, deleted 0 orphans (0 B)"})
	if m.busy != "" || !strings.Contains(m.View(), "sweep done: listed 3") {
		t.Errorf("the sweep's result is not shown: busy=%q", m.busy)
	}
	// A resize re-lays the panels: two columns from 150 cells.
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	if v := m.View(); !strings.Contains(strings.SplitN(v, "\n", 4)[2], "Reclamation") {
		t.Errorf("a 200-cell terminal has no second column:\n%s", v)
	}
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")}); cmd == nil {
		t.Error("q returns no command")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("q does not quit")
	}
}

func TestSparkline(t *testing.T) {
	if s := sparkline([]float64{0, 1, 2, 4}, 6); s != "  ▁▃▅█" {
		t.Errorf("sparkline %q", s)
	}
}
