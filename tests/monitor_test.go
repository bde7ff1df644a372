package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// tmuxMonitor runs `ebbfs monitor` for env e in a detached tmux session
// of its own server, width x height cells.
type tmuxMonitor struct {
	t        *testing.T
	tmux     string
	sock     string
	exitFile string
}

func startMonitor(t *testing.T, e *env, width, height int) *tmuxMonitor {
	t.Helper()
	tmux := needTool(t, "tmux")
	m := &tmuxMonitor{t: t, tmux: tmux, sock: fmt.Sprintf("ebbfs-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
		exitFile: filepath.Join(e.dir, fmt.Sprintf("monitor-exit-%d", time.Now().UnixNano()))}
	script := fmt.Sprintf("%s monitor -c %s --interval 200ms; echo $? > %s; sleep 2", ebbfsBin, e.cfg, m.exitFile)
	cmd := exec.Command(tmux, "-L", m.sock, "-f", "/dev/null", "new-session", "-d", "-s", "mon",
		"-x", fmt.Sprint(width), "-y", fmt.Sprint(height), "sh", "-c", script)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", "COLORTERM=truecolor", "LANG=C.UTF-8")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(tmux, "-L", m.sock, "kill-server").Run() })
	return m
}

// capture returns the visible screen.
func (m *tmuxMonitor) capture() string {
	out, err := exec.Command(m.tmux, "-L", m.sock, "capture-pane", "-p", "-t", "mon").CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

func (m *tmuxMonitor) keys(k ...string) {
	m.t.Helper()
	args := append([]string{"-L", m.sock, "send-keys", "-t", "mon"}, k...)
	if out, err := exec.Command(m.tmux, args...).CombinedOutput(); err != nil {
		m.t.Fatalf("tmux send-keys %v: %v\n%s", k, err, out)
	}
}

// waitScreen polls the screen until re matches, and returns the match.
func (m *tmuxMonitor) waitScreen(timeout time.Duration, what string, re *regexp.Regexp) []string {
	m.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		last = m.capture()
		if g := re.FindStringSubmatch(last); g != nil {
			return g
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.t.Fatalf("the monitor never showed %s (%s) within %s; last screen:\n%s", what, re, timeout, last)
	return nil
}

// screenshot renders the screen, colours included, to dir/name.png with
// headless Chromium (for docs/: make screenshots).
func (m *tmuxMonitor) screenshot(dir, name string) {
	m.t.Helper()
	out, err := exec.Command(m.tmux, "-L", m.sock, "capture-pane", "-e", "-p", "-t", "mon").Output()
	if err != nil {
		m.t.Fatal(err)
	}
	htmlPath := filepath.Join(dir, name+".html")
	if err := os.WriteFile(htmlPath, []byte(ansiToHTML(string(out))), 0o644); err != nil {
		m.t.Fatal(err)
	}
	ctx := browser(m.t)
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+htmlPath)); err != nil {
		m.t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		m.t.Fatal(err)
	}
	os.Remove(htmlPath)
}

// quit presses q and requires exit status 0.
func (m *tmuxMonitor) quit() {
	m.t.Helper()
	m.keys("q")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(m.exitFile); err == nil && strings.HasSuffix(string(b), "\n") {
			if code := strings.TrimSpace(string(b)); code != "0" {
				m.t.Fatalf("ebbfs monitor exited with %s after q, want 0", code)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.t.Fatalf("ebbfs monitor did not exit within 10 s of q; screen:\n%s", m.capture())
}

// TestMonitorShowsReclamation runs `ebbfs monitor` in tmux against the
// real writer while a file of 64 extents is written and deleted, and
// reads the panels from the screen: the tombstone pending, then cleaned;
// its segment dead and awaiting its deadline, then freed by a cycle whose
// summary names the delete; a cycle run from the monitor with r and y;
// q exits with status 0. Then a read-only replica's monitor shows the
// replica role and its lag behind the writer.
func TestMonitorShowsReclamation(t *testing.T) {
	t.Parallel()
	needTool(t, "tmux")
	seed := e2eSeed(t)
	src := newDataSource(seed)
	// The grace is 60 s / 10 = 6 s; the cleaner waits 3 s after each
	// wake-up, so the pending tombstone is on screen for a while.
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=10", "EBBFS_TEST_CLEANER_DELAY=3s"))
	e.init()
	p := e.mount()

	small := make([]byte, 50*kib)
	src.fill(small)
	writeFile(t, e.path("small"), small)
	fsyncFile(t, e.path("small"))
	// One write of 2 MiB and an fsync: usually one segment, though the
	// periodic flush may seal it in two (the counts below allow for it).
	big := make([]byte, 2*mib)
	src.fill(big)
	writeFile(t, e.path("big"), big)
	fsyncFile(t, e.path("big"))

	m := startMonitor(t, e, 220, 70)
	m.waitScreen(20*time.Second, "the writer's panels", regexp.MustCompile(`writer[\s\S]*tombstones pending 0 \(0 B\)`))
	m.waitScreen(10*time.Second, "the live data", regexp.MustCompile(`live\s+2\.\d MiB\s+in \d segments`))

	start := time.Now()
	if err := os.Remove(e.path("big")); err != nil {
		t.Fatal(err)
	}
	// Stage 1: the tombstone waits for the cleaner, then it is cleaned.
	g := m.waitScreen(10*time.Second, "the pending tombstone", regexp.MustCompile(`tombstones pending 1 \((2\.0 MiB)\)`))
	t.Logf("%s: tombstones pending 1 (%s)", time.Since(start).Round(time.Millisecond), g[1])
	m.waitScreen(20*time.Second, "the tombstone cleaned", regexp.MustCompile(`tombstones pending 0 \(0 B\)[\s\S]*tombstones cleaned 1 of 1 created · 64 extents`))
	t.Logf("%s: tombstone cleaned, 64 extents", time.Since(start).Round(time.Millisecond))
	// Stage 2: the segment is dead and waits for its deadline...
	g = m.waitScreen(10*time.Second, "the dead segment awaiting its deadline",
		regexp.MustCompile(`awaiting\s+(2\.0 MiB)\s+in (\d) segments awaiting their deadline, first due in`))
	t.Logf("%s: %s in %s segments awaiting the deadline", time.Since(start).Round(time.Millisecond), g[1], g[2])
	dead := g[2]
	if dir := os.Getenv("EBBFS_SCREENSHOTS"); dir != "" {
		m.screenshot(dir, "monitor")
	}
	// ...then a cycle deletes it and says so.
	g = m.waitScreen(30*time.Second, "the cycle that freed it",
		regexp.MustCompile(`last [^\n]* ok \((deadline|dead bytes)\): deleted `+dead+`, freed (2\.0 MiB)`))
	t.Logf("%s: a cycle triggered by %s deleted %s segments and freed %s", time.Since(start).Round(time.Millisecond), g[1], dead, g[2])
	m.waitScreen(5*time.Second, "nothing awaiting any more", regexp.MustCompile(`awaiting\s+0 B\s+in 0 segments`))
	if !regexp.MustCompile(`total: \d+ ok, 0 blocked, 0 failed · ` + dead + ` deleted, 2\.0 MiB freed`).MatchString(m.capture()) {
		t.Errorf("the totals line does not show %s segments deleted and 2.0 MiB freed:\n%s", dead, m.capture())
	}

	// tab moves the focus; a narrower terminal gets one column.
	m.keys("Tab")
	m.waitScreen(5*time.Second, "the focus on the footprint panel", regexp.MustCompile(`▶ Segment footprint`))
	if out, err := exec.Command(m.tmux, "-L", m.sock, "resize-window", "-t", "mon", "-x", "110", "-y", "90").CombinedOutput(); err != nil {
		t.Fatalf("tmux resize-window: %v\n%s", err, out)
	}
	m.waitScreen(5*time.Second, "one column after the resize",
		regexp.MustCompile(`(?m)^╭─{100,108}╮\n│ I/O and store[^\n]*│\n[\s\S]*\n│ Reclamation`))

	// r asks, y runs a cycle now.
	m.keys("r")
	m.waitScreen(5*time.Second, "the confirmation prompt", regexp.MustCompile(`Run a reclamation cycle now\? \(y/n\)`))
	m.keys("y")
	m.waitScreen(30*time.Second, "the manual cycle's result", regexp.MustCompile(`cycle done: deleted 0, freed 0 B`))
	m.waitScreen(5*time.Second, "the manual cycle as the last one", regexp.MustCompile(`ok \(manual\)`))
	m.quit()

	// Without a terminal: one line per sample.
	plain := e.mustEbbfs("monitor", "--interval", "200ms", "--count", "3")
	if lines := strings.Split(strings.TrimSpace(plain.stdout), "\n"); len(lines) != 3 || !strings.Contains(lines[2], " writer ") || !strings.Contains(lines[2], "live=") {
		t.Fatalf("ebbfs monitor through a pipe printed:\n%s", plain.stdout)
	}

	// A replica follows the writer: its header shows its lag and the
	// journal it serves, which moves on after the writer's barrier.
	r := e.sameStore()
	rp := r.mount("--read-only")
	rm := startMonitor(t, r, 200, 60)
	lagRe := regexp.MustCompile(`replica\s.*replica lag (\S+) \(journal (\d+)\)`)
	g = rm.waitScreen(20*time.Second, "the replica's lag", lagRe)
	before := g[2]
	writeSynced(t, e.path("later"), 100*kib, src)
	e.mustEbbfs("flush")
	deadline := time.Now().Add(30 * time.Second)
	for g[2] == before {
		if time.Now().After(deadline) {
			t.Fatalf("the replica's journal stayed at %s after the writer's barrier:\n%s", before, rm.capture())
		}
		time.Sleep(200 * time.Millisecond)
		g = rm.waitScreen(20*time.Second, "the replica's lag", lagRe)
	}
	t.Logf("replica's monitor: lag %s, journal %s (was %s)", g[1], g[2], before)
	rm.waitScreen(5*time.Second, "a reader's footprint note", regexp.MustCompile(`a reader keeps no footprint`))
	rm.quit()
	rp.stop()
	p.stop()
}
