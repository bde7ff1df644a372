package segread

import (
	"container/list"

	"ebbfs.dev/ebbfs/segment"
)

// memEntryOverhead approximates the bookkeeping cost of one cached frame,
// counted against the byte budget.
const memEntryOverhead = 128

// memEntry is one cached plaintext frame.
type memEntry struct {
	seg  uint64
	off  uint32
	id   segment.FrameID
	data []byte
	run  *memRun
}

// memRun is a unit of caching and eviction: the frames decrypted from one
// coalesced GET share its buffer (decrypted in place, never copied), so
// they are kept and dropped together and the run is charged for the whole
// buffer. A frame cached on its own is a run of one.
type memRun struct {
	entries []*memEntry
	cost    int64
	el      *list.Element
	cached  bool // in the cache's LRU

	// A run whose plaintexts live in a pooled buffer (buf, from
	// runBufs) gives it back for reuse once it has left the cache and no
	// caller can still read it: refs counts loans not yet released
	// (ReadRunLent), and escaped is set when a frame of the run was
	// handed out with no release (readFrame, readRun, readPart), after which
	// the buffer is left to the garbage collector. The Reader's lock
	// guards these fields.
	buf     []byte
	refs    int
	escaped bool
}

// reusable reports whether run's pooled buffer may be reused now.
func (r *memRun) reusable() bool {
	return r.buf != nil && !r.cached && r.refs == 0 && !r.escaped
}

// memCache is a byte-bounded LRU of runs of plaintext frames, looked up by
// (segment, offset). Segments are immutable and ids never reused, so a key
// names one plaintext forever; the FrameID is kept to refuse a hit for a
// different id. A hit refreshes the frame's whole run. Not safe for
// concurrent use: the Reader locks around it.
type memCache struct {
	max  int64
	used int64
	n    int        // frames cached
	lru  *list.List // front = most recent; values *memRun
	m    map[uint64]map[uint32]*memEntry
	// left, if set, is called with each run that leaves the cache.
	left func(*memRun)
}

func newMemCache(max int64) *memCache {
	return &memCache{max: max, lru: list.New(), m: map[uint64]map[uint32]*memEntry{}}
}

// entry returns the cached frame at (seg, off) sealed for id, refreshing
// its run, or nil.
func (c *memCache) entry(seg uint64, off uint32, id segment.FrameID) *memEntry {
	e, ok := c.m[seg][off]
	if !ok || e.id != id {
		return nil
	}
	c.lru.MoveToFront(e.run.el)
	return e
}

// passedBy notes that a stream (readRunTo) has read the frame e, found in
// the cache. Once it has read the last frame of e's run, the run goes to
// the back of the LRU, first to make way: the stream will not read it
// again (and behind a remote store the disk cache holds it), whereas the
// runs fetched ahead of the stream and not yet read, and what random
// readers keep, are still wanted. Before, a stream's hits moved its runs
// to the front, so that with a 64 MiB cache and a 32 MiB read-ahead
// window the runs read already outlived the ones fetched ahead, which
// were pushed out just before the stream reached them.
func (c *memCache) passedBy(e *memEntry) {
	r := e.run
	if r.cached && r.entries[len(r.entries)-1] == e {
		c.lru.MoveToBack(r.el)
	}
}

// put caches one frame (the cache now shares data).
func (c *memCache) put(seg uint64, off uint32, id segment.FrameID, data []byte) {
	c.putRun(seg, []uint32{off}, []segment.FrameID{id}, [][]byte{data}, int64(len(data)))
}

// putRun caches the frames of one run of segment seg; bytes is the memory
// they hold (the shared buffer plus any frame data outside it). A frame
// already cached keeps its entry.
func (c *memCache) putRun(seg uint64, offs []uint32, ids []segment.FrameID, datas [][]byte, bytes int64) {
	c.add(seg, &memRun{}, offs, ids, datas, bytes)
}

// add is putRun for a run the caller made (and may hold on to); it
// reports whether the run is cached (none of its frames may be new, or it
// may be larger than the whole cache).
func (c *memCache) add(seg uint64, r *memRun, offs []uint32, ids []segment.FrameID, datas [][]byte, bytes int64) bool {
	r.cost = bytes + int64(len(offs))*memEntryOverhead
	if r.cost > c.max {
		return false
	}
	for c.used+r.cost > c.max && c.lru.Len() > 0 {
		c.remove(c.lru.Back().Value.(*memRun))
	}
	sm := c.m[seg]
	if sm == nil {
		sm = map[uint32]*memEntry{}
		c.m[seg] = sm
	}
	for i, off := range offs {
		if _, ok := sm[off]; ok {
			continue
		}
		e := &memEntry{seg: seg, off: off, id: ids[i], data: datas[i], run: r}
		sm[off] = e
		r.entries = append(r.entries, e)
	}
	if len(r.entries) == 0 {
		return false
	}
	r.el = c.lru.PushFront(r)
	r.cached = true
	c.used += r.cost
	c.n += len(r.entries)
	return true
}

func (c *memCache) remove(r *memRun) {
	c.lru.Remove(r.el)
	r.cached = false
	if c.left != nil {
		defer c.left(r)
	}
	c.used -= r.cost
	c.n -= len(r.entries)
	for _, e := range r.entries {
		if sm := c.m[e.seg]; sm != nil && sm[e.off] == e {
			delete(sm, e.off)
			if len(sm) == 0 {
				delete(c.m, e.seg)
			}
		}
	}
}

// drop removes the frame at (seg, off): its run with it when it is the
// run's only frame.
func (c *memCache) drop(seg uint64, off uint32) {
	e, ok := c.m[seg][off]
	if !ok {
		return
	}
	r := e.run
	if len(r.entries) == 1 {
		c.remove(r)
		return
	}
	for i, x := range r.entries {
		if x == e {
			r.entries = append(r.entries[:i], r.entries[i+1:]...)
			break
		}
	}
	c.n--
	delete(c.m[seg], off)
	if len(c.m[seg]) == 0 {
		delete(c.m, seg)
	}
}

// rename moves the frame at (seg, off) to (nseg, noff), where repack has
// copied it; it stays in its run. Nothing happens if the frame is not
// cached or the new place is taken.
func (c *memCache) rename(seg uint64, off uint32, nseg uint64, noff uint32) {
	e, ok := c.m[seg][off]
	if !ok {
		return
	}
	if _, taken := c.m[nseg][noff]; taken {
		return
	}
	delete(c.m[seg], off)
	if len(c.m[seg]) == 0 {
		delete(c.m, seg)
	}
	e.seg, e.off = nseg, noff
	sm := c.m[nseg]
	if sm == nil {
		sm = map[uint32]*memEntry{}
		c.m[nseg] = sm
	}
	sm[noff] = e
}

// forget drops every run holding a frame of seg.
func (c *memCache) forget(seg uint64) {
	for _, e := range c.m[seg] { // remove deletes a run's entries: none comes up twice
		c.remove(e.run)
	}
}

func (c *memCache) len() int { return c.n }
