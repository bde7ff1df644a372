package tests

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestMonitorFitsTheTerminal runs `ebbfs monitor` in tmux at 80x24,
// 120x40 and 200x60 against the real writer and checks each capture: the
// terminal never wrapped a line (tmux's joined capture has as many lines
// as the plain one), no line is wider than the terminal, the phrases the
// panels print are whole on their lines, the footer is on the last row
// (the full height is used), and the health line is the one `ebbfs
// status` leads with.
func TestMonitorFitsTheTerminal(t *testing.T) {
	t.Parallel()
	needTool(t, "tmux")
	e := newEnv(t)
	e.init()
	p := e.mount()
	for i := 0; i < 3; i++ {
		writeFile(t, e.path(fmt.Sprintf("f%d", i)), randBytes(t, 512*kib))
	}
	e.mustEbbfs("flush")
	status := e.mustEbbfs("status").stdout
	var health []string
	for _, l := range strings.Split(status, "\n") {
		if strings.HasPrefix(l, "health:") || strings.HasPrefix(l, "            ") {
			health = append(health, strings.Split(strings.TrimSpace(strings.TrimPrefix(l, "health:")), " · ")...)
		}
	}
	if len(health) < 6 {
		t.Fatalf("status does not lead with the health line:\n%s", status)
	}
	// The parts that do not change from one second to the next.
	var steady []string
	for _, h := range health {
		if !strings.Contains(h, " ago") && !strings.Contains(h, "free") && !strings.Contains(h, "dirty") {
			steady = append(steady, h)
		}
	}
	for _, size := range [][2]int{{80, 24}, {120, 40}, {200, 60}} {
		w, h := size[0], size[1]
		m := startMonitor(t, e, w, h)
		m.waitScreen(20*time.Second, "the health line", regexp.MustCompile(`lease epoch \d+`))
		m.waitScreen(10*time.Second, "the panels", regexp.MustCompile(`I/O and store`))
		screen := m.capture()
		joined, err := exec.Command(m.tmux, "-L", m.sock, "capture-pane", "-p", "-J", "-t", "mon").Output()
		if err != nil {
			t.Fatal(err)
		}
		rows := strings.Split(strings.TrimRight(screen, "\n"), "\n")
		if j := strings.Split(strings.TrimRight(string(joined), "\n"), "\n"); len(j) != len(rows) {
			t.Errorf("%dx%d: the terminal wrapped %d line(s):\n%s", w, h, len(rows)-len(j), screen)
		}
		for i, r := range rows {
			if n := utf8.RuneCountInString(r); n > w {
				t.Errorf("%dx%d: row %d has %d cells: %q", w, h, i, n, r)
			}
		}
		if len(rows) != h || !strings.Contains(rows[h-1], "quit") {
			t.Errorf("%dx%d: the footer is not on the last row (%d rows):\n%s", w, h, len(rows), screen)
		}
		for _, s := range steady {
			if !strings.Contains(screen, s) {
				t.Errorf("%dx%d: the monitor's health line lacks %q (status: %q):\n%s", w, h, s, strings.Join(health, " · "), screen)
			}
		}
		for _, phrase := range []string{"tombstones pending", "waiting for a barrier", "replicas attached"} {
			if !strings.Contains(screen, phrase) && h >= 40 {
				t.Errorf("%dx%d: %q is not whole on one line:\n%s", w, h, phrase, screen)
			}
		}
		t.Logf("%dx%d:\n%s", w, h, screen)
		m.quit()
	}
	p.stop()
}
