package monitor

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"ebbfs.dev/ebbfs/internal/telemetry"
)

// styleAlarm is the header's damage alarm: white on red.
var styleAlarm = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("#ffffff")).Background(colDead).Padding(0, 1)

// damageAlarm is the header's alarm when reads found damaged data
// (frames in the store that do not authenticate), "" otherwise: the
// files by path and what to run next.
func damageAlarm(st *telemetry.State) string {
	if len(st.Damage) == 0 && st.Cache.Corrupt == 0 {
		return ""
	}
	names := make([]string, 0, len(st.Damage))
	for _, d := range st.Damage {
		names = append(names, d.Name())
	}
	msg := fmt.Sprintf("DAMAGE: %d file(s) fail authentication, reads return EIO", len(st.Damage))
	if len(names) > 0 {
		msg += ": " + strings.Join(names, "; ")
	} else {
		msg = fmt.Sprintf("DAMAGE: %d frame(s) failed authentication", st.Cache.Corrupt)
	}
	return msg + " · ebbfs fsck --verify-data --list-damaged"
}
