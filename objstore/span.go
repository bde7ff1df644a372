package objstore

import (
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/internal/directio"
)

// Spans: large reads of a local store that skip the page cache.
//
// A cold sequential read of a local store used to move every sealed byte
// twice before decrypting it: the disk's DMA into the page cache, then a
// copy into the reader's buffer (a quarter of the read's CPU, plus the
// kernel's read-ahead bookkeeping). The plaintext is what the kernel
// caches for the mounted file; the segment file's pages in the cache are
// a second copy of the same bytes that nothing reads twice. So a span that
// is not in the page cache already is read with O_DIRECT: the disk writes
// it straight into the reader's buffer. A span that is (a segment read
// back soon after it was written) is copied from the cache as before, and
// so is every span on a kernel that cannot tell (cachestat(2) came with
// Linux 6.5).

// SpanSlack is the room a ReadSpan buffer needs beyond the span: a direct
// read starts and ends on block boundaries, in memory and in the file.
const SpanSlack = directio.Slack

// DirectMin is the smallest span read directly: below it, a read is a
// random one, which the page cache serves better.
const DirectMin = directio.Min

// spanAlign is the alignment of a direct read (tests).
const spanAlign = directio.Align

// SpanReader is a store that can read a range into a larger buffer,
// placing it where it reads it best (ReadSpan).
type SpanReader interface {
	// ReadSpan reads the n bytes of key at off into buf, which has at
	// least n+SpanSlack bytes, and returns the slice of buf that holds
	// them. A range that runs past the end of the object is an error.
	ReadSpan(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error)
}

// ReadSpan reads the n bytes of key at off into buf (at least
// n+SpanSlack bytes) with s's own ReadSpan if it has one, otherwise into
// buf[:n] with ReadRange, and returns the slice of buf holding them.
func ReadSpan(ctx context.Context, s Store, key string, off int64, n int, buf []byte) ([]byte, error) {
	if n < 0 || len(buf) < n+SpanSlack {
		return nil, fmt.Errorf("get %s: a buffer of %d bytes for a span of %d", key, len(buf), n)
	}
	if r, ok := s.(SpanReader); ok {
		return r.ReadSpan(ctx, key, off, n, buf)
	}
	dst := buf[:n]
	return dst, ReadRange(ctx, s, key, off, dst)
}

// ReadSpan implements SpanReader: a span that the page cache does not hold
// whole is read with O_DIRECT (one of at most localRandomRead bytes
// through the open-files cache's directio.File, one of DirectMin or more
// through a descriptor of its own), anything else with pread through the
// page cache (also where the filesystem refuses O_DIRECT, or the kernel
// cannot tell what the page cache holds).
func (l *Local) ReadSpan(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error) {
	if n < DirectMin && cachedRead(key, int64(n)) {
		return l.getSmall(ctx, key, off, n, buf)
	}
	if n < DirectMin {
		dst := buf[:n]
		return dst, l.ReadRange(ctx, key, off, dst)
	}
	f, err := l.openRange(ctx, key, off, int64(n))
	if err != nil {
		return nil, err
	}
	defer func() { f.Close() }()
	data, ok, usable := directio.ReadDirect(f, off, n, buf)
	if ok {
		return data, nil
	}
	if !usable { // still in O_DIRECT mode: read through a new descriptor
		f.Close()
		if f, err = l.openRange(ctx, key, off, int64(n)); err != nil {
			return nil, err
		}
	}
	dst := buf[:n]
	return dst, readAt(f, key, dst, off)
}
