package segread

import (
	"sync"
	"unsafe"

	"ebbfs.dev/ebbfs/internal/directio"
	"ebbfs.dev/ebbfs/internal/hugemem"
)

// Run buffers. A sequential reader fetches runs of about 2 MiB of frames
// (fs read-ahead and the kernel's read requests) and decrypts each into
// one buffer of plaintext that the memory cache keeps. A new buffer per
// run cost the cold sequential read a fifth of its CPU: Go clears each
// new allocation, and under the memory limit the runtime hands freed
// pages back to the kernel, which faults them in again. So the buffers
// of runs that the cache has let go, and that no caller still reads, are
// kept here and used again; so are the buffers the sealed bytes are read
// into before they are decrypted (those in sealedBufs, on huge pages).
//
// A buffer is reused only when nothing can read it any more: runs track
// loans (memRun.refs) and frames handed out without one (memRun.escaped).

// runBufSize is the capacity of a pooled buffer: a read-ahead run
// (prefetchRun in fs, 2 MiB, plus its last frame) or a read of 64 extents
// of 32 KiB, with room for the pieces' nonces and tags. A run larger than
// that, or smaller than half of it, gets a buffer of its own: the memory
// cache charges a run for its whole buffer, and a random read's frame
// must not take 2 MiB of it.
const runBufSize = 2<<20 + 192<<10

// runBufKeep bounds the buffers kept while unused, of runs, of sealed
// spans and of fetched runs waiting for the disk cache (kept) each:
// 18 MiB, outside the memory cache's budget.
const runBufKeep = 8

// runBufs is a free list of run buffers, and one of the buffers that
// fetched sealed bytes wait in for the disk cache (kept).
type runBufs struct {
	mu   sync.Mutex
	free [][]byte
	kept [][]byte
}

// get returns a buffer of n bytes for a run the memory cache is to keep,
// and whether it is a pooled one, which put may take back. A pooled
// buffer's bytes are whatever its last user left.
func (p *runBufs) get(n int) (b []byte, pooled bool) {
	if n > runBufSize || n <= runBufSize/2 {
		return make([]byte, n), false
	}
	return p.take()[:n], true
}

// scratch returns a buffer of n bytes for sealed bytes, which its caller
// gives back (putScratch) as soon as it is done with them, and whether it
// is a pooled one: any size from scratchMin up to runBufSize is. Pooled
// scratch buffers lie on huge pages (sealedBufs).
func (p *runBufs) scratch(n int) (b []byte, pooled bool) {
	if n > runBufSize || n < scratchMin {
		return make([]byte, n), false
	}
	return sealedBufs.Get()[:n], true
}

// sealedBufsMax bounds the sealed spans' buffers outside the Go heap.
const sealedBufsMax = 32

// putScratch gives back a pooled scratch buffer that nothing reads any
// more.
func (p *runBufs) putScratch(b []byte) { sealedBufs.Put(b) }

// sealedBufs are the pooled scratch buffers of every Reader: the direct
// reads of sealed spans (a local store's objstore.ReadSpan, the disk
// cache's directio.File) land in them, 2 MiB of a span on one
// huge page (hugemem): on a virtio disk that read a cold file faster
// than Go heap buffers did (bench/README.md, "Figures behind the code's
// constants"). The buffers live as long as the process,
// so the pool is shared; at most sealedBufsMax are mapped (70 MiB,
// outside the Go heap), enough for the read-ahead spans (aheadMax) and
// the reads in flight of a busy reader, and the rest are the heap's.
var sealedBufs = hugemem.NewPool(runBufSize, runBufKeep, sealedBufsMax)

// scratchMin is the smallest scratch buffer worth a pooled one.
const scratchMin = 128 << 10

// take returns a free buffer, or a new one.
func (p *runBufs) take() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		return b
	}
	return make([]byte, runBufSize)
}

// put takes back a pooled buffer that nothing reads any more.
func (p *runBufs) put(b []byte) {
	if cap(b) != runBufSize {
		return
	}
	p.mu.Lock()
	if len(p.free) < runBufKeep {
		p.free = append(p.free, b[:0])
	}
	p.mu.Unlock()
}

// keptSize is the capacity of a pooled buffer for sealed bytes the disk
// cache keeps until it has written them: a fetched run of up to
// runBufSize, and room to place it (alignedFor).
const keptSize = runBufSize + directio.Align

// keep returns a buffer for the n sealed bytes at offset off of an object
// that the disk cache will keep until it has written them, placed as
// alignedFor places them, and the pooled buffer it lies in (nil if it is
// not pooled), to give back with putKept once the cache has written them.
// A fetched run costs no new memory to clear, and no page faults, where a
// new buffer per GET cost both.
func (p *runBufs) keep(off int64, n int) (data, raw []byte) {
	if n+directio.Align > keptSize || n <= runBufSize/2 {
		return alignedFor(off, n), nil
	}
	p.mu.Lock()
	if k := len(p.kept); k > 0 {
		raw = p.kept[k-1]
		p.kept[k-1] = nil
		p.kept = p.kept[:k-1]
	}
	p.mu.Unlock()
	if raw == nil {
		raw = make([]byte, keptSize)
	}
	at := int((uintptr(off) - uintptr(unsafe.Pointer(&raw[0]))) & (directio.Align - 1))
	return raw[at : at+n : at+n], raw
}

// putKept takes back a buffer keep lent once nothing reads it.
func (p *runBufs) putKept(raw []byte) {
	if raw == nil {
		return
	}
	p.mu.Lock()
	if len(p.kept) < runBufKeep {
		p.kept = append(p.kept, raw)
	}
	p.mu.Unlock()
}
