package mirror

import (
	"context"
	"fmt"
	"slices"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// fetched is one journal read from the source, not yet copied.
type fetched struct {
	seq    uint64
	sealed []byte
	j      lsm.Journal
	events []lsm.CounterEvent
	bytes  int64 // the journal's and its new segments' bytes
}

// follow copies the journals the source made durable since the last
// round, each after the segments it creates and before the manifest it
// names. more reports that the read-ahead stopped at its bound.
func (m *Mirror) follow(ctx context.Context) (more bool, err error) {
	probeWall := m.opts.Clock.Now()
	probeMono := m.opts.Clock.Mono()
	batch, ended, err := m.readAhead(ctx)
	if err != nil {
		return false, err
	}
	if len(batch) == 0 && ended {
		gap, err := m.gapCheck(ctx, probeMono)
		if err != nil || gap {
			return gap, err
		}
		if err := m.probeFinalManifest(ctx); err != nil {
			return false, err
		}
	}
	var lag int64
	for _, f := range batch {
		lag += f.bytes
	}
	m.setLagBytes(lag)
	// The segments of the whole batch are copied at once (Concurrency at
	// a time), then the journals in order: each journal still goes after
	// every segment it names.
	if err := m.copyBatchSegments(ctx, batch); err != nil {
		return false, err
	}
	for _, f := range batch {
		if err := m.apply(ctx, f); err != nil {
			return false, err
		}
		lag -= f.bytes
		m.setLagBytes(lag)
	}
	if ended && len(batch) > 0 && m.finishing {
		if err := m.probeFinalManifest(ctx); err != nil {
			return false, err
		}
	}
	if ended {
		// Not a reason to save by itself: an idle mirror writes nothing.
		m.resuming = false
		m.st.CaughtUp = probeWall
		m.caughtMono = probeMono
	}
	return !ended, nil
}

// readAhead fetches journals from Next on, up to the read-ahead bounds;
// ended reports that it stopped at a journal the source does not have.
func (m *Mirror) readAhead(ctx context.Context) (batch []fetched, ended bool, err error) {
	var named int64
	for seq := m.st.Next; len(batch) < readAhead && named < readAheadBytes; seq++ {
		b, err := m.opts.Source.Get(ctx, lsm.JournalKey(seq))
		if objstore.IsNotFound(err) {
			return batch, true, nil
		}
		if err != nil {
			return batch, false, fmt.Errorf("mirror: reading journal %d: %w", seq, err)
		}
		j, err := lsm.OpenJournal(m.opts.Keys, seq, b)
		if err != nil {
			return batch, false, fmt.Errorf("mirror: %w", err)
		}
		ev, err := lsm.JournalCounters(j)
		if err != nil {
			return batch, false, fmt.Errorf("mirror: journal %d: %w", seq, err)
		}
		f := fetched{seq: seq, sealed: b, j: j, events: ev, bytes: int64(len(b))}
		for _, e := range ev {
			if e.Created {
				f.bytes += e.Size
			}
		}
		named += f.bytes
		batch = append(batch, f)
	}
	return batch, false, nil
}

// copyBatchSegments copies the segments the batch's journals create.
func (m *Mirror) copyBatchSegments(ctx context.Context, batch []fetched) error {
	var keys []string
	var sizes []int64
	dropped := map[string]bool{}
	where := map[string]uint64{}
	for _, f := range batch {
		for _, e := range f.events {
			k := segment.Key(e.Segment)
			switch {
			case e.Created && !m.copied[e.Segment]:
				keys = append(keys, k)
				sizes = append(sizes, e.Size)
				where[k] = f.seq
			case e.Dropped:
				dropped[k] = true
			}
		}
	}
	missing, err := m.copyMany(ctx, keys, sizes)
	if err != nil {
		return err
	}
	for _, k := range missing {
		if !dropped[k] {
			m.stats.Missing.Add(1)
			m.opts.Log.Warn("mirror: a segment was deleted from the source before it was copied; mirror points before its deletion lack it", "segment", k, "journal", where[k])
		}
	}
	for _, f := range batch {
		for _, e := range f.events {
			if e.Created {
				m.remember(e.Segment)
			}
		}
	}
	return nil
}

// apply copies one journal (its segments are copied), then the manifest
// it names if the mirror does not have it, and records the segments it
// drops for deletion after the retention.
func (m *Mirror) apply(ctx context.Context, f fetched) error {
	dropped := map[string]bool{}
	for _, e := range f.events {
		if e.Dropped {
			dropped[segment.Key(e.Segment)] = true
		}
	}
	if f.j.Epoch > m.st.Epoch {
		if err := m.copyLease(ctx, f.j.Epoch); err != nil {
			return err
		}
	}
	if !m.resuming || !m.inDest(ctx, lsm.JournalKey(f.seq), int64(len(f.sealed))) {
		if err := m.putObject(ctx, lsm.JournalKey(f.seq), f.sealed); err != nil {
			return err
		}
	}
	m.stats.Journals.Add(1)
	if f.j.Manifest > m.st.newestManifest() {
		if err := m.copyManifest(ctx, f.j.Manifest); err != nil {
			return err
		}
	}
	due := m.opts.Clock.Now().Add(m.opts.Retention)
	for k := range dropped {
		m.st.addPending(PendingDelete{Key: k, Journal: f.seq, Due: due})
	}
	m.st.Next = f.seq + 1
	if m.st.JournalLow == 0 {
		m.st.JournalLow = f.seq
	}
	m.dirty = true
	return nil
}

// probeFinalManifest copies the manifest that covers the newest journal,
// which no journal names: the one a writer publishes at a clean stop. It
// asks once per newest journal, when a probe first finds no newer one.
func (m *Mirror) probeFinalManifest(ctx context.Context) error {
	last := m.st.Next - 1
	if last == 0 || last == m.finalProbed || m.st.newestManifest() >= last {
		return nil
	}
	m.finalProbed = last
	if _, err := m.opts.Source.Head(ctx, lsm.ManifestKey(last)); objstore.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("mirror: probing manifest %d: %w", last, err)
	}
	return m.copyManifest(ctx, last)
}

func (m *Mirror) remember(seg uint64) {
	if len(m.copied) >= 1<<16 {
		clear(m.copied)
	}
	m.copied[seg] = true
}

// copyManifest copies a manifest's tables the mirror lacks, then the
// manifest. A manifest the source no longer has (its metadata GC ran
// first) is skipped: the journals the mirror holds cover its state.
func (m *Mirror) copyManifest(ctx context.Context, seq uint64) error {
	if m.st.manifestIndex(seq) >= 0 {
		return nil
	}
	b, err := m.opts.Source.Get(ctx, lsm.ManifestKey(seq))
	if objstore.IsNotFound(err) {
		m.opts.Log.Info("mirror: a manifest was gone from the source before it was copied", "manifest", seq)
		return nil
	}
	if err != nil {
		return fmt.Errorf("mirror: reading manifest %d: %w", seq, err)
	}
	man, err := lsm.OpenManifest(m.opts.Keys, seq, b)
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	have := m.st.tableSet()
	var keys, tables []string
	var sizes []int64
	for _, t := range man.Tables {
		tables = append(tables, t.Object)
		if !have[t.Object] {
			keys = append(keys, t.Object)
			sizes = append(sizes, -1) // t.Size is the plaintext's
		}
	}
	missing, err := m.copyMany(ctx, keys, sizes)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		// The source's metadata GC took the manifest's tables: the
		// manifest is superseded; do not copy a manifest that cannot open.
		m.opts.Log.Info("mirror: a manifest's tables were gone from the source; skipped", "manifest", seq, "missing", len(missing))
		now := m.opts.Clock.Now()
		for _, k := range keys {
			if !slices.Contains(missing, k) {
				m.st.addPending(PendingDelete{Key: k, Due: now})
			}
		}
		m.dirty = true
		return nil
	}
	if !m.resuming || !m.inDest(ctx, lsm.ManifestKey(seq), int64(len(b))) {
		if err := m.putObject(ctx, lsm.ManifestKey(seq), b); err != nil {
			return err
		}
	}
	m.st.addManifest(ManifestEntry{Seq: seq, At: m.opts.Clock.Now(), Tables: tables})
	m.dirty = true
	return nil
}
