package monitor

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

var (
	colLive    = lipgloss.Color("#2f9e5f")
	colFrag    = lipgloss.Color("#e0a630")
	colAwait   = lipgloss.Color("#e0786d")
	colDead    = lipgloss.Color("#c7473b")
	colPinned  = lipgloss.Color("#8a74d6")
	colMeta    = lipgloss.Color("#4a90d9")
	colOver    = lipgloss.Color("#8892a0")
	colMuted   = lipgloss.Color("#8892a0")
	colFocus   = lipgloss.Color("#4a90d9")
	colBorder  = lipgloss.Color("#505866")
	styleTitle = lipgloss.NewStyle().Bold(true)
	styleMuted = lipgloss.NewStyle().Foreground(colMuted)
	styleErr   = lipgloss.NewStyle().Foreground(colDead).Bold(true)
	styleLabel = lipgloss.NewStyle().Foreground(colMuted).Width(12)
)

// sparkline renders vs (oldest first) in width cells scaled to their max.
func sparkline(vs []float64, width int) string {
	const ticks = "▁▂▃▄▅▆▇█"
	tk := []rune(ticks)
	if len(vs) > width {
		vs = vs[len(vs)-width:]
	}
	mx := 0.0
	for _, v := range vs {
		mx = math.Max(mx, v)
	}
	var b strings.Builder
	for i := len(vs); i < width; i++ {
		b.WriteRune(' ')
	}
	for _, v := range vs {
		i := 0
		if mx > 0 {
			i = int(math.Round(v / mx * float64(len(tk)-1)))
		}
		b.WriteRune(tk[i])
	}
	return b.String()
}

// series returns f of the rates between successive samples.
func (m *tuiModel) series(f func(r rates) float64) []float64 {
	var out []float64
	for i := 1; i < len(m.samples); i++ {
		out = append(out, f(rateOf(m.samples[i-1], m.samples[i])))
	}
	return out
}

func row(label, value string) string { return styleLabel.Render(label) + " " + value }

func (m *tuiModel) View() string {
	if m.cur == nil {
		if m.err != nil {
			return styleErr.Render("ebbfs monitor: "+m.err.Error()) + "\n(retrying; q quits)\n"
		}
		return "ebbfs monitor: connecting…\n"
	}
	st := m.cur
	now := st.At
	w := max(m.width, 40)
	top := []string{m.header(st, w)}
	top = append(top, m.healthLines(st, w)...)
	if m.showHelp {
		top = append(top, m.help.FullHelpView(m.keys().FullHelp()))
	}
	// Two columns on a wide terminal (from 120 cells: at 40 rows one
	// column would push durability and checkpoints off the screen), one
	// otherwise.
	cols := 1
	if w >= 120 {
		cols = 2
	}
	pw := w
	if cols == 2 {
		pw = w / 2
	}
	bodies := []string{
		m.ioPanel(st, pw-4),
		m.footprintPanel(st, pw-4, now),
		m.reclaimPanel(st, pw-4, now),
		m.durabilityPanel(st, pw-4),
		m.checkpointPanel(st, now),
	}
	for i := range bodies {
		bodies[i] = fitBody(bodies[i], pw-4)
	}
	foot := m.footer()
	avail := m.height - lipgloss.Height(strings.Join(top, "\n")) - lipgloss.Height(foot)
	var body string
	if cols == 2 {
		left := m.column([]int{panelIO, panelFootprint, panelDurability}, bodies, pw, avail)
		right := m.column([]int{panelReclaim, panelCheckpoints}, bodies, pw, avail)
		body = lipgloss.JoinHorizontal(lipgloss.Top, left, right)
	} else {
		body = m.column([]int{panelIO, panelFootprint, panelReclaim, panelDurability, panelCheckpoints}, bodies, pw, avail)
	}
	view := strings.Join(append(top, body, foot), "\n")
	// Keep the footer (keys, prompts) visible on a short terminal.
	if lines := strings.Split(view, "\n"); m.height > 0 && len(lines) > m.height {
		foot := lines[len(lines)-1]
		lines = append(lines[:m.height-1], foot)
		view = strings.Join(lines, "\n")
	}
	return view
}

// column stacks the panels in order, the last one stretched so that the
// column fills height rows (the terminal's full height is used).
func (m *tuiModel) column(order []int, bodies []string, width, height int) string {
	panels := make([]string, len(order))
	used := 0
	for i, p := range order {
		panels[i] = m.panel(p, bodies[p], width)
		used += lipgloss.Height(panels[i])
	}
	if extra := height - used; height > 0 && extra > 0 {
		last := order[len(order)-1]
		panels[len(panels)-1] = m.panel(last, bodies[last]+strings.Repeat("\n", extra), width)
	}
	return lipgloss.JoinVertical(lipgloss.Left, panels...)
}

// healthLines is the health line `ebbfs status` leads with, fitted to w
// columns at its separators, alarms in red.
func (m *tuiModel) healthLines(st *telemetry.State, w int) []string {
	if st.Health.Role == "" {
		return nil // an older process
	}
	parts := HealthParts(st.Health, st.At)
	for i, p := range parts {
		if isAlarm(p) {
			parts[i] = styleErr.Render(p)
		}
	}
	return fitStyled(parts, HealthSep, w)
}

// isAlarm reports whether a health part is an alarm (its first word in
// capitals).
func isAlarm(part string) bool {
	word, _, _ := strings.Cut(part, " ")
	word = strings.TrimRight(word, ":,")
	return len(word) > 1 && strings.ToUpper(word) == word && strings.ToLower(word) != word
}

func (m *tuiModel) panel(i int, body string, width int) string {
	border := colBorder
	title := styleTitle.Render(panelNames[i])
	if i == m.focus {
		border = colFocus
		title = styleTitle.Foreground(colFocus).Render("▶ " + panelNames[i])
	}
	return lipgloss.NewStyle().Border(lipgloss.RoundedBorder()).BorderForeground(border).
		Width(width-2).Padding(0, 1).Render(title + "\n" + body)
}

func (m *tuiModel) header(st *telemetry.State, w int) string {
	role := lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("#ffffff")).Background(colMeta).Padding(0, 1)
	if st.Role != telemetry.RoleWriter {
		role = role.Background(colPinned)
	}
	name := st.Role
	if st.Checkpoint != "" {
		name += " " + st.Checkpoint
	}
	parts := []string{styleTitle.Render("ebbfs"), role.Render(name), "version " + st.Version,
		"up " + secs(st.UptimeSec), "store " + st.Store, "mount " + st.Mountpoint}
	if !st.StoreUnreachableSince.IsZero() {
		parts = append(parts, lipgloss.NewStyle().Bold(true).Render(fmt.Sprintf("store unreachable since %s (%s ago): %s",
			st.StoreUnreachableSince.Format("15:04:05"), secs(time.Since(st.StoreUnreachableSince).Seconds()), st.StoreLastError)))
	}
	if st.Replica != nil {
		lag := fmt.Sprintf("replica lag %s (journal %d)", secs(st.Replica.LagSeconds), st.Replica.Served)
		if st.Replica.Error != "" {
			lag += " store unreachable: " + st.Replica.Error
		}
		parts = append(parts, lipgloss.NewStyle().Bold(true).Render(lag))
	}
	parts = append(parts, styleMuted.Render(st.At.Local().Format(time.TimeOnly)))
	h := strings.Join(fitStyled(parts, "  ", w), "\n")
	if a := damageAlarm(st); a != "" {
		h += "\n" + strings.Join(fitLine(styleAlarm.Render(a), w, 0), "\n")
	}
	if m.err != nil {
		h += "\n" + strings.Join(fitLine(styleErr.Render("last sample failed: "+m.err.Error()), w, 0), "\n")
	}
	return h
}

func (m *tuiModel) footer() string {
	switch {
	case m.confirm == "cycle":
		return styleErr.Render("Run a reclamation cycle now? (y/n)")
	case m.confirm == "sweep":
		return styleErr.Render("Run an orphan sweep now? (y/n)")
	case m.busy != "":
		return "running a " + m.busy + " on the writer…"
	}
	s := m.help.ShortHelpView(m.keys().ShortHelp())
	if m.notice != "" {
		n := m.notice
		if m.noticeErr {
			n = styleErr.Render(n)
		}
		s = n + "   " + s
	}
	return s
}

func (m *tuiModel) ioPanel(st *telemetry.State, w int) string {
	r := rateOf(m.prev, st)
	sw := max(min(w-40, 60), 10)
	lines := []string{
		row("read", sparkline(m.series(func(r rates) float64 { return r.readB }), sw)+fmt.Sprintf(" %9s/s %8.1f ops/s", HumanBytes(int64(r.readB)), r.readOps)),
		row("write", sparkline(m.series(func(r rates) float64 { return r.writeB }), sw)+fmt.Sprintf(" %9s/s %8.1f ops/s", HumanBytes(int64(r.writeB)), r.writeOps)),
		row("store", sparkline(m.series(func(r rates) float64 { return r.req }), sw)+fmt.Sprintf(" %8.1f req/s", r.req)),
		row("", fmt.Sprintf("up %s/s  down %s/s", HumanBytes(int64(r.up)), HumanBytes(int64(r.down)))),
	}
	var kinds []string
	for _, k := range []string{"put", "get", "get_range", "head", "delete", "delete_many", "list"} {
		kinds = append(kinds, fmt.Sprintf("%s %.1f", k, r.byKind[k]))
	}
	lines = append(lines, row("by kind /s", strings.Join(kinds, " · ")))
	return strings.Join(lines, "\n")
}

// footprintBar renders one bar split by state.
func footprintBar(parts []barPart, w int) string {
	total := int64(0)
	for _, p := range parts {
		total += max(p.n, 0)
	}
	if total == 0 || w <= 0 {
		return styleMuted.Render(strings.Repeat("░", max(w, 0)))
	}
	var b strings.Builder
	used := 0
	for i, p := range parts {
		if p.n <= 0 {
			continue
		}
		cells := int(math.Round(float64(p.n) / float64(total) * float64(w)))
		if cells == 0 {
			cells = 1
		}
		if i == len(parts)-1 || used+cells > w {
			cells = max(w-used, 0)
		}
		used += cells
		b.WriteString(lipgloss.NewStyle().Foreground(p.c).Render(strings.Repeat("█", cells)))
	}
	if used < w {
		b.WriteString(strings.Repeat(" ", w-used))
	}
	return b.String()
}

type barPart struct {
	n int64
	c lipgloss.Color
}

func swatch(c lipgloss.Color) string { return lipgloss.NewStyle().Foreground(c).Render("■") }

func (m *tuiModel) footprintPanel(st *telemetry.State, w int, now time.Time) string {
	sp := st.Space
	if sp == nil {
		if st.Role != telemetry.RoleWriter {
			return styleMuted.Render("a reader keeps no footprint; the writer's monitor shows it")
		}
		return styleMuted.Render("waiting for the writer's reclamation to start")
	}
	pinned := int64(0)
	var by []string
	for name, b := range sp.Pinned {
		pinned = max(pinned, b)
		by = append(by, name)
	}
	sort.Strings(by)
	overhead := max(sp.SegmentBytes-sp.LiveBytes-sp.FragmentedBytes-sp.DeadBytes, 0)
	parts := []barPart{{sp.LiveBytes, colLive}, {overhead, colOver}, {sp.FragmentedBytes, colFrag},
		{sp.AwaitingBytes, colAwait}, {sp.DeadBytes - sp.AwaitingBytes, colDead}, {sp.MetaBytes, colMeta}}
	if pinned > 0 {
		parts = []barPart{{sp.LiveBytes, colLive}, {overhead, colOver}, {pinned, colPinned}, {sp.MetaBytes, colMeta}}
	}
	first := "none"
	if !sp.EarliestDeadline.IsZero() {
		first = until(sp.EarliestDeadline, now)
	}
	lines := []string{
		footprintBar(parts, max(w, 10)),
		row(swatch(colLive)+" live", fmt.Sprintf("%-10s in %d segments", HumanBytes(sp.LiveBytes), sp.LiveSegments)),
		row(swatch(colFrag)+" fragmented", fmt.Sprintf("%-10s in %d segments (repack's work)", HumanBytes(sp.FragmentedBytes), sp.FragmentedSegments)),
		row(swatch(colDead)+" dead", fmt.Sprintf("%-10s in %d segments", HumanBytes(sp.DeadBytes), sp.DeadSegments)),
		row(swatch(colAwait)+" awaiting", fmt.Sprintf("%-10s in %d segments awaiting their deadline, first due %s", HumanBytes(sp.AwaitingBytes), sp.AwaitingSegments, first)),
		row(swatch(colPinned)+" pinned", fmt.Sprintf("%-10s %s", HumanBytes(pinned), strings.Join(by, ", "))),
		row(swatch(colMeta)+" metadata", fmt.Sprintf("%-10s in %d objects", HumanBytes(sp.MetaBytes), sp.MetaObjects)),
		row("stored", fmt.Sprintf("%-10s in %d segments (%s frame overhead)", HumanBytes(sp.SegmentBytes), sp.SegmentCount, HumanBytes(overhead))),
	}
	if st.SpaceError != "" {
		lines = append(lines, styleErr.Render(st.SpaceError))
	}
	return strings.Join(lines, "\n")
}

func (m *tuiModel) reclaimPanel(st *telemetry.State, w int, now time.Time) string {
	e := st.Engine
	r := rateOf(m.prev, st)
	var lines []string
	if sp := st.Space; sp != nil {
		lines = append(lines, row("cleaner", fmt.Sprintf("tombstones pending %d (%s) · %.1f extents/s", sp.TombstonesPending, HumanBytes(sp.TombstoneBytes), r.extents)))
	} else if st.Role != telemetry.RoleWriter {
		lines = append(lines, row("cleaner", "readers run no reclamation"))
	}
	last := "none yet"
	if !e.LastBatch.At.IsZero() {
		last = fmt.Sprintf("%s: %d extents, %d tombstones finished, %s", until(e.LastBatch.At, now), e.LastBatch.Extents, e.LastBatch.Tombstones, HumanBytes(e.LastBatch.Bytes))
	}
	if st.Role == telemetry.RoleWriter {
		lines = append(lines,
			row("", fmt.Sprintf("tombstones cleaned %d of %d created · %d extents, %s", e.TombstonesProcessed, e.TombstonesCreated, e.ExtentsCleaned, HumanBytes(int64(e.BytesCleaned)))),
			row("", "last batch "+last))
	}
	a := st.Reclaim
	if a == nil {
		return strings.Join(lines, "\n")
	}
	phase := a.Phase
	if a.Trigger != "" {
		phase += fmt.Sprintf(" (triggered by %s, started %s)", a.Trigger, until(a.CycleStarted, now))
	}
	lines = append(lines, row("cycle", phase))
	next := "when something changes"
	if !a.NextCycle.IsZero() {
		next = until(a.NextCycle, now) + " (" + a.NextReason + ")"
	}
	lines = append(lines, row("", "next "+next))
	if lc := a.LastCycle; lc != nil {
		s := fmt.Sprintf("last %s %s (%s): deleted %d, freed %s, repacks %d, relocated %d frames, %s",
			until(lc.End, now), lc.Result, lc.Trigger, lc.Deleted, HumanBytes(lc.BytesFreed), lc.Repacks, lc.RelocatedFrames, lc.Duration.Round(time.Millisecond))
		if lc.Blocked != "" {
			s += " · " + lc.Blocked
		}
		if lc.Error != "" {
			s += " · " + styleErr.Render(lc.Error)
		}
		lines = append(lines, row("", s))
	}
	if t := st.ReclaimTotals; t != nil {
		lines = append(lines, row("", styleMuted.Render(fmt.Sprintf("total: %d ok, %d blocked, %d failed · %d deleted, %s freed · %d repacks",
			t.Cycles["ok"], t.Cycles["blocked"], t.Cycles["error"], t.Deleted, HumanBytes(int64(t.BytesFreed)), t.Repacks))))
	}
	if len(a.Jobs) == 0 {
		lines = append(lines, row("repack", "no job in flight"))
	}
	for i, j := range a.Jobs {
		if i >= 4 && m.focus != panelReclaim {
			lines = append(lines, row("", fmt.Sprintf("… %d more (tab here to see all)", len(a.Jobs)-i)))
			break
		}
		label := ""
		if i == 0 {
			label = "repack"
		}
		out := "output pending"
		if j.Output != "" {
			out = "→ " + j.Output
		}
		lines = append(lines, row(label, fmt.Sprintf("#%d %s: %d sources (%s), gathered %s of %s, %s, %d moved",
			j.ID, j.Phase, len(j.Sources), HumanBytes(j.SourceBytes), HumanBytes(j.Gathered), HumanBytes(j.LiveBytes), out, j.Moved)))
	}
	sw := "next " + until(a.NextSweep, now)
	if a.NextSweep.IsZero() {
		sw = "not scheduled"
	}
	if a.SweepRunning {
		sw = "running now"
	}
	if ls := a.LastSweep; ls != nil {
		sw += fmt.Sprintf(" · last %s: listed %d, %d orphans deleted (%s)", until(ls.Start, now), ls.Listed, ls.Deleted, HumanBytes(ls.DeletedBytes))
		if ls.Error != "" {
			sw += " · " + styleErr.Render(ls.Error)
		}
	}
	lines = append(lines, row("sweep", sw))
	if g := st.MetaGC; g != nil {
		s := "no pass yet"
		if g.Passes > 0 {
			s = fmt.Sprintf("last %s: %d objects, %s deleted", until(g.LastAt, now), g.Last.Deleted, HumanBytes(g.Last.Bytes))
			if g.Error != "" {
				s += " · " + styleErr.Render(g.Error)
			}
		}
		lines = append(lines, row("meta gc", s+" · next "+until(g.Next, now)))
	}
	return strings.Join(lines, "\n")
}

func (m *tuiModel) durabilityPanel(st *telemetry.State, w int) string {
	r := rateOf(m.prev, st)
	lat := r.barrierLat
	if lat.Count == 0 {
		lat = st.Engine.BarrierLatency // nothing in the window: since start
	}
	q := func(v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return secs(v)
	}
	sw := max(min(w-46, 40), 8)
	c := st.Cache
	hits := c.MemHits + c.DiskHits
	ratio := "no reads yet"
	if all := hits + c.Misses; all > 0 {
		ratio = fmt.Sprintf("%.1f%% hits", 100*float64(hits)/float64(all))
	}
	limit := "no limit"
	if st.MemoryLimit > 0 && st.MemoryLimit < math.MaxInt64 {
		limit = HumanBytes(st.MemoryLimit) + " limit"
	}
	lines := []string{
		row("barriers", sparkline(m.series(func(r rates) float64 { return r.barriers }), sw)+fmt.Sprintf(" %.2f/s  p50 %s  p99 %s", r.barriers, q(lat.Quantile(0.5)), q(lat.Quantile(0.99)))),
		row("dirty", HumanBytes(st.DirtyBytes)+" waiting for a barrier"),
		row("cache", fmt.Sprintf("%s · memory %s · disk %s", ratio, HumanBytes(c.MemBytes), HumanBytes(c.DiskBytes))),
		row("memory", fmt.Sprintf("%s RSS of %s", HumanBytes(st.MemoryRSS), limit)),
	}
	if c.Corrupt > 0 || c.DiskCorrupt > 0 {
		lines = append(lines, styleErr.Render(fmt.Sprintf("corrupt frames: %d from the store, %d in the disk cache", c.Corrupt, c.DiskCorrupt)))
	}
	return strings.Join(lines, "\n")
}

func (m *tuiModel) checkpointPanel(st *telemetry.State, now time.Time) string {
	if st.CheckpointError != "" {
		return styleErr.Render("checkpoint list unreadable: " + st.CheckpointError)
	}
	if len(st.Checkpoints) == 0 {
		return "none · replicas attached: 0"
	}
	replicas := 0
	var lines []string
	for _, c := range st.Checkpoints {
		exp := "until deleted"
		if c.Kind == checkpoint.Ephemeral {
			exp = "expires " + until(c.ExpireTime, now)
			if sp := st.Space; sp != nil && sp.HeldBy == c.Name {
				exp += fmt.Sprintf(" · holds back %s (grace %s)", HumanBytes(sp.AwaitingBytes), sp.HeldGrace.Round(time.Second))
			}
		}
		name := c.Name
		if strings.HasPrefix(c.Name, "reader-") {
			replicas++
			name += " (replica)"
		}
		lines = append(lines, fmt.Sprintf("%-40s %-10s %s", name, c.Kind, exp))
	}
	return strings.Join(append(lines, fmt.Sprintf("replicas attached: %d", replicas)), "\n")
}
