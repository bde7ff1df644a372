// Package hugemem keeps large I/O buffers outside the Go heap, on
// transparent huge pages where the kernel gives them.
//
// A read or write past the page cache (O_DIRECT) goes to the disk as
// requests of at most max_segments physically contiguous pieces each. A
// Go heap buffer lies on 4 KiB pages, so a 2 MiB read became requests of
// about 1 MiB (254 segments on virtio-blk), slower than the page cache's
// own read-ahead, whose large folios fill a 4 MiB request with a few
// segments. A buffer that starts on
// a 2 MiB boundary and is marked MADV_HUGEPAGE lies on one huge page per
// 2 MiB: a 2 MiB read is one segment (bench/README.md).
//
// The memory is never unmapped: a Pool keeps every buffer it made, and
// gives the pages of those beyond its warm count back to the kernel
// (MADV_DONTNEED), so a stray use of a buffer after Put finds its last
// user's bytes or zeroes, never a fault. The Go collector does not see the
// buffers: a buffer that is not given back to its Pool is lost until the
// process exits.
package hugemem

import (
	"sync"
	"unsafe"
)

// Pool is a free list of buffers of one size.
type Pool struct {
	size, keep, max int

	mu     sync.Mutex
	warm   [][]byte       // given back, pages still held
	cold   [][]byte       // given back, pages returned to the kernel
	mapped map[*byte]bool // every buffer it mapped, true while it is free (the others are the collector's)
}

// NewPool returns a pool of buffers of size bytes, of which it maps at
// most max and holds the pages of at most keep while they are unused.
// Past max, Get returns buffers of the Go heap.
func NewPool(size, keep, max int) *Pool {
	return &Pool{size: size, keep: keep, max: max}
}

// Size is the length of the pool's buffers.
func (p *Pool) Size() int { return p.size }

// Get returns a buffer of Size bytes: zeroes if new or cold, otherwise
// whatever its last user left. Where the kernel refuses the mapping it is
// a buffer of the Go heap: slower I/O, nothing else.
func (p *Pool) Get() []byte {
	p.mu.Lock()
	for _, list := range []*[][]byte{&p.warm, &p.cold} {
		if b := pop(list); b != nil {
			p.mapped[&b[0]] = false
			p.mu.Unlock()
			return b
		}
	}
	if len(p.mapped) >= p.max {
		p.mu.Unlock()
		return make([]byte, p.size)
	}
	b, mapped := alloc(p.size)
	if mapped {
		if p.mapped == nil {
			p.mapped = make(map[*byte]bool)
		}
		p.mapped[&b[0]] = false
	}
	p.mu.Unlock()
	return b
}

// Put gives back a buffer from Get (or any slice of it from its first
// byte) that nothing reads or writes any more. It panics if the buffer is
// free already: two users would then be handed the same memory.
func (p *Pool) Put(b []byte) {
	if cap(b) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	free, mapped := p.mapped[&b[:1][0]]
	if !mapped {
		return // a buffer of the Go heap (past max, or refused a mapping): the collector's
	}
	if free {
		panic("hugemem: a buffer given back twice")
	}
	b = unsafe.Slice(&b[:1][0], p.size)
	p.mapped[&b[0]] = true
	if len(p.warm) < p.keep {
		p.warm = append(p.warm, b)
		return
	}
	release(b)
	p.cold = append(p.cold, b)
}

// Stats returns how many buffers the pool has mapped, and how many of
// them are free with their pages held (warm) or returned (cold).
func (p *Pool) Stats() (mapped, warm, cold int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mapped), len(p.warm), len(p.cold)
}

// pop takes the last buffer off *list, or returns nil.
func pop(list *[][]byte) []byte {
	k := len(*list)
	if k == 0 {
		return nil
	}
	b := (*list)[k-1]
	(*list)[k-1] = nil
	*list = (*list)[:k-1]
	return b
}
