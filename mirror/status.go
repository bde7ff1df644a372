package mirror

import (
	"sync/atomic"
	"time"
)

// Stats are a mirror's counters since its process started.
type Stats struct {
	CopiedObjects atomic.Int64
	CopiedBytes   atomic.Int64
	Deleted       atomic.Int64
	Missing       atomic.Int64 // named by a journal, gone from the source before copied
	Journals      atomic.Int64
	Resyncs       atomic.Int64
	Errors        atomic.Int64
	StateSaves    atomic.Int64
	// Skipped counts objects a resumed mirror found in the mirror store
	// already (copied after the position it resumed from was saved).
	Skipped atomic.Int64
}

// Status is a mirror's state for metrics and `ebbfs status`.
type Status struct {
	// LagSeconds is how far behind the source's durable state the mirror
	// can be: the time since the start of the newest probe that found
	// nothing newer to copy (everything the source had made durable then
	// is in the mirror).
	LagSeconds float64 `json:"lag_seconds"`
	// LagBytes are the bytes named by journals the mirror has read and
	// not yet copied.
	LagBytes int64 `json:"lag_bytes"`
	// Journal is the newest journal copied; Manifest the newest manifest.
	Journal          uint64    `json:"journal"`
	Manifest         uint64    `json:"manifest"`
	CaughtUp         time.Time `json:"caught_up,omitzero"`
	PendingDeletes   int       `json:"pending_deletes"`
	Records          int       `json:"checkpoints"`
	RetentionSeconds float64   `json:"retention_seconds"`
	CopiedObjects    int64     `json:"copied_objects"`
	CopiedBytes      int64     `json:"copied_bytes"`
	Deleted          int64     `json:"deleted_objects"`
	Missing          int64     `json:"missing_objects"`
	Resyncs          int64     `json:"resyncs"`
	Errors           int64     `json:"errors"`
	LastError        string    `json:"last_error,omitempty"`
}

// Status returns the mirror's state now.
func (m *Mirror) Status() Status {
	m.mu.Lock()
	s := m.status
	m.mu.Unlock()
	if !s.CaughtUp.IsZero() {
		s.LagSeconds = max(0, m.opts.Clock.Now().Sub(s.CaughtUp).Seconds())
	}
	s.CopiedObjects = m.stats.CopiedObjects.Load()
	s.CopiedBytes = m.stats.CopiedBytes.Load()
	s.Deleted = m.stats.Deleted.Load()
	s.Missing = m.stats.Missing.Load()
	s.Resyncs = m.stats.Resyncs.Load()
	s.Errors = m.stats.Errors.Load()
	return s
}

// Counters gives the live counters (metrics).
func (m *Mirror) Counters() *Stats { return &m.stats }

// publish refreshes the status from the state (the worker's goroutine).
func (m *Mirror) publish() {
	m.updateHold()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Journal = 0
	if m.st.Next > 0 {
		m.status.Journal = m.st.Next - 1
	}
	m.status.Manifest = m.st.newestManifest()
	m.status.CaughtUp = m.st.CaughtUp
	m.status.PendingDeletes = len(m.st.Pending)
	m.status.Records = len(m.st.Records)
	m.status.RetentionSeconds = m.opts.Retention.Seconds()
}

func (m *Mirror) setLagBytes(n int64) {
	m.mu.Lock()
	m.status.LagBytes = n
	m.mu.Unlock()
}

func (m *Mirror) setError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.status.LastError = ""
		return
	}
	m.status.LastError = err.Error()
}
