package segread

import (
	"container/list"
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/segment"
)

// Pieces fetched on their own. A random read that shows no locality in a
// file far larger than the disk cache would fetch its whole frame (32 KiB
// by default) for the 4 KiB it reads, and the rest of the frame is
// unlikely to be read before the cache lets it go. Such a read asks
// instead for just the pieces it reads (Want FillPieces, without the
// file's lock); they are kept sealed here, in a small LRU, and its next
// attempt, under the lock, opens them from here (readPart). Pieces go to
// neither the memory nor the disk cache: they are not whole frames.

// pieceCacheBytes bounds the sealed bytes the piece cache holds: room for
// the pieces of about two thousand 4 KiB reads, far more than are in
// flight at once.
const pieceCacheBytes = 8 << 20

// pieceKey names the sealed pieces [a, b) of the frame at off in segment seg.
type pieceKey struct {
	seg  uint64
	off  uint32
	a, b int
}

type pieceEntry struct {
	k      pieceKey
	sealed []byte
}

// pieceCache is the LRU of sealed pieces, under Reader.mu.
type pieceCache struct {
	lru   *list.List // front = most recent; values *pieceEntry
	m     map[pieceKey]*list.Element
	bytes int
}

// copyTo copies the pieces k into dst (grown if need be) and reports
// whether the cache holds them.
func (c *pieceCache) copyTo(k pieceKey, dst []byte) ([]byte, bool) {
	el, ok := c.m[k]
	if !ok {
		return dst, false
	}
	c.lru.MoveToFront(el)
	return append(dst[:0], el.Value.(*pieceEntry).sealed...), true
}

func (c *pieceCache) has(k pieceKey) bool {
	_, ok := c.m[k]
	return ok
}

func (c *pieceCache) put(k pieceKey, sealed []byte) {
	if c.lru == nil {
		c.lru, c.m = list.New(), map[pieceKey]*list.Element{}
	}
	if _, ok := c.m[k]; ok || len(sealed) > pieceCacheBytes {
		return
	}
	c.m[k] = c.lru.PushFront(&pieceEntry{k, sealed})
	c.bytes += len(sealed)
	for c.bytes > pieceCacheBytes {
		c.remove(c.lru.Back())
	}
}

func (c *pieceCache) drop(k pieceKey) {
	if el, ok := c.m[k]; ok {
		c.remove(el)
	}
}

func (c *pieceCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*pieceEntry)
	delete(c.m, e.k)
	c.bytes -= len(e.sealed)
}

// fillPieces fetches the sealed pieces of frame p that hold plaintext
// bytes [from, to) into the piece cache, unless a cache can serve the
// read already: the memory cache (the whole frame), the piece cache, or
// the disk cache (which readPart reads pieces from).
func (r *Reader) fillPieces(ctx context.Context, id segment.FrameID, p segment.Pointer, from, to int) error {
	if err := r.checkPointer(p); err != nil {
		return err
	}
	if !p.IsPieced() || from < 0 || to > int(p.PlainLen) || from >= to {
		return fmt.Errorf("segment %s: pieces [%d,%d) of a frame of %d bytes (pieced: %v)", segment.Key(p.Segment), from, to, p.PlainLen, p.IsPieced())
	}
	_, a, b := segment.PieceSpan(int(p.PlainLen), from, to)
	k := pieceKey{seg: p.Segment, off: p.Offset, a: a, b: b}
	r.mu.Lock()
	cached := r.mu.pieces.has(k) || r.mu.mem != nil && r.mu.mem.entry(p.Segment, p.Offset, id) != nil
	r.mu.Unlock()
	if cached || r.disk != nil && len(r.disk.present([]segment.Pointer{p}, []int{0})) > 0 {
		return nil
	}
	sealed, err := r.getRange(ctx, segment.Key(p.Segment), int64(p.Offset)+int64(k.a), int64(k.b-k.a))
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.pieces.put(k, sealed)
	r.mu.Unlock()
	return nil
}

// fromPieceCache opens the pieces k from the piece cache with open,
// copied into buf (or a new buffer if buf is nil) first. It reports false
// if the cache does not hold them, or if they do not open: it then drops
// them, and the read fetches them again as if they had never been.
func (r *Reader) fromPieceCache(k pieceKey, buf []byte, open func([]byte) ([]byte, error)) ([]byte, bool) {
	r.mu.Lock()
	span, ok := r.mu.pieces.copyTo(k, buf[:0])
	r.mu.Unlock()
	if !ok {
		return nil, false
	}
	plain, err := open(span)
	if err != nil {
		r.mu.Lock()
		r.mu.pieces.drop(k)
		r.mu.Unlock()
		return nil, false
	}
	r.pieceHits.Add(1)
	return plain, true
}
