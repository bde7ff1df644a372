package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"ebbfs.dev/ebbfs/internal/monitor"
)

// progressInterval is how often a progress line is redrawn at most.
const progressInterval = 200 * time.Millisecond

// progress draws one self-overwriting line on a terminal for a long
// operation: done/total and the rate. It prints nothing when stderr is
// not a terminal (piped, redirected, under systemd), so that logs and
// scripts see only the result.
type progress struct {
	w     io.Writer // nil: silent
	what  string
	start time.Time
	mu    struct {
		sync.Mutex
		last  time.Time
		shown bool
	}
}

// newProgress returns a progress line for what on stderr if stderr is a
// terminal, and a silent one otherwise.
func newProgress(what string) *progress {
	p := &progress{what: what, start: time.Now()}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		p.w = os.Stderr
	}
	return p
}

// update redraws the line (at most every progressInterval unless force):
// "what: phase done/total (pct), bytes of total, rate".
func (p *progress) update(phase string, done, total, doneBytes, totalBytes int64, force bool) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !force && now.Sub(p.mu.last) < progressInterval {
		return
	}
	p.mu.last = now
	line := fmt.Sprintf("%s: %s", p.what, phase)
	el := now.Sub(p.start).Seconds()
	if total > 0 {
		line += fmt.Sprintf(" %d/%d (%d%%)", done, total, done*100/total)
		if el > 0 {
			line += fmt.Sprintf(", %.0f/s", float64(done)/el)
		}
	}
	if totalBytes > 0 {
		line += fmt.Sprintf(", %s of %s", monitor.HumanBytes(doneBytes), monitor.HumanBytes(totalBytes))
		if el > 0 {
			line += fmt.Sprintf(", %s/s", monitor.HumanBytes(int64(float64(doneBytes)/el)))
		}
	}
	line += fmt.Sprintf(", %s", time.Duration(el*float64(time.Second)).Round(time.Second))
	fmt.Fprintf(p.w, "\r\033[K%s", line)
	p.mu.shown = true
}

// done clears the line, so that the result prints on a clean line.
func (p *progress) done() {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.mu.shown = false
	}
}
