package reclaim

import (
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"time"

	"ebbfs.dev/ebbfs/internal/fileutil"
)

// The metadata GC's schedule survives restarts, so that writers that live
// shorter than Interval (a mount per job, a laptop's) still run it: the
// wall time of the last successful pass is kept in a small file
// (MetaGCOptions.StatePath, in the cache directory), and a writer starts
// with a pass at once when none succeeded within Interval (or the file is
// missing or unreadable), and otherwise when the interval since the last
// one ends (a time in the future waits at most one interval). A pass is
// also due, at start and at a clean stop, once the newest manifest
// covers MetaGCDueJournals journal sequences more than the one the last
// pass saw: writers that each publish a manifest at their clean stop (lsm)
// then never leave more than that many publications' objects for a pass
// to collect, however many of them start and stop within an interval. A
// clean stop (Stop) runs a pass that is due and has not run, within
// metaGCStopTimeout. The file is a local hint, not shared state: a writer
// on another machine, or with a new cache directory, runs a pass at once,
// which is only early, never unsafe (a pass's safety comes from
// reachability and the horizon, not from its timing). Keeping it out of
// the metadata store keeps an idle writer idle: a record there would be a
// change that the next manifest publishes, and the next pass collects.

// MetaGCStateFile is the name of the schedule's file in the cache
// directory.
const MetaGCStateFile = "metagc-last-pass"

// MetaGCDueJournals is how many journal sequences the newest manifest may
// move past the last pass's before a writer's start or clean stop runs a
// pass (DefaultManifestEvery's figure: a long-lived writer publishes
// about once per this many journals).
const MetaGCDueJournals = 64

// metaGCStopTimeout bounds the pass a clean stop runs.
const metaGCStopTimeout = 30 * time.Second

// firstWait reads the schedule and returns how long the worker waits for
// its first pass; it records when that pass is due.
func (g *MetaGC) firstWait() time.Duration {
	now := g.o.Clock.Now()
	wait := g.o.Interval
	if g.o.StatePath != "" {
		wait = 0
		if st, ok := g.readState(); ok {
			wait = min(max(st.at.Add(g.o.Interval).Sub(now), 0), g.o.Interval)
			g.mu.Lock()
			g.mu.lastHorizon = st.horizon
			g.mu.Unlock()
		}
	}
	if g.horizonDue() {
		wait = 0
	}
	g.mu.Lock()
	g.mu.due = now.Add(wait)
	g.mu.Unlock()
	return wait
}

// metaGCState is what the schedule's file holds: when the last
// successful pass started, and the newest manifest it saw (horizon, plus
// one; 0 when the file predates it).
type metaGCState struct {
	at      time.Time
	horizon uint64
}

// readState returns the last successful pass from the schedule's file.
func (g *MetaGC) readState() (metaGCState, bool) {
	v, err := os.ReadFile(g.o.StatePath)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			g.o.Logger.Warn("reclaim: metadata gc: cannot read its schedule; running a pass now", "path", g.o.StatePath, "err", err)
		}
		return metaGCState{}, false
	}
	st, ok := decodeMetaGCState(v)
	if !ok {
		g.o.Logger.Warn("reclaim: metadata gc: invalid schedule; running a pass now", "path", g.o.StatePath)
	}
	return st, ok
}

// decodeMetaGCState decodes the schedule's file: the pass's wall time
// (8 bytes, big-endian Unix nanoseconds), then the newest manifest it saw
// plus one (8 bytes, big-endian; absent in files written before it was
// kept).
func decodeMetaGCState(v []byte) (metaGCState, bool) {
	var st metaGCState
	switch len(v) {
	case 8:
	case 16:
		st.horizon = binary.BigEndian.Uint64(v[8:])
	default:
		return st, false
	}
	var ok bool
	st.at, ok = decodeLastSweep(v[:8])
	return st, ok
}

func encodeMetaGCState(st metaGCState) []byte {
	return binary.BigEndian.AppendUint64(encodeLastSweep(st.at), st.horizon)
}

// passDone records a successful pass that started at at and saw manifest
// horizon: the next is due an interval later, or once the newest manifest
// is MetaGCDueJournals past horizon, here and in the schedule's file.
func (g *MetaGC) passDone(at time.Time, horizon uint64) {
	g.mu.Lock()
	g.mu.due = at.Add(g.o.Interval)
	g.mu.lastHorizon = horizon + 1
	g.mu.Unlock()
	if g.o.StatePath == "" {
		return
	}
	v := encodeMetaGCState(metaGCState{at: at, horizon: horizon + 1})
	if err := fileutil.WriteAtomic(g.o.StatePath, v, fileutil.Options{}); err != nil {
		g.o.Logger.Warn("reclaim: metadata gc: cannot record its schedule", "path", g.o.StatePath, "err", err)
	}
}

// horizonDue reports whether the newest manifest has moved
// MetaGCDueJournals past the one the last pass saw (never when that is
// not known: no pass recorded one).
func (g *MetaGC) horizonDue() bool {
	g.mu.Lock()
	last := g.mu.lastHorizon
	g.mu.Unlock()
	return last > 0 && g.o.DB.LatestManifest()+1 >= last+MetaGCDueJournals
}

// isDue reports whether the schedule has a pass due now.
func (g *MetaGC) isDue() bool {
	g.mu.Lock()
	due := !g.o.Clock.Now().Before(g.mu.due)
	g.mu.Unlock()
	return due || g.horizonDue()
}

// Stop ends the worker at a clean stop of the writer: it stops the worker
// (cancelling a pass in progress) and then, if a pass is due, runs one
// within metaGCStopTimeout, so that writers that never live an interval
// still collect. Close is the same without that pass.
func (g *MetaGC) Stop(ctx context.Context) {
	g.mu.Lock()
	started := g.mu.started
	g.mu.Unlock()
	g.Close()
	if !started || g.optErr != nil || !g.isDue() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, metaGCStopTimeout)
	defer cancel()
	at := g.o.Clock.Now()
	st, err := g.RunOnce(ctx)
	g.mu.Lock()
	g.mu.last = MetaGCPass{Stats: st, Err: err, At: at}
	g.mu.passes++
	g.mu.Unlock()
}
