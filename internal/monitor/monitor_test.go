package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/stats"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/reclaim"
)

func sampleState(at time.Time, readBytes, reqs uint64) *telemetry.State {
	return &telemetry.State{
		At: at, Role: telemetry.RoleWriter, Version: "v1", Store: "file:///s", Mountpoint: "/mnt",
		FUSE:          map[string]stats.OpSnapshot{"read": {Count: readBytes / 4096, Bytes: readBytes}},
		StoreRequests: objstore.Counts{Get: int64(reqs)},
		Engine:        telemetry.EngineStats{StatsSnapshot: fs.StatsSnapshot{Barriers: 3, TombstonesCreated: 1}},
		Space: &telemetry.SpaceReply{SpaceReport: reclaim.SpaceReport{LiveBytes: 1 << 20, SegmentBytes: 3 << 20, DeadBytes: 2 << 20,
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

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB", 5<<40 + 1<<39: "5.5 TiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestPlainSamplesTheProcess: Plain fetches the state from the admin
// endpoint every interval and prints one line per sample, with the rates
// between samples from the second on.
func TestPlainSamplesTheProcess(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != telemetry.RouteMonitor {
			http.NotFound(w, r)
			return
		}
		i := n.Add(1) - 1
		_ = json.NewEncoder(w).Encode(sampleState(t0.Add(time.Duration(i)*time.Second), uint64(i)*(2<<20), uint64(i)*5))
	}))
	defer srv.Close()
	cl := admin.NewClient("", strings.TrimPrefix(srv.URL, "http://"))
	var out bytes.Buffer
	if err := Plain(context.Background(), cl, &out, 100*time.Millisecond, 3); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || n.Load() != 3 {
		t.Fatalf("%d lines from %d samples, want 3:\n%s", len(lines), n.Load(), out.String())
	}
	if !strings.Contains(lines[0], "read=0 B/s") || !strings.Contains(lines[2], "read=2.0 MiB/s") || !strings.Contains(lines[2], "req/s=5.0") {
		t.Errorf("rates wrong:\n%s", out.String())
	}

	// A process that is not running ends the monitor with the error.
	srv.Close()
	if err := Plain(context.Background(), cl, &out, 100*time.Millisecond, 1); err == nil {
		t.Error("no error from a process that is gone")
	}
}

func TestUntilAndSecs(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{time.Time{}, "never"},
		{now.Add(5 * time.Second), "in 5s"},
		{now.Add(-90 * time.Second), "1m30s ago"},
		{now.Add(1500 * time.Millisecond), "in 1.5s"},
		{now.Add(-250 * time.Microsecond), "0s ago"},
	} {
		if got := until(tc.t, now); got != tc.want {
			t.Errorf("until(%v) = %q, want %q", tc.t.Sub(now), got, tc.want)
		}
	}
}

// TestViewOfAReplica: a replica's view shows its lag and no reclamation
// controls' results.
func TestViewOfAReplica(t *testing.T) {
	m := &tuiModel{interval: time.Second, width: 120, height: 60}
	st := sampleState(time.Now(), 0, 0)
	st.Role, st.Space, st.Reclaim, st.ReclaimTotals = telemetry.RoleReplica, nil, nil, nil
	st.Replica = &telemetry.ReplicaState{Served: 42, LagSeconds: 3.2, Follows: true}
	m.Update(sampleMsg{st: *st})
	v := m.View()
	for _, want := range []string{"replica lag 3.2s (journal 42)"} {
		if !strings.Contains(v, want) {
			t.Errorf("replica view lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "tombstones pending") {
		t.Errorf("a replica's view shows the writer's footprint:\n%s", v)
	}
}

// TestReplicaOffersOnlyWorkingKeys: a replica's monitor neither offers nor
// takes r and s (it does not reclaim); the writer's does both.
func TestReplicaOffersOnlyWorkingKeys(t *testing.T) {
	m := &tuiModel{interval: time.Second, width: 120, height: 60}
	st := sampleState(time.Now(), 0, 0)
	st.Role, st.Space, st.Reclaim, st.ReclaimTotals = telemetry.RoleReplica, nil, nil, nil
	m.Update(sampleMsg{st: *st})
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("?")})
	v := m.View()
	for _, gone := range []string{"run a cycle now", "sweep now"} {
		if strings.Contains(v, gone) {
			t.Errorf("a replica's monitor offers %q:\n%s", gone, v)
		}
	}
	if !strings.Contains(v, "quit") {
		t.Errorf("a replica's monitor lost its other keys:\n%s", v)
	}
	for _, k := range []string{"r", "s"} {
		m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)})
		if m.confirm != "" {
			t.Errorf("%s on a replica asks %q", k, m.confirm)
		}
	}
	w := &tuiModel{interval: time.Second, width: 120, height: 60}
	w.Update(sampleMsg{st: *sampleState(time.Now(), 0, 0)})
	if v := w.View(); !strings.Contains(v, "run a cycle now") {
		t.Errorf("the writer's monitor does not offer r:\n%s", v)
	}
}

// TestCheckpointPanelNamesWhatATTLCheckpointHolds: the checkpoint whose
// span sets the grace says how many dead bytes it holds back.
func TestCheckpointPanelNamesWhatATTLCheckpointHolds(t *testing.T) {
	m := &tuiModel{interval: time.Second, width: 120, height: 60}
	now := time.Now()
	st := sampleState(now, 0, 0)
	st.Checkpoints = []checkpoint.Record{{Name: "hold", Kind: checkpoint.Ephemeral, ManifestSeq: 1, CreateTime: now, ExpireTime: now.Add(10 * time.Minute)}}
	st.Space.AwaitingBytes, st.Space.HeldBy, st.Space.HeldGrace = 192<<20, "hold", 10*time.Minute+30*time.Second
	if p := m.checkpointPanel(st, now); !strings.Contains(p, "holds back 192.0 MiB (grace 10m30s)") {
		t.Fatalf("checkpoint panel:\n%s", p)
	}
}
