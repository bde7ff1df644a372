package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
)

// replicaState is a reader's distance from the writer.
//
// A reader serves the metadata up to journal sequence Served. The writer's
// newer changes are the journal objects and manifests above it in the
// store; LagSeconds is the age of the oldest of them (0 when there is
// none: the reader shows everything the writer made durable). Readers do
// not follow the writer yet (`run --read-only` serves the state as of its
// start), so the lag of a running reader grows with every barrier the
// writer publishes; once following exists the same measure applies.
type replicaState struct {
	Served     uint64    `json:"served_seq"`
	Behind     int       `json:"behind_objects"` // newer journal objects and manifests
	LagSeconds float64   `json:"lag_seconds"`
	Follows    bool      `json:"follows"`
	CheckedAt  time.Time `json:"checked_at,omitzero"`
	Error      string    `json:"error,omitempty"`
}

// lagTTL bounds how often a reader lists meta/ to measure its lag (two
// LISTs each time).
const lagTTL = 5 * time.Second

// Key spaces of the metadata journal and manifests (lsm's layout, DESIGN
// section 2): one global sequence in 16 hex digits.
const (
	journalPrefix  = "meta/journal/"
	manifestPrefix = "meta/manifest/"
)

type replicaLag struct {
	st objstore.Store
	db *lsm.DB

	mu     sync.Mutex
	last   replicaState
	lastAt time.Time
}

func (l *replicaLag) get(ctx context.Context) replicaState {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lastAt.IsZero() && time.Since(l.lastAt) < lagTTL {
		return l.last
	}
	l.last, l.lastAt = l.measure(ctx), time.Now()
	return l.last
}

func (l *replicaLag) measure(ctx context.Context) replicaState {
	served := l.db.AppliedSeq()
	if m := l.db.LatestManifest(); m > served {
		served = m
	}
	r := replicaState{Served: served, CheckedAt: time.Now()}
	var oldest time.Time
	for _, prefix := range []string{journalPrefix, manifestPrefix} {
		after := fmt.Sprintf("%s%016x", prefix, served)
		for {
			page, err := l.st.List(ctx, prefix, after, 1000)
			if err != nil {
				r.Error = err.Error()
				return r
			}
			for _, o := range page.Objects {
				seq, err := strconv.ParseUint(strings.TrimPrefix(o.Key, prefix), 16, 64)
				if err != nil || seq <= served {
					continue
				}
				r.Behind++
				if !o.ModTime.IsZero() && (oldest.IsZero() || o.ModTime.Before(oldest)) {
					oldest = o.ModTime
				}
			}
			if !page.More || len(page.Objects) == 0 {
				break
			}
			after = page.Objects[len(page.Objects)-1].Key
		}
	}
	if r.Behind > 0 && !oldest.IsZero() {
		r.LagSeconds = max(time.Since(oldest).Seconds(), 0)
	}
	return r
}
