package segment

import "container/list"

// memEntryOverhead approximates the bookkeeping cost of one cached frame,
// counted against the byte budget.
const memEntryOverhead = 128

type memEntry struct {
	seg  uint64
	off  uint32
	id   FrameID
	data []byte
}

func (e *memEntry) cost() int64 { return int64(len(e.data)) + memEntryOverhead }

// memCache is a byte-bounded LRU of plaintext frames keyed by (segment,
// offset). Segments are immutable and ids never reused, so a key names one
// plaintext forever; the FrameID is kept to refuse a hit for a different
// id. Not safe for concurrent use: the Reader locks around it.
type memCache struct {
	max  int64
	used int64
	lru  *list.List // front = most recent; values *memEntry
	m    map[uint64]map[uint32]*list.Element
}

func newMemCache(max int64) *memCache {
	return &memCache{max: max, lru: list.New(), m: map[uint64]map[uint32]*list.Element{}}
}

func (c *memCache) get(seg uint64, off uint32, id FrameID) ([]byte, bool) {
	el, ok := c.m[seg][off]
	if !ok {
		return nil, false
	}
	e := el.Value.(*memEntry)
	if e.id != id {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return e.data, true
}

// put caches data (which the cache now owns).
func (c *memCache) put(seg uint64, off uint32, id FrameID, data []byte) {
	e := &memEntry{seg: seg, off: off, id: id, data: data}
	if e.cost() > c.max {
		return
	}
	if old, ok := c.m[seg][off]; ok {
		c.remove(old)
	}
	for c.used+e.cost() > c.max {
		c.remove(c.lru.Back())
	}
	sm := c.m[seg]
	if sm == nil {
		sm = map[uint32]*list.Element{}
		c.m[seg] = sm
	}
	sm[off] = c.lru.PushFront(e)
	c.used += e.cost()
}

func (c *memCache) remove(el *list.Element) {
	e := el.Value.(*memEntry)
	c.lru.Remove(el)
	c.used -= e.cost()
	if sm := c.m[e.seg]; sm != nil {
		delete(sm, e.off)
		if len(sm) == 0 {
			delete(c.m, e.seg)
		}
	}
}

func (c *memCache) forget(seg uint64) {
	for _, el := range c.m[seg] {
		c.remove(el)
	}
}

func (c *memCache) len() int { return c.lru.Len() }
