package segment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
)

// ReadDirectory reads and verifies the footer and directory of segment
// segID with exactly two ranged GETs: the 64-byte footer, then the
// directory. size is the object size (from the segment counter or a
// listing). Corruption (including a size that disagrees with the footer)
// is an error wrapping ErrCorrupt, logged at error level; a missing object
// is an error wrapping objstore.ErrNotFound.
func ReadDirectory(ctx context.Context, s objstore.Store, k *keys.Keys, segID uint64, size int64) (Footer, []DirEntry, error) {
	return ReadDirectoryVia(ctx, s.GetRange, k, segID, size, slog.Default())
}

// GetRangeFunc reads n bytes at off of the object named key.
type GetRangeFunc func(ctx context.Context, key string, off, n int64) ([]byte, error)

// ReadDirectoryVia is ReadDirectory with the ranged reads made by get and
// corruption logged to log.
func ReadDirectoryVia(ctx context.Context, get GetRangeFunc, k *keys.Keys, segID uint64, size int64, log *slog.Logger) (Footer, []DirEntry, error) {
	key := Key(segID)
	corrupt := func(off int64, reason string, err error) (Footer, []DirEntry, error) {
		ce := &CorruptError{Key: key, Offset: off, Reason: reason, Err: err}
		LogCorrupt(log, ce)
		return Footer{}, nil, ce
	}
	if size < FooterSize+keys.Overhead {
		return corrupt(-1, fmt.Sprintf("object size %d is too small for a segment", size), nil)
	}
	fb, err := get(ctx, key, size-FooterSize, FooterSize)
	if err != nil {
		return Footer{}, nil, fmt.Errorf("segment %s: read footer: %w", key, err)
	}
	f, err := ParseFooter(fb)
	if err != nil {
		return corrupt(size-FooterSize, "", err)
	}
	if f.SegID != segID {
		return corrupt(size-FooterSize, fmt.Sprintf("footer names segment %016x", f.SegID), nil)
	}
	if f.ObjectSize() != size {
		return corrupt(size-FooterSize, fmt.Sprintf("footer describes a %d-byte object, object is %d bytes", f.ObjectSize(), size), nil)
	}
	sealed, err := get(ctx, key, int64(f.DirOffset), int64(f.DirLen))
	if err != nil {
		return Footer{}, nil, fmt.Errorf("segment %s: read directory: %w", key, err)
	}
	entries, err := ParseDirectory(k, f, sealed)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			LogCorrupt(log, ce)
		}
		return Footer{}, nil, err
	}
	return f, entries, nil
}

// LogCorrupt logs a corrupt segment object at error level, once per finding.
func LogCorrupt(log *slog.Logger, ce *CorruptError) {
	log.Error("segment object is corrupt", "object", ce.Key, "offset", ce.Offset, "err", ce.Error())
}

// Upload stores a finished segment with put-if-absent. Segment ids are
// never reused, so an existing object means an earlier attempt of this same
// upload succeeded although its reply was lost: Upload then compares the
// object's size and its trailing directory and footer (the directory's
// random nonce makes them unique to one Finish) and returns nil if they
// match. Anything else is an error wrapping objstore.ErrPreconditionFailed.
func Upload(ctx context.Context, s objstore.Store, segID uint64, data []byte) error {
	ctx = objstore.WithPurpose(ctx, objstore.PurposeSegmentUpload)
	key := Key(segID)
	if len(data) < FooterSize {
		return fmt.Errorf("segment %s: upload of %d bytes is not a segment", key, len(data))
	}
	_, err := s.Put(ctx, key, data, objstore.PutOptions{IfAbsent: true})
	if err == nil {
		return nil
	}
	if !objstore.IsPreconditionFailed(err) {
		return fmt.Errorf("segment %s: upload: %w", key, err)
	}
	info, herr := s.Head(ctx, key)
	if herr != nil {
		return fmt.Errorf("segment %s: upload: %w (and head: %v)", key, err, herr)
	}
	if info.Size == int64(len(data)) {
		f, ferr := ParseFooter(data[len(data)-FooterSize:])
		if ferr == nil && f.ObjectSize() == int64(len(data)) {
			tailLen := int64(f.DirLen) + FooterSize
			tail, gerr := s.GetRange(ctx, key, info.Size-tailLen, tailLen)
			if gerr == nil && bytes.Equal(tail, data[int64(len(data))-tailLen:]) {
				return nil
			}
		}
	}
	return fmt.Errorf("segment %s: a different object already exists: %w", key, err)
}
