package reclaim

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/internal/stats"
)

// Live state and cumulative totals of the reclamation stages, for
// /metrics, the monitor and the status page. Recording is cheap (one
// mutex, no I/O) and never changes what reclamation does.

// Phases of a running cycle, as Activity reports them.
const (
	PhaseIdle        = "idle"
	PhaseBarrier     = "barrier"     // seal, flush, journal, capture the cutoff
	PhaseCheckpoints = "checkpoints" // read the checkpoint list
	PhaseScan        = "scan"        // scan the counters, age dead segments
	PhaseDelete      = "delete"      // verify and delete segments past their deadline
	PhaseRepack      = "repack"      // repack jobs
)

// Triggers of a cycle, as Activity reports them.
const (
	TriggerStartup  = "startup"
	TriggerDead     = "dead bytes"
	TriggerSmall    = "small segment sealed"
	TriggerDeadline = "deadline"
	TriggerRetry    = "retry"
	TriggerManual   = "manual"
)

// Cycle results, the label of the cycle counter.
const (
	ResultOK      = "ok"      // ran to the end
	ResultBlocked = "blocked" // reclaimed nothing by rule (persistent checkpoint, unreadable list, fenced)
	ResultError   = "error"   // failed; retried after RetryDelay
)

// RepackJob is one repack job in flight.
type RepackJob struct {
	ID          int       `json:"id"`
	Started     time.Time `json:"started"`
	Phase       string    `json:"phase"` // gather, upload, repoint
	Sources     []string  `json:"sources"`
	SourceBytes int64     `json:"source_bytes"` // object bytes of the sources
	LiveBytes   int64     `json:"live_bytes"`   // live frame bytes to gather (per the counters)
	Gathered    int64     `json:"gathered"`     // live frame bytes fetched and verified so far
	Output      string    `json:"output,omitempty"`
	Moved       int       `json:"moved"` // pointers repointed so far
}

// CycleSummary is a finished cycle as Activity reports it.
type CycleSummary struct {
	CycleStats
	Trigger string    `json:"trigger"`
	End     time.Time `json:"end"`
	Result  string    `json:"result"`
	Error   string    `json:"error,omitempty"`
}

// SweepSummary is a finished orphan sweep.
type SweepSummary struct {
	SweepStats
	Error string `json:"error,omitempty"`
}

// Activity is what the reclamation stages are doing now.
type Activity struct {
	Phase        string         `json:"phase"`
	Trigger      string         `json:"trigger,omitempty"` // of the running cycle
	CycleStarted time.Time      `json:"cycle_started,omitzero"`
	LastCycle    *CycleSummary  `json:"last_cycle,omitempty"`
	Recent       []CycleSummary `json:"recent,omitempty"` // the last cycles that freed or moved something, oldest first
	// NextCycle is when the next cycle is due (wall-clock estimate of a
	// monotonic time; zero: nothing due) and NextReason why.
	NextCycle  time.Time   `json:"next_cycle,omitzero"`
	NextReason string      `json:"next_reason,omitempty"`
	Jobs       []RepackJob `json:"jobs"`

	SweepRunning bool          `json:"sweep_running"`
	NextSweep    time.Time     `json:"next_sweep,omitzero"`
	LastSweep    *SweepSummary `json:"last_sweep,omitempty"`
}

// Totals are cumulative counters since the Reclaimer started.
type Totals struct {
	Cycles          map[string]uint64       `json:"cycles"` // by result
	Deleted         uint64                  `json:"deleted"`
	BytesFreed      uint64                  `json:"bytes_freed"`
	StaleDropped    uint64                  `json:"stale_dropped"`
	Repaired        uint64                  `json:"repaired"`
	Repacks         uint64                  `json:"repacks"`
	RepackFailed    uint64                  `json:"repack_failed"`
	RelocatedFrames uint64                  `json:"relocated_frames"`
	RelocatedBytes  uint64                  `json:"relocated_bytes"`
	CycleDuration   stats.HistogramSnapshot `json:"cycle_duration"`
	Sweeps          map[string]uint64       `json:"sweeps"` // by result: ok, error
	OrphansDeleted  uint64                  `json:"orphans_deleted"`
	OrphanBytes     uint64                  `json:"orphan_bytes"`
}

// recentCycles is how many productive cycles Activity keeps.
const recentCycles = 120

type liveState struct {
	mu           sync.Mutex
	phase        string
	trigger      string // running cycle
	pending      string // why a cycle is pending (first reason since the last cycle started)
	cycleStarted time.Time
	last         *CycleSummary
	recent       []CycleSummary
	jobs         map[int]*RepackJob
	nextJob      int
	sweeping     bool
	lastSweep    *SweepSummary
	totals       Totals
	cycleDur     *stats.Histogram
}

func (l *liveState) init() {
	l.phase = PhaseIdle
	l.jobs = map[int]*RepackJob{}
	l.totals.Cycles = map[string]uint64{ResultOK: 0, ResultBlocked: 0, ResultError: 0}
	l.totals.Sweeps = map[string]uint64{ResultOK: 0, ResultError: 0}
	l.cycleDur = stats.NewHistogram()
}

// noteTrigger remembers why a cycle became pending: the first reason
// since the last cycle started, except that startup wins (events before
// Start are part of it).
func (l *liveState) noteTrigger(why string) {
	l.mu.Lock()
	if l.pending == "" || why == TriggerStartup {
		l.pending = why
	}
	l.mu.Unlock()
}

// takePending returns and clears the pending reason.
func (l *liveState) takePending() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	why := l.pending
	l.pending = ""
	return why
}

func (l *liveState) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

func (l *liveState) cycleStart(trigger string, at time.Time) {
	l.mu.Lock()
	l.phase, l.trigger, l.cycleStarted = PhaseBarrier, trigger, at
	l.mu.Unlock()
}

func (l *liveState) cycleEnd(st CycleStats, err error, end time.Time) {
	res := ResultOK
	switch {
	case err != nil && st.Blocked != "":
		res = ResultBlocked
	case err != nil:
		res = ResultError
	case st.Blocked != "":
		res = ResultBlocked
	}
	s := CycleSummary{CycleStats: st, Trigger: "", End: end, Result: res}
	if err != nil {
		s.Error = err.Error()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s.Trigger = l.trigger
	l.phase, l.trigger, l.cycleStarted = PhaseIdle, "", time.Time{}
	l.last = &s
	if st.Deleted > 0 || st.Repacks > 0 || st.BytesFreed > 0 || st.StaleDropped > 0 {
		l.recent = append(l.recent, s)
		if len(l.recent) > recentCycles {
			l.recent = append(l.recent[:0:0], l.recent[len(l.recent)-recentCycles:]...)
		}
	}
	t := &l.totals
	t.Cycles[res]++
	t.Deleted += uint64(st.Deleted)
	t.BytesFreed += uint64(st.BytesFreed)
	t.StaleDropped += uint64(st.StaleDropped)
	t.Repaired += uint64(st.Repaired)
	t.Repacks += uint64(st.Repacks)
	t.RepackFailed += uint64(st.RepackFailed)
	t.RelocatedFrames += uint64(st.RelocatedFrames)
	t.RelocatedBytes += uint64(st.RelocatedBytes)
	l.cycleDur.Observe(st.Duration)
}

func (l *liveState) sweepStart() {
	l.mu.Lock()
	l.sweeping = true
	l.mu.Unlock()
}

func (l *liveState) sweepEnd(st SweepStats, err error) {
	s := SweepSummary{SweepStats: st}
	res := ResultOK
	if err != nil {
		s.Error, res = err.Error(), ResultError
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweeping = false
	l.lastSweep = &s
	l.totals.Sweeps[res]++
	l.totals.OrphansDeleted += uint64(st.Deleted)
	l.totals.OrphanBytes += uint64(st.DeletedBytes)
}

// jobStart registers a repack job and returns its handle.
func (l *liveState) jobStart(j repackJob, at time.Time) *RepackJob {
	rj := &RepackJob{Started: at, Phase: "gather", LiveBytes: j.live}
	for _, s := range j.srcs {
		rj.Sources = append(rj.Sources, fmt.Sprintf("%016x", s.id))
		rj.SourceBytes += s.size
	}
	l.mu.Lock()
	l.nextJob++
	rj.ID = l.nextJob
	l.jobs[rj.ID] = rj
	l.mu.Unlock()
	return rj
}

// jobUpdate changes a job under the lock.
func (l *liveState) jobUpdate(rj *RepackJob, f func(*RepackJob)) {
	l.mu.Lock()
	f(rj)
	l.mu.Unlock()
}

func (l *liveState) jobEnd(rj *RepackJob) {
	l.mu.Lock()
	delete(l.jobs, rj.ID)
	l.mu.Unlock()
}

// Activity returns the live state of the cycle, the repack jobs and the
// orphan sweep.
func (r *Reclaimer) Activity() Activity {
	nowMono, nowWall := r.clk.Mono(), r.clk.Now()
	var a Activity
	r.mu.Lock()
	if next := r.nextCycleLocked(); next != never {
		a.NextCycle = nowWall.Add(next - nowMono)
		switch {
		case r.mu.pending:
			a.NextReason = "pending trigger"
		case r.mu.retryAt > 0 && next >= r.mu.retryAt:
			a.NextReason = TriggerRetry
		default:
			a.NextReason = TriggerDeadline
		}
	}
	if r.mu.sweepKnown {
		a.NextSweep = nowWall.Add(r.mu.sweepAt - nowMono)
	}
	r.mu.Unlock()
	l := &r.live
	l.mu.Lock()
	defer l.mu.Unlock()
	a.Phase, a.Trigger, a.CycleStarted = l.phase, l.trigger, l.cycleStarted
	if l.last != nil {
		c := *l.last
		a.LastCycle = &c
	}
	a.Recent = append([]CycleSummary(nil), l.recent...)
	a.Jobs = []RepackJob{}
	for _, j := range l.jobs {
		c := *j
		c.Sources = append([]string(nil), j.Sources...)
		a.Jobs = append(a.Jobs, c)
	}
	sort.Slice(a.Jobs, func(i, j int) bool { return a.Jobs[i].ID < a.Jobs[j].ID })
	a.SweepRunning = l.sweeping
	if l.lastSweep != nil {
		s := *l.lastSweep
		a.LastSweep = &s
	}
	return a
}

// Totals returns the cumulative counters.
func (r *Reclaimer) Totals() Totals {
	l := &r.live
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.totals
	t.Cycles = map[string]uint64{}
	for k, v := range l.totals.Cycles {
		t.Cycles[k] = v
	}
	t.Sweeps = map[string]uint64{}
	for k, v := range l.totals.Sweeps {
		t.Sweeps[k] = v
	}
	t.CycleDuration = l.cycleDur.Snapshot()
	return t
}
