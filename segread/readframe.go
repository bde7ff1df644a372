package segread

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// readFrame returns the plaintext of the frame p points at, sealed for
// id. len(result) == p.PlainLen. The slice may be shared with the memory
// cache and other readers: it must not be modified.
func (r *Reader) readFrame(ctx context.Context, id segment.FrameID, p segment.Pointer) ([]byte, error) {
	if err := r.checkPointer(p); err != nil {
		return nil, err
	}
	for waited := false; ; waited = true {
		if out, ok, err := r.cached(id, p); ok || err != nil {
			return out, err
		}
		c, lead, err := r.joinFlight(ctx, p, waited)
		if err != nil {
			return nil, err
		}
		if lead {
			return r.fetchFrame(ctx, id, p, c)
		}
		r.waits.Add(1)
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if c.err == nil && len(c.frame) == int(p.Length) {
			// The sealed frame, for a reader that keeps no plaintexts.
			if out, ok, err := r.cached(id, p); ok || err != nil {
				return out, err
			}
			return r.accept(id, p, c.frame)
		}
	}
}

// joinFlight returns the fetch in flight of the frame p, or, with lead,
// a new one this read is to make (entered in the flight table unless it
// has waited already and another read is fetching the frame again). A
// cache-only attempt (ctx done) gets ctx's error instead: it asks no store.
func (r *Reader) joinFlight(ctx context.Context, p segment.Pointer, waited bool) (c *fetchCall, lead bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("segment %s: get [%d,+%d): %w", segment.Key(p.Segment), p.Offset, p.Length, err)
	}
	site := corruptSite{p.Segment, int64(p.Offset)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.mu.flight[site]; c != nil {
		if !waited {
			return c, false, nil
		}
		return &fetchCall{done: make(chan struct{})}, true, nil
	}
	c = &fetchCall{done: make(chan struct{})}
	r.mu.flight[site] = c
	return c, true, nil
}

// fetchFrame GETs the frame p and caches it (accept), then lands c, the
// fetch readFrame entered for it: reads waiting for it find the frame
// cached, or take its sealed bytes from c.
func (r *Reader) fetchFrame(ctx context.Context, id segment.FrameID, p segment.Pointer, c *fetchCall) ([]byte, error) {
	frame, err := r.getRange(ctx, segment.Key(p.Segment), int64(p.Offset), int64(p.Length))
	var out []byte
	if err == nil {
		out, err = r.accept(id, p, frame)
	}
	site := corruptSite{p.Segment, int64(p.Offset)}
	r.mu.Lock()
	if r.mu.flight[site] == c {
		delete(r.mu.flight, site)
	}
	c.frame, c.err = frame, err
	r.mu.Unlock()
	close(c.done)
	return out, err
}

// readPart returns plaintext bytes [from, to) of the frame p points at
// (0 <= from < to <= p.PlainLen), as readFrame would but reading less: a
// pieced frame that the memory cache does not hold is read piece-wise,
// only the pieces holding [from, to), from the pieces fetched on their
// own (piececache.go), from the disk cache when it holds
// the frame, or from the store when there is no disk cache (a local
// store, whose reads cost no request, or a cache turned off). Those
// pieces are not cached; a
// frame to fetch from a store behind a disk cache is read whole and cached
// as by readFrame, since that GET costs the same and its neighbours are
// likely next. The result must not be modified.
//
// With dst (to-from bytes), the bytes are written there and dst is
// returned. Pieces whose plaintext is exactly [from, to) are decrypted
// straight into dst: a cold 4 KiB random read then allocates nothing,
// where a plaintext buffer of its own per read was most of what such
// reads allocated (76 of 95 MB over 20,000 reads), and the heap growing
// under them cost a page fault every read or so.
func (r *Reader) readPart(ctx context.Context, id segment.FrameID, p segment.Pointer, from, to int, dst []byte) ([]byte, error) {
	if err := r.checkPointer(p); err != nil {
		return nil, err
	}
	if from < 0 || to > int(p.PlainLen) || from >= to {
		return nil, fmt.Errorf("segment %s: read [%d,%d) of a frame of %d bytes", segment.Key(p.Segment), from, to, p.PlainLen)
	}
	// deliver returns b, the bytes [from, to), or copies them into dst.
	deliver := func(b []byte) []byte {
		if dst == nil {
			return b
		}
		clear(dst[copy(dst, b):])
		return dst
	}
	whole := func() ([]byte, error) {
		b, err := r.readFrame(ctx, id, p)
		if err != nil {
			return nil, err
		}
		return deliver(part(b, from, to)), nil
	}
	if !p.IsPieced() {
		return whole()
	}
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return nil, errClosed
	}
	if r.mu.mem != nil {
		if e := r.mu.mem.entry(p.Segment, p.Offset, id); e != nil {
			r.hold(e.run, nil)
			r.mu.Unlock()
			r.memHits.Add(1)
			return deliver(part(e.data, from, to)), nil
		}
	}
	r.mu.Unlock()
	first, a, b := segment.PieceSpan(int(p.PlainLen), from, to)
	skip := from - first*segment.PieceSize
	end := min((to+segment.PieceSize-1)/segment.PieceSize*segment.PieceSize, int(p.PlainLen))
	// direct: the pieces' plaintext is [from, to), dst's bytes exactly.
	direct := dst != nil && skip == 0 && to == end
	// The sealed pieces are read into a pooled buffer, past the page
	// cache where it does not hold them, and opened out of it: into dst,
	// or over the pooled buffer when the bytes are copied out of it into
	// dst, or into a new buffer of the plaintext's size that is returned.
	var buf []byte
	if b-a+directio.Slack <= pieceBufLen {
		pb := pieceBufs.Get().(*[pieceBufLen]byte)
		defer pieceBufs.Put(pb)
		buf = pb[:]
	}
	open := func(span []byte) ([]byte, error) {
		switch {
		case direct:
			// Capped at dst's length: the pieces' plaintext is exactly
			// that long, and never spills into the caller's bytes past it.
			out, err := segment.OpenPiecesTo(dst[:0:len(dst)], false, r.k, nil, id, int(p.PlainLen), first, span)
			if err == nil && (len(out) != len(dst) || &out[0] != &dst[0]) {
				err = fmt.Errorf("frame (ino %d, extent %d, gen %d): %d bytes of plaintext for [%d,%d): %w", id.Ino, id.Extent, id.Gen, len(out), from, to, segment.ErrCorrupt)
			}
			return out, err
		case buf == nil || dst != nil:
			return segment.OpenPiecesTo(span[:0], true, r.k, nil, id, int(p.PlainLen), first, span)
		}
		return segment.OpenPiecesTo(make([]byte, 0, end-first*segment.PieceSize), false, r.k, nil, id, int(p.PlainLen), first, span)
	}
	// got returns the bytes [from, to) out of the pieces' plaintext.
	got := func(plain []byte) []byte {
		if direct {
			return dst
		}
		return deliver(part(plain, skip, skip+to-from))
	}
	if plain, ok := r.fromPieceCache(pieceKey{p.Segment, p.Offset, a, b}, buf, open); ok {
		return got(plain), nil
	}
	if r.disk != nil {
		if len(r.disk.present([]segment.Pointer{p}, []int{0})) == 0 {
			return whole()
		}
		span, err := r.disk.readSpan(p.Segment, int64(p.Offset)+int64(a), b-a, buf)
		if err == nil && len(span) != b-a {
			err = fmt.Errorf("%d bytes, want %d", len(span), b-a)
		}
		if err == nil {
			var plain []byte
			plain, err = open(span)
			if err == nil {
				r.diskHits.Add(1)
				return got(plain), nil
			}
			r.diskDamaged(p, "piece read: "+err.Error())
		} else if !errors.Is(err, errNotCached) {
			r.disk.drop(p, "piece read: "+err.Error())
		}
		return whole()
	}
	var span []byte
	var err error
	if buf != nil {
		span, err = r.readSpan(ctx, segment.Key(p.Segment), int64(p.Offset)+int64(a), b-a, buf)
	} else {
		span, err = r.getRange(ctx, segment.Key(p.Segment), int64(p.Offset)+int64(a), int64(b-a))
	}
	if err != nil {
		return nil, err
	}
	plain, err := open(span)
	if err != nil {
		return nil, r.reportCorrupt(p, "", err)
	}
	r.misses.Add(1)
	return got(plain), nil
}

// pieceBufLen is the size of the pooled buffers a random read's pieces
// are read into (pieceBufs): up to 16 KiB of them, and the room a read
// past the page cache needs (directio.Slack).
const pieceBufLen = 16<<10 + directio.Slack

// pieceBufs are the buffers of readPart's sealed pieces, kept for the
// next read once the pieces are opened out of them: allocating a buffer
// of each read's own, aligned for O_DIRECT, was a visible part of a cold
// 4 KiB random read's CPU (the figure: bench/README.md, "Figures behind
// the code's constants").
var pieceBufs = sync.Pool{New: func() any { return new([pieceBufLen]byte) }}

// readSpan is getRange into buf (at least n+directio.Slack bytes),
// past the page cache where the store can (objstore.ReadSpan).
func (r *Reader) readSpan(ctx context.Context, key string, off int64, n int, buf []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil { // a cache-only attempt: not the store
		return nil, fmt.Errorf("segment %s: get [%d,+%d): %w", key, off, n, err)
	}
	r.gets.Add(1)
	b, err := objstore.ReadSpan(objstore.DefaultIfTracing(ctx, objstore.PurposeReadMiss), r.store, key, off, n, buf)
	if err != nil {
		return nil, fmt.Errorf("segment %s: get [%d,+%d): %w", key, off, n, err)
	}
	if len(b) != n {
		return nil, fmt.Errorf("segment %s: get [%d,+%d) returned %d bytes", key, off, n, len(b))
	}
	r.fetched.Add(uint64(n))
	return b, nil
}

// part returns b[from:to], cut short where b is (callers read the rest as
// zeroes; a plaintext is always PlainLen long, but a slice bound does not
// get to panic on it).
func part(b []byte, from, to int) []byte {
	to = min(to, len(b))
	from = min(from, to)
	return b[from:to:to]
}
