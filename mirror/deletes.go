package mirror

import (
	"context"
	"fmt"
	"time"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/lsm"
)

// runDeletes carries out the deletions whose retention has passed
// (docs/model/MIRROR.md argues why none removes what a mirror point within
// the retention references):
//
//   - a segment the source dropped in journal d, retention after the mirror
//     copied d, and not while a copied checkpoint record pins a manifest
//     older than d;
//   - a checkpoint record, retention after it was first seen gone;
//   - journals up to a manifest K and the manifests before K (with tables no
//     kept manifest lists), retention after K was copied, except manifests
//     a copied record pins.
func (m *Mirror) runDeletes(ctx context.Context) error {
	now := m.opts.Clock.Now()
	if err := m.deleteRecords(ctx, now); err != nil {
		return err
	}
	pinned := map[uint64]bool{}
	var oldestPin uint64
	for _, e := range m.st.Records {
		pinned[e.Manifest] = true
		if oldestPin == 0 || e.Manifest < oldestPin {
			oldestPin = e.Manifest
		}
	}
	kept := m.st.Pending[:0]
	for i, p := range m.st.Pending {
		if p.Due.After(now) {
			kept = append(kept, m.st.Pending[i:]...)
			break
		}
		if oldestPin != 0 && oldestPin < p.Journal {
			kept = append(kept, p)
			continue
		}
		if err := m.opts.Dest.Delete(ctx, p.Key); err != nil {
			kept = append(kept, m.st.Pending[i:]...)
			m.st.Pending = kept
			return fmt.Errorf("mirror: deleting %s from the mirror: %w", p.Key, err)
		}
		m.stats.Deleted.Add(1)
		m.dirty = true
	}
	m.st.Pending = kept
	return m.deleteMeta(ctx, now, pinned)
}

func (m *Mirror) deleteRecords(ctx context.Context, now time.Time) error {
	for name, e := range m.st.Records {
		if e.Gone.IsZero() || e.Gone.Add(m.opts.Retention).After(now) {
			continue
		}
		if err := m.opts.Dest.Delete(ctx, checkpoint.Key(name)); err != nil {
			return fmt.Errorf("mirror: deleting checkpoint record %s from the mirror: %w", name, err)
		}
		delete(m.st.Records, name)
		m.stats.Deleted.Add(1)
		m.dirty = true
	}
	return nil
}

// deleteMeta deletes journals and manifests that no mirror point within
// the retention needs: with K the newest manifest copied at least a
// retention ago, every point before K is older than the retention, and
// every point from K on opens from K or a newer manifest.
func (m *Mirror) deleteMeta(ctx context.Context, now time.Time, pinned map[uint64]bool) error {
	k := -1
	for i, e := range m.st.Manifests {
		if !e.At.Add(m.opts.Retention).After(now) {
			k = i
		}
	}
	if k < 0 {
		return nil
	}
	K := m.st.Manifests[k].Seq
	if m.st.JournalLow <= K {
		var keys []string
		for s := m.st.JournalLow; s <= K; s++ {
			keys = append(keys, lsm.JournalKey(s))
			if len(keys) == 1000 || s == K {
				if err := m.opts.Dest.DeleteMany(ctx, keys); err != nil {
					return fmt.Errorf("mirror: deleting journals from the mirror: %w", err)
				}
				m.stats.Deleted.Add(int64(len(keys)))
				m.st.JournalLow = s + 1
				m.dirty = true
				keys = keys[:0]
			}
		}
	}
	var drop []ManifestEntry
	rest := m.st.Manifests[:0:0]
	for i, e := range m.st.Manifests {
		if i < k && !pinned[e.Seq] {
			drop = append(drop, e)
		} else {
			rest = append(rest, e)
		}
	}
	if len(drop) == 0 {
		return nil
	}
	for _, e := range drop {
		if err := m.opts.Dest.Delete(ctx, lsm.ManifestKey(e.Seq)); err != nil {
			return fmt.Errorf("mirror: deleting manifest %d from the mirror: %w", e.Seq, err)
		}
		m.stats.Deleted.Add(1)
	}
	m.st.Manifests = rest
	m.dirty = true
	live := m.st.tableSet()
	var tables []string
	for _, e := range drop {
		for _, t := range e.Tables {
			if !live[t] {
				live[t] = true // once
				tables = append(tables, t)
			}
		}
	}
	if err := m.opts.Dest.DeleteMany(ctx, tables); err != nil {
		return fmt.Errorf("mirror: deleting tables from the mirror: %w", err)
	}
	m.stats.Deleted.Add(int64(len(tables)))
	return nil
}
