package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/objstore"
)

// Publisher publishes a manifest covering everything committed so far and
// returns its sequence. The engine seals its open segment and runs the
// durability barrier first; cmd wires it (Seal; db.Publish).
type Publisher interface {
	Publish(ctx context.Context) (uint64, error)
}

// MaxPublishToRecord bounds the time between Create's publication and the
// record becoming durable. Metadata GC deletes a superseded manifest only
// once its successor is at least a minute old (reclaim.MetaGCMinAge), so a
// record written within this bound always pins a manifest GC keeps; a
// slower Create removes its record again and fails (retry it).
const MaxPublishToRecord = 30 * time.Second

// Create makes a checkpoint: it validates the name, publishes a manifest
// through p, and writes the record with put-if-absent. ttl is the
// lifetime of an ephemeral checkpoint (ignored for a persistent one).
// now is the writer's wall-clock time, recorded as CreateTime.
func Create(ctx context.Context, s objstore.Store, p Publisher, name string, kind Kind, ttl time.Duration, now time.Time) (Record, error) {
	ctx = objstore.DefaultPurpose(ctx, objstore.PurposeCheckpoint)
	if err := ValidName(name); err != nil {
		return Record{}, err
	}
	rec := Record{Name: name, Kind: kind, CreateTime: now.UTC()}
	switch kind {
	case Persistent:
	case Ephemeral:
		if ttl <= 0 || ttl > MaxSpan {
			return Record{}, fmt.Errorf("checkpoint: create %q: ephemeral ttl %v is outside (0, %v]", name, ttl, MaxSpan)
		}
		rec.ExpireTime = rec.CreateTime.Add(ttl)
	default:
		return Record{}, fmt.Errorf("checkpoint: create %q: unknown kind %q", name, kind)
	}
	if p == nil {
		return Record{}, fmt.Errorf("checkpoint: create %q: no publisher", name)
	}
	key := Key(name)
	// Fail fast, before a publication, when the name is taken.
	if _, err := s.Head(ctx, key); err == nil {
		return Record{}, fmt.Errorf("%w: %q", ErrExists, name)
	} else if !objstore.IsNotFound(err) {
		return Record{}, fmt.Errorf("checkpoint: create %q: %w", name, err)
	}
	seq, err := p.Publish(ctx)
	if err != nil {
		return Record{}, fmt.Errorf("checkpoint: create %q: publish: %w", name, err)
	}
	if seq == 0 {
		return Record{}, fmt.Errorf("checkpoint: create %q: publish returned manifest 0 (nothing published)", name)
	}
	published := time.Now() // monotonic: bounds this process's own delay
	failpoint.Hit("checkpoint-after-publish")
	rec.ManifestSeq = seq
	b, err := encodeRecord(rec)
	if err != nil {
		return Record{}, err
	}
	if _, err := s.Put(ctx, key, b, objstore.PutOptions{IfAbsent: true}); err != nil {
		if objstore.IsPreconditionFailed(err) {
			return Record{}, fmt.Errorf("%w: %q (created concurrently)", ErrExists, name)
		}
		return Record{}, fmt.Errorf("checkpoint: create %q: write record: %w", name, err)
	}
	failpoint.Hit("checkpoint-after-record")
	if d := time.Since(published); d > MaxPublishToRecord {
		// Metadata GC may have judged manifest seq unpinned meanwhile.
		derr := s.Delete(context.WithoutCancel(ctx), key)
		return Record{}, fmt.Errorf("checkpoint: create %q: the record took %v after publication (limit %v); removed it again (remove error: %v); retry", name, d.Round(time.Millisecond), MaxPublishToRecord, derr)
	}
	return rec, nil
}

// List returns every checkpoint record in name order. A record deleted
// while listing is skipped; any other unreadable or malformed record is
// an error naming it, since the horizon cannot be known without it.
func List(ctx context.Context, s objstore.Store) ([]Record, error) {
	recs, bad, err := scan(ctx, s)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, bad[0]
	}
	return recs, nil
}

// scan lists and reads every record, collecting per-record errors.
func scan(ctx context.Context, s objstore.Store) (recs []Record, bad []error, err error) {
	ctx = objstore.DefaultPurpose(ctx, objstore.PurposeCheckpoint)
	objs, err := objstore.ListAll(ctx, s, Prefix)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: list %s: %w", Prefix, err)
	}
	for _, o := range objs {
		b, err := s.Get(ctx, o.Key)
		if objstore.IsNotFound(err) {
			continue // deleted since the listing: it pins nothing any more
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("checkpoint: read %s: %w", o.Key, err)
			}
			bad = append(bad, fmt.Errorf("checkpoint: read %s: %w", o.Key, err))
			continue
		}
		r, err := decodeRecord(o.Key, b)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad, nil
}

// Get returns the record named name (ErrNotFound if there is none).
func Get(ctx context.Context, s objstore.Store, name string) (Record, error) {
	if err := ValidName(name); err != nil {
		return Record{}, err
	}
	b, err := s.Get(ctx, Key(name))
	if objstore.IsNotFound(err) {
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if err != nil {
		return Record{}, fmt.Errorf("checkpoint: read %s: %w", Key(name), err)
	}
	return decodeRecord(Key(name), b)
}

// getTagged returns the record and the ETag of the version read, for a
// conditional rewrite. The ETag comes from a Head before the Get: if the
// object changes in between, the rewrite's IfMatch fails.
func getTagged(ctx context.Context, s objstore.Store, name string) (Record, string, error) {
	ctx = objstore.DefaultPurpose(ctx, objstore.PurposeCheckpoint)
	key := Key(name)
	info, err := s.Head(ctx, key)
	if err == nil {
		var b []byte
		if b, err = s.Get(ctx, key); err == nil {
			r, derr := decodeRecord(key, b)
			return r, info.ETag, derr
		}
	}
	if objstore.IsNotFound(err) {
		return Record{}, "", fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return Record{}, "", fmt.Errorf("checkpoint: read %s: %w", key, err)
}

// Delete removes the record named name (ErrNotFound if there is none).
// Reclamation catches up on its own schedule.
func Delete(ctx context.Context, s objstore.Store, name string) error {
	ctx = objstore.DefaultPurpose(ctx, objstore.PurposeCheckpoint)
	if err := ValidName(name); err != nil {
		return err
	}
	key := Key(name)
	if _, err := s.Head(ctx, key); objstore.IsNotFound(err) {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	} else if err != nil {
		return fmt.Errorf("checkpoint: delete %s: %w", key, err)
	}
	if err := s.Delete(ctx, key); err != nil {
		return fmt.Errorf("checkpoint: delete %s: %w", key, err)
	}
	return nil
}

// Renew moves an ephemeral checkpoint's ExpireTime to now+ttl, leaving
// CreateTime (and so the start of its span) alone. The rewrite is
// conditional on the version read: a concurrent change makes it fail with
// objstore.ErrPreconditionFailed (wrapped); read again and retry.
func Renew(ctx context.Context, s objstore.Store, name string, ttl time.Duration, now time.Time) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if ttl <= 0 || ttl > MaxSpan {
		return fmt.Errorf("checkpoint: renew %q: ttl %v is outside (0, %v]", name, ttl, MaxSpan)
	}
	rec, etag, err := getTagged(ctx, s, name)
	if err != nil {
		return err
	}
	if rec.Kind != Ephemeral {
		return fmt.Errorf("checkpoint: renew %q: a %s checkpoint does not expire", name, rec.Kind)
	}
	exp := now.UTC().Add(ttl)
	if exp.Before(rec.CreateTime) {
		return fmt.Errorf("checkpoint: renew %q: new expire_time %v is before create_time %v", name, exp, rec.CreateTime)
	}
	if exp.Sub(rec.CreateTime) > MaxSpan {
		return fmt.Errorf("checkpoint: renew %q: %w: span would exceed %v; re-create it", name, ErrInvalidSpan, MaxSpan)
	}
	rec.ExpireTime = exp
	b, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	if _, err := s.Put(ctx, Key(name), b, objstore.PutOptions{IfMatch: etag}); err != nil {
		return fmt.Errorf("checkpoint: renew %q: %w", name, err)
	}
	return nil
}

// Expired reports whether an ephemeral checkpoint's ExpireTime has passed.
// A persistent checkpoint never expires. Expired records still count for
// the horizon (which uses spans) until Prune removes them.
func Expired(r Record, now time.Time) bool {
	return r.Kind == Ephemeral && !r.ExpireTime.IsZero() && !now.Before(r.ExpireTime)
}

// Prune deletes ephemeral records that expired more than their span ago
// (now > ExpireTime + span) and returns their names. Persistent records,
// records with an invalid span and unreadable records are never deleted;
// the last are reported in the error after the rest has been pruned.
func Prune(ctx context.Context, s objstore.Store, now time.Time) ([]string, error) {
	recs, bad, err := scan(ctx, s)
	if err != nil {
		return nil, err
	}
	var pruned []string
	for _, r := range recs {
		if r.Kind != Ephemeral || validSpan(r) != nil {
			continue
		}
		if now.Sub(r.ExpireTime) <= r.Span() {
			continue
		}
		// Re-read just before deleting: a renewal since the scan wins.
		cur, _, err := getTagged(ctx, s, r.Name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if cur.Kind != Ephemeral || validSpan(cur) != nil || now.Sub(cur.ExpireTime) <= cur.Span() {
			continue
		}
		if err := s.Delete(ctx, Key(r.Name)); err != nil {
			bad = append(bad, fmt.Errorf("checkpoint: prune %s: %w", Key(r.Name), err))
			continue
		}
		pruned = append(pruned, r.Name)
	}
	return pruned, errors.Join(bad...)
}
