package fs

import (
	"context"

	"ebbfs.dev/ebbfs/segment"
	"ebbfs.dev/ebbfs/segread"
)

// What a random read's miss fetches. Behind a remote store with a disk
// cache, a read that does not continue a stream and misses every cache
// fetches its extent's frame (a partial read of it then takes its pieces
// from the plaintext). It fetches the frame's neighbourhood instead, the
// aligned neighbourhoodBytes of the file around it (one GET of up to
// 2 MiB where the extents lie together in a segment), when
//
//   - the file fits the disk cache (at most half of it): a small hot file
//     is then local after one pass, a 1 GiB file after at most 512 GETs,
//     and no byte of it is fetched twice (the frames stay in the disk
//     cache, and concurrent misses of one neighbourhood wait for one
//     fetch: segread, flight.go); or
//   - the inode's previous two random misses each lay in the same
//     neighbourhood as the one before or the next one on either side:
//     nearby reads follow each other (a single near miss happens by
//     chance in a large file read at random).
//
// A file far larger than the cache (larger than all of it) read with no
// locality costs the read's own pieces, not its frame: a 4 KiB read of a
// 32 KiB frame fetches the 4 KiB piece it reads (two where it straddles
// pieces), since the rest of the frame is unlikely to be read before the
// cache lets it go. Those pieces are fetched without the inode's lock,
// as frames are, and kept in the segment reader's small piece cache for
// the read's next attempt (segread, piececache.go); neither cache keeps
// them. A file between half and all of the cache costs one frame per
// read. The neighbourhood is fetched as read-ahead
// is (prefetch: its runs of adjacent frames, one GET each, at once). The
// misses of concurrent reads go out together: each read fetches on its
// own goroutine (FUSE's, NBD's), so the GETs in flight are bounded by the
// requests in flight (the kernel's, an NBD client's queue depth) times
// the runs of a neighbourhood (one where its extents lie together).

// neighbourhoodBytes is the part of a file a random miss fetches where
// the file shows locality: one read-ahead run (prefetchRun).
const neighbourhoodBytes = prefetchRun

// fetchAround fetches the neighbourhood of a random read at off that
// missed, into the caches, when the policy above says so, and otherwise
// reports whether the read's misses should fetch only their pieces.
// Errors are left to the read's own fetch.
func (e *Engine) fetchAround(ctx context.Context, n *inode, off int64) (pieces bool) {
	if e.local || e.opts.DiskCacheBytes <= 0 {
		return false
	}
	n.mu.RLock()
	size, es := int64(n.attr.Size), n.es()
	n.mu.RUnlock()
	if off >= size {
		return false
	}
	b := off / neighbourhoodBytes
	if !n.seq.widen(off, b, size <= e.opts.DiskCacheBytes/2) {
		return size > e.opts.DiskCacheBytes
	}
	from, to := b*neighbourhoodBytes, min((b+1)*neighbourhoodBytes, size)
	e.prefetch(ctx, n.ino, uint64(es), from, to)
	return false
}

// fetchPieces fetches the pieces of the misses that are one frame read in
// part (readPieces'), and returns the other misses.
func (e *Engine) fetchPieces(ctx context.Context, misses []storeMiss) ([]storeMiss, error) {
	rest := misses[:0:0]
	for _, m := range misses {
		if m.to == 0 {
			rest = append(rest, m)
			continue
		}
		err := e.storeRead(ctx, "read "+segment.Key(m.ptrs[0].Segment), func() error {
			_, err := e.rd.Read(ctx, &segread.Request{ID: m.ids[0], Ptr: m.ptrs[0], From: m.from, To: m.to, Want: segread.FillPieces})
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return rest, nil
}
