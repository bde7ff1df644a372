// Package objstore is the durable home of an ebbfs filesystem: a small
// object-store interface with a local-directory backend (the embedded
// default), an S3 backend, an in-memory backend for unit tests, and
// decorators that count requests or inject faults.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrNotFound is returned (wrapped) when an object does not exist.
var ErrNotFound = errors.New("objstore: object not found")

// ErrPreconditionFailed is returned (wrapped) when a conditional Put loses:
// the object already exists (IfAbsent) or its ETag differs (IfMatch).
var ErrPreconditionFailed = errors.New("objstore: precondition failed")

// ErrUnavailable is returned (wrapped) when the store could not be reached
// or kept answering with transient errors (connection refused or reset, 5xx,
// throttling) after the backend's own retries. The operation may or may not
// have taken effect; callers retry it in their own loop.
var ErrUnavailable = errors.New("objstore: store unavailable")

// IsNotFound reports whether err means the object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsPreconditionFailed reports whether err means a conditional Put lost.
func IsPreconditionFailed(err error) bool { return errors.Is(err, ErrPreconditionFailed) }

// IsUnavailable reports whether err is a transient store failure worth
// retrying later.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// PutOptions makes a Put conditional. At most one field may be set.
type PutOptions struct {
	// IfAbsent creates the object only if no object has the key.
	IfAbsent bool
	// IfMatch replaces the object only if its current ETag equals this.
	IfMatch string
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key  string
	Size int64
	// ETag identifies the stored version of the object, unquoted: the hex
	// MD5 of the content for Mem and single-part S3 objects, S3's
	// "md5-of-part-md5s-N" for multipart ones, and a per-write token for
	// Local (see Local). Compare it, use it for IfMatch, but do not treat
	// it as a content hash.
	ETag    string
	ModTime time.Time
}

// ListPage is one page of a listing, in key order.
type ListPage struct {
	Objects []ObjectInfo
	// More is true when a further page may exist; pass the last key of
	// this page as startAfter to get it.
	More bool
}

// Store is the object-store interface every ebbfs layer uses. Keys are
// slash-separated relative names ("segments/3f/000000010000003f").
// Implementations are safe for concurrent use.
type Store interface {
	// Put stores data under key and returns the new object's ETag. It
	// neither keeps nor reads data once it has returned, whatever the
	// outcome: the caller may reuse it (the writer builds its next
	// segments in the buffers of uploaded ones).
	Put(ctx context.Context, key string, data []byte, opts PutOptions) (etag string, err error)
	// Get returns the whole object.
	Get(ctx context.Context, key string) ([]byte, error)
	// GetRange returns length bytes starting at off. A range that runs past
	// the end of the object is an error.
	GetRange(ctx context.Context, key string, off, length int64) ([]byte, error)
	// Head returns the object's metadata.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes the object. Deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteMany removes several objects; missing ones are not errors.
	DeleteMany(ctx context.Context, keys []string) error
	// List returns up to limit objects whose keys start with prefix and sort
	// after startAfter. limit <= 0 means the backend's default (1000).
	List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error)
}

// RangeReader is implemented by stores that read a range into a buffer the
// caller owns, so that a reader can recycle its buffers (the local store
// reads with pread(2) straight into it).
type RangeReader interface {
	// ReadRange fills dst with the len(dst) bytes at off. A range that
	// runs past the end of the object is an error.
	ReadRange(ctx context.Context, key string, off int64, dst []byte) error
}

// WillNeed tells s, if it or a store it wraps keeps objects as local files,
// that the n bytes of key at off are to be read soon, so that the kernel
// reads them into its page cache ahead of the reads. Other stores ignore
// it, and so do errors: it is a hint.
func WillNeed(s Store, key string, off, n int64) {
	if l := asLocal(s); l != nil {
		l.willNeed(key, off, n)
	}
}

// ReadRange fills dst with the len(dst) bytes of key at off: with s's own
// ReadRange if it has one, otherwise with GetRange and a copy.
func ReadRange(ctx context.Context, s Store, key string, off int64, dst []byte) error {
	if r, ok := s.(RangeReader); ok {
		return r.ReadRange(ctx, key, off, dst)
	}
	b, err := s.GetRange(ctx, key, off, int64(len(dst)))
	if err != nil {
		return err
	}
	if len(b) != len(dst) {
		return fmt.Errorf("get %s: range [%d,+%d) returned %d bytes", key, off, len(dst), len(b))
	}
	copy(dst, b)
	return nil
}

// ListAll pages through every object under prefix.
func ListAll(ctx context.Context, s Store, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	after := ""
	for {
		page, err := s.List(ctx, prefix, after, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Objects...)
		if !page.More || len(page.Objects) == 0 {
			return out, nil
		}
		after = page.Objects[len(page.Objects)-1].Key
	}
}

// IsLocal reports whether s is, under any decorators that expose Unwrap,
// the local-directory backend.
func IsLocal(s Store) bool { return asLocal(s) != nil }

// asLocal returns the local-directory backend under s's decorators, or nil.
func asLocal(s Store) *Local {
	for i := 0; i < 16 && s != nil; i++ {
		if l, ok := s.(*Local); ok {
			return l
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return nil
		}
		s = u.Unwrap()
	}
	return nil
}

// Close releases what a store holds running (a Local's sweeper), looking
// under decorators that expose Unwrap; a store that holds nothing needs
// no Close.
func Close(s Store) error {
	for i := 0; i < 16 && s != nil; i++ {
		if c, ok := s.(io.Closer); ok {
			return c.Close()
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			return nil
		}
		s = u.Unwrap()
	}
	return nil
}
