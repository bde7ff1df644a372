package mirror

import (
	"context"
	"fmt"
	"strings"

	"ebbfs.dev/ebbfs/checkpoint"
	"ebbfs.dev/ebbfs/objstore"
)

// scanCheckpoints copies new and changed checkpoint records (after the
// manifest each pins) and notes the ones gone from the source, whose
// copies are deleted after the retention. Nothing names a record, so this
// is the one listing of the source a mirror makes routinely: one LIST of
// checkpoints/ per CheckpointInterval. Replicas' own records (reader-...)
// are not copied: they pin nothing a mirror needs. The descriptor is
// checked at the same time (a HEAD).
func (m *Mirror) scanCheckpoints(ctx context.Context) error {
	if err := m.copyDescriptor(ctx); err != nil {
		return err
	}
	objs, err := objstore.ListAll(ctx, m.opts.Source, checkpoint.Prefix)
	if err != nil {
		return fmt.Errorf("mirror: listing checkpoint records: %w", err)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		name := strings.TrimPrefix(o.Key, checkpoint.Prefix)
		if strings.HasPrefix(name, checkpoint.ReaderPrefix) || checkpoint.ValidName(name) != nil {
			continue
		}
		seen[name] = true
		if e, ok := m.st.Records[name]; ok && e.ETag == o.ETag && e.Gone.IsZero() {
			continue
		}
		if err := m.copyRecord(ctx, o.Key, name, o.ETag); err != nil {
			return err
		}
	}
	now := m.opts.Clock.Now()
	for name, e := range m.st.Records {
		if !seen[name] && e.Gone.IsZero() {
			e.Gone = now
			m.st.Records[name] = e
			m.dirty = true
		}
	}
	return nil
}

func (m *Mirror) copyRecord(ctx context.Context, key, name, etag string) error {
	b, err := m.opts.Source.Get(ctx, key)
	if objstore.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mirror: reading %s: %w", key, err)
	}
	rec, err := checkpoint.DecodeRecord(key, b)
	if err != nil {
		m.opts.Log.Warn("mirror: a checkpoint record does not decode; not copied", "record", key, "err", err)
		return nil
	}
	if err := m.copyManifest(ctx, rec.ManifestSeq); err != nil {
		return err
	}
	if m.st.manifestIndex(rec.ManifestSeq) < 0 {
		m.opts.Log.Warn("mirror: a checkpoint's manifest could not be copied; record not copied", "record", name, "manifest", rec.ManifestSeq)
		return nil
	}
	if err := m.putObject(ctx, key, b); err != nil {
		return err
	}
	m.st.Records[name] = RecordEntry{Manifest: rec.ManifestSeq, ETag: etag}
	m.dirty = true
	return nil
}
