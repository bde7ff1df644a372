package mirror

import (
	"context"
	"fmt"
	"time"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// fullSync makes the mirror hold the source's newest manifest and every
// segment the source has, listing both stores once: the first run, and
// after a gap (journals the mirror did not copy are gone from the
// source). Segments the mirror has and the source does not are deleted
// after the retention, like any other deletion.
func (m *Mirror) fullSync(ctx context.Context) error {
	m.stats.Resyncs.Add(1)
	if err := m.copyDescriptor(ctx); err != nil {
		return err
	}
	if err := m.copyLease(ctx, 0); err != nil {
		return err
	}
	newest, err := newestManifest(ctx, m.opts.Source)
	if err != nil {
		return err
	}
	if newest > 0 {
		if err := m.copyManifest(ctx, newest); err != nil {
			return err
		}
	}
	src, err := listSegments(ctx, m.opts.Source)
	if err != nil {
		return fmt.Errorf("mirror: listing the source's segments: %w", err)
	}
	dst, err := listSegments(ctx, m.opts.Dest)
	if err != nil {
		return fmt.Errorf("mirror: listing the mirror's segments: %w", err)
	}
	var keys []string
	var sizes []int64
	for k, size := range src {
		if _, ok := dst[k]; !ok {
			keys = append(keys, k)
			sizes = append(sizes, size)
		}
	}
	if _, err := m.copyMany(ctx, keys, sizes); err != nil {
		return err
	}
	due := m.opts.Clock.Now().Add(m.opts.Retention)
	for k := range dst {
		if _, ok := src[k]; !ok {
			m.st.addPending(PendingDelete{Key: k, Journal: newest + 1, Due: due})
		}
	}
	m.st.Next = max(m.st.Next, newest+1)
	if m.st.JournalLow == 0 {
		m.st.JournalLow = m.st.Next
	}
	m.st.Synced = true
	m.opts.Log.Info("mirror: full copy done", "manifest", newest, "segments_copied", len(keys), "next_journal", m.st.Next)
	return m.save(ctx)
}

// gapCheck runs when journal Next is not in the source. If the mirror was
// caught up within gapAfter, the journal cannot have been written and
// deleted since (the writer keeps journals 5 minutes): it is simply not
// written yet. Otherwise one LIST of the source's manifests tells: a
// manifest at or past Next means journal Next existed and is gone, and
// the mirror copies afresh.
func (m *Mirror) gapCheck(ctx context.Context, probe time.Duration) (gap bool, err error) {
	if m.caughtMono >= 0 && probe-m.caughtMono < gapAfter {
		return false, nil
	}
	newest, err := newestManifest(ctx, m.opts.Source)
	if err != nil {
		return false, err
	}
	if newest < m.st.Next {
		return false, nil
	}
	m.opts.Log.Warn("mirror: journals the mirror had not copied are gone from the source; copying afresh from its newest manifest",
		"next_journal", m.st.Next, "newest_manifest", newest)
	m.st.Synced = false
	m.dirty = true
	return true, nil
}

func (m *Mirror) copyDescriptor(ctx context.Context) error {
	info, err := m.opts.Source.Head(ctx, keys.DescriptorKey)
	if err != nil {
		return fmt.Errorf("mirror: reading the source's descriptor: %w", err)
	}
	if info.ETag == m.st.Descriptor && m.st.Descriptor != "" {
		return nil
	}
	found, err := m.copyObject(ctx, keys.DescriptorKey)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("mirror: the source has no descriptor (%s)", keys.DescriptorKey)
	}
	m.st.Descriptor = info.ETag
	m.dirty = true
	return nil
}

// copyLease copies the writer's lease record when a journal shows a newer
// writer epoch: a writer started on the mirror (run --take-over) then takes
// an epoch above every one whose objects the mirror holds, so its segment
// ids and table names never collide with theirs. The record's heartbeat is
// not kept current in the mirror (a writer on it needs --take-over).
func (m *Mirror) copyLease(ctx context.Context, epoch uint64) error {
	found, err := m.copyObject(ctx, lsm.LeaseKey)
	if err != nil {
		return err
	}
	if found {
		m.st.Epoch = epoch
		m.dirty = true
	}
	return nil
}

func newestManifest(ctx context.Context, s objstore.Store) (uint64, error) {
	objs, err := objstore.ListAll(ctx, s, lsm.ManifestPrefix)
	if err != nil {
		return 0, fmt.Errorf("mirror: listing manifests: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		if seq, ok := lsm.ParseManifestKey(o.Key); ok && seq > newest {
			newest = seq
		}
	}
	return newest, nil
}

func listSegments(ctx context.Context, s objstore.Store) (map[string]int64, error) {
	objs, err := objstore.ListAll(ctx, s, segment.KeyPrefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(objs))
	for _, o := range objs {
		if _, ok := segment.ParseKey(o.Key); ok {
			out[o.Key] = o.Size
		}
	}
	return out, nil
}
