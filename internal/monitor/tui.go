package monitor

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

// The terminal monitor: a bubbletea program that samples /v1/monitor
// every interval and redraws the panels (monitor_view.go).

// historyWindow is how far back the sparklines reach.
const historyWindow = 2 * time.Minute

// Panels, in tab order.
const (
	panelIO = iota
	panelFootprint
	panelReclaim
	panelDurability
	panelCheckpoints
	numPanels
)

var panelNames = [numPanels]string{"I/O and store", "Segment footprint", "Reclamation", "Durability", "Checkpoints"}

type keyMap struct {
	Quit, Help, Next, Prev, Run, Sweep, Yes, No key.Binding
}

func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Quit, k.Help, k.Next, k.Run, k.Sweep}
}

func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.Quit, k.Help}, {k.Next, k.Prev}, {k.Run, k.Sweep}, {k.Yes, k.No}}
}

var monKeys = keyMap{
	Quit:  key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
	Help:  key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
	Next:  key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next panel")),
	Prev:  key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous panel")),
	Run:   key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "run a cycle now")),
	Sweep: key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "sweep now")),
	Yes:   key.NewBinding(key.WithKeys("y", "Y"), key.WithHelp("y", "confirm")),
	No:    key.NewBinding(key.WithKeys("n", "N", "esc"), key.WithHelp("n/esc", "cancel")),
}

// keys returns the bindings that work on the process shown: a replica
// or a checkpoint reader does not reclaim, so r and s are neither offered
// nor taken there.
func (m *tuiModel) keys() keyMap {
	k := monKeys
	if m.cur != nil && m.cur.Role != telemetry.RoleWriter {
		k.Run.SetEnabled(false)
		k.Sweep.SetEnabled(false)
	}
	return k
}

type tickMsg struct{}

type sampleMsg struct {
	st  telemetry.State
	err error
}

type actionMsg struct {
	what string
	text string
	err  error
}

type tuiModel struct {
	cl       *admin.Client
	interval time.Duration

	width, height int
	focus         int
	showHelp      bool
	help          help.Model
	confirm       string // "cycle" or "sweep" while asking
	busy          string // an action in flight
	notice        string // the last action's result
	noticeErr     bool

	cur      *telemetry.State
	prev     *telemetry.State
	samples  []*telemetry.State // the last historyWindow, oldest first
	err      error
	fetching bool
}

// RunTUI runs the full-screen monitor of the process behind cl until the
// user quits.
func RunTUI(cl *admin.Client, interval time.Duration) error {
	m := &tuiModel{cl: cl, interval: interval, help: help.New(), width: 100, height: 40}
	p := tea.NewProgram(m, tea.WithAltScreen())
	_, err := p.Run()
	return err
}

func (m *tuiModel) Init() tea.Cmd { return m.fetch() }

func (m *tuiModel) fetch() tea.Cmd {
	m.fetching = true
	cl, d := m.cl, m.interval
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
		defer cancel()
		st, err := fetchState(ctx, cl)
		return sampleMsg{st: st, err: err}
	}
}

func (m *tuiModel) tick() tea.Cmd {
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
}

// action runs a cycle or a sweep on the writer.
func (m *tuiModel) action(what string) tea.Cmd {
	cl := m.cl
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		switch what {
		case "cycle":
			var st cycleReply
			err := cl.Do(ctx, http.MethodPost, telemetry.RouteReclaimRun, nil, &st)
			return actionMsg{what: what, err: err, text: fmt.Sprintf("cycle done: deleted %d, freed %s, %d repacks, %d frames relocated",
				st.Deleted, HumanBytes(st.BytesFreed), st.Repacks, st.RelocatedFrames)}
		default:
			var st sweepReply
			err := cl.Do(ctx, http.MethodPost, telemetry.RouteReclaimSweep, nil, &st)
			return actionMsg{what: what, err: err, text: fmt.Sprintf("sweep done: listed %d, deleted %d orphans (%s)",
				st.Listed, st.Deleted, HumanBytes(st.DeletedBytes))}
		}
	}
}

// cycleReply and sweepReply are the parts of the answers the monitor shows.
type cycleReply struct {
	Deleted, Repacks, RelocatedFrames int
	BytesFreed                        int64
}

type sweepReply struct {
	Listed, Deleted int
	DeletedBytes    int64
}

func (m *tuiModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.help.Width = msg.Width
		return m, nil
	case tickMsg:
		if m.fetching {
			return m, m.tick()
		}
		return m, m.fetch()
	case sampleMsg:
		m.fetching = false
		if msg.err != nil {
			m.err = msg.err
			return m, m.tick()
		}
		m.err = nil
		st := msg.st
		m.prev, m.cur = m.cur, &st
		m.samples = append(m.samples, &st)
		for len(m.samples) > 1 && st.At.Sub(m.samples[0].At) > historyWindow {
			m.samples = m.samples[1:]
		}
		return m, m.tick()
	case actionMsg:
		m.busy = ""
		m.noticeErr = msg.err != nil
		if msg.err != nil {
			m.notice = msg.what + " failed: " + msg.err.Error()
		} else {
			m.notice = msg.text
		}
		return m, m.fetch()
	case tea.KeyMsg:
		if m.confirm != "" {
			switch {
			case key.Matches(msg, monKeys.Yes):
				what := m.confirm
				m.confirm, m.busy, m.notice = "", what, ""
				return m, m.action(what)
			case key.Matches(msg, monKeys.Quit) && msg.String() == "ctrl+c":
				return m, tea.Quit
			default:
				m.confirm = ""
				m.notice = "cancelled"
				m.noticeErr = false
			}
			return m, nil
		}
		switch {
		case key.Matches(msg, monKeys.Quit):
			return m, tea.Quit
		case key.Matches(msg, monKeys.Help):
			m.showHelp = !m.showHelp
		case key.Matches(msg, monKeys.Next):
			m.focus = (m.focus + 1) % numPanels
		case key.Matches(msg, monKeys.Prev):
			m.focus = (m.focus + numPanels - 1) % numPanels
		case key.Matches(msg, m.keys().Run), key.Matches(msg, m.keys().Sweep):
			if m.busy != "" {
				m.notice = "a " + m.busy + " is already running"
				return m, nil
			}
			if m.cur != nil && m.cur.Role != telemetry.RoleWriter {
				m.notice, m.noticeErr = "this process is a "+m.cur.Role+": only the writer reclaims", true
				return m, nil
			}
			m.confirm = "cycle"
			if key.Matches(msg, monKeys.Sweep) {
				m.confirm = "sweep"
			}
		}
	}
	return m, nil
}
