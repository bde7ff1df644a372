package segment

import (
	"fmt"
	"sync/atomic"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/internal/worker"
)

// Builder collects the frames of one segment in memory. It is not safe for
// concurrent use; the caller (the open segment buffer) serialises access.
//
// The caller decides when to seal: Size reports the frame bytes so far and
// must stay below MaxFrameBytes (segments are sealed at a few hundred MiB;
// repack outputs never exceed 1 GiB).
type Builder struct {
	k       *keys.Keys
	segID   uint64
	codec   Codec
	buf     []byte
	entries []DirEntry
	sealed  []byte // set by Finish
}

// NewBuilder starts segment segID; frames added with Add are compressed
// with c.
func NewBuilder(k *keys.Keys, segID uint64, c Codec) *Builder {
	return &Builder{k: k, segID: segID, codec: c}
}

// NewBuilderIn is NewBuilder building the segment in buf's capacity (its
// bytes are overwritten) for as long as it fits: a writer that reuses the
// buffers of segments it has uploaded does not have a new one allocated
// and cleared for every segment. Finish's object then aliases buf.
func NewBuilderIn(k *keys.Keys, segID uint64, c Codec, buf []byte) *Builder {
	return &Builder{k: k, segID: segID, codec: c, buf: buf[:0]}
}

// Grow reserves room for n more frame bytes, so a segment sealed at a
// known target size is built without reallocating.
func (b *Builder) Grow(n int) {
	if n > 0 && b.sealed == nil {
		b.buf = grow(b.buf, n)
	}
}

// SegID is the id of the segment being built.
func (b *Builder) SegID() uint64 { return b.segID }

// Add encodes plain as the frame for id, appends it, and returns its
// pointer. It panics if called after Finish or if the segment would grow
// past MaxFrameBytes (both are caller bugs, not data errors).
func (b *Builder) Add(id FrameID, plain []byte) Pointer {
	b.check(MaxFrameLen(len(plain)))
	if len(plain) > MaxPlainLen {
		panic(fmt.Sprintf("segment: Add of %d bytes, more than one extent", len(plain)))
	}
	off := len(b.buf)
	b.buf = EncodeFrame(b.buf, b.k, id, plain, b.codec)
	return b.record(id, off, len(b.buf)-off, uint32(len(plain)))
}

// sealGroup is how many consecutive frames of AddFrames share a nonce
// prefix (keys.Sealer): with XAES-256-GCM, one key derivation, AES key
// schedule and GCM setup per group rather than per frame, for the writer
// and for a reader of the run (segread.Reader decrypting a run keeps the
// key of the last prefix it saw). The pieces of one group, at most 64,
// are AES-256-GCM messages with random 96-bit nonces under the derived
// key: far inside its limits. Per frame, that setup was a visible part
// of a cold read's CPU (the figure: bench/README.md, "Figures behind the
// code's constants").
const sealGroup = 8

// SealGroupSize is how many consecutive frames of n one goroutine takes at
// a time, of workers: up to the frames sealed under one nonce prefix, and
// few enough that every worker has some.
func SealGroupSize(n, workers int) int {
	return min(max((n+workers-1)/max(workers, 1), 1), sealGroup)
}

// AddFrames encodes plains[i] as the frame for ids[i], appends the frames
// in order and returns their pointers. Up to workers goroutines compress
// and seal at once. Each frame is sealed in place, in a slot of the
// largest size it can have (MaxFrameLen of its plain length), and the
// slots are then closed up; so frames of incompressible data are never
// copied after sealing, and the buffer is sized once, with room for the
// directory and footer that Finish adds. Same panics as Add.
//
// Frames are sealed in groups of up to sealGroup consecutive ones (fewer
// when that keeps every worker busy), each group by one goroutine, whose
// pieced frames share one keys.Sealer.
func (b *Builder) AddFrames(ids []FrameID, plains [][]byte, workers int) []Pointer {
	if len(ids) != len(plains) {
		panic(fmt.Sprintf("segment: AddFrames of %d ids and %d plains", len(ids), len(plains)))
	}
	base := len(b.buf)
	slots := make([]int, len(plains)+1) // slot i is [base+slots[i], base+slots[i+1])
	for i, p := range plains {
		if len(p) > MaxPlainLen {
			panic(fmt.Sprintf("segment: Add of %d bytes, more than one extent", len(p)))
		}
		slots[i+1] = slots[i] + MaxFrameLen(len(p))
	}
	b.check(slots[len(plains)])
	tail := (len(b.entries)+len(plains))*DirEntrySize + keys.Overhead + FooterSize
	b.buf = grow(b.buf, slots[len(plains)]+tail)
	buf := b.buf[:base+slots[len(plains)]]

	frames := make([][]byte, len(plains))
	ForEachGroup(len(plains), SealGroupSize(len(plains), workers), workers, func(lo, hi int) {
		var s *keys.Sealer
		if b.k.Pieced {
			own := b.k.Data.NewSealer()
			s = &own
		}
		for i := lo; i < hi; i++ {
			lo, hi := base+slots[i], base+slots[i+1]
			frames[i] = encodeFrame(buf[lo:lo:hi], b.k, s, ids[i], plains[i], b.codec)
		}
	})

	ptrs := make([]Pointer, len(plains))
	off := base
	for i, f := range frames {
		if len(f) > slots[i+1]-slots[i] {
			panic(fmt.Sprintf("segment: frame of %d bytes outgrew its %d-byte slot", len(f), slots[i+1]-slots[i]))
		}
		// A frame never outgrows its slot, so it moves left or stays.
		if &buf[off] != &f[0] {
			copy(buf[off:], f)
		}
		ptrs[i] = b.record(ids[i], off, len(f), uint32(len(plains[i])))
		off += len(f)
	}
	b.buf = buf[:off]
	return ptrs
}

// AddEncoded appends an already encoded frame verbatim (repack). The frame
// must have been sealed for id; it is not re-authenticated here.
func (b *Builder) AddEncoded(id FrameID, frame []byte, plainLen uint32) Pointer {
	b.check(len(frame))
	off := len(b.buf)
	b.buf = append(b.buf, frame...)
	return b.record(id, off, len(frame), plainLen)
}

func (b *Builder) check(n int) {
	if b.sealed != nil {
		panic("segment: Builder used after Finish")
	}
	if uint64(len(b.buf))+uint64(n) > MaxFrameBytes {
		panic(fmt.Sprintf("segment: segment %016x would exceed %d frame bytes", b.segID, uint64(MaxFrameBytes)))
	}
}

func (b *Builder) record(id FrameID, off, n int, plainLen uint32) Pointer {
	e := DirEntry{Offset: uint32(off), Length: uint32(n), PlainLen: plainLen, Ino: id.Ino, Extent: id.Extent, Gen: id.Gen}
	b.entries = append(b.entries, e)
	return e.Pointer(b.segID)
}

// Size is the number of frame bytes so far.
func (b *Builder) Size() int { return len(b.buf) }

// Frames is the number of frames so far.
func (b *Builder) Frames() int { return len(b.entries) }

// Entries returns the directory entries so far (shared; do not modify).
func (b *Builder) Entries() []DirEntry { return b.entries }

// Encoded returns the encoded frame p points at, if p is a frame of this
// builder. The open buffer serves reads from it.
func (b *Builder) Encoded(p Pointer) ([]byte, bool) {
	if p.Segment != b.segID || p.End() > uint64(len(b.buf)) || p.Length == 0 {
		return nil, false
	}
	return b.buf[p.Offset:p.End():p.End()], true
}

// Read decodes the frame p points at from memory.
func (b *Builder) Read(id FrameID, p Pointer) ([]byte, error) {
	f, ok := b.Encoded(p)
	if !ok {
		return nil, fmt.Errorf("segment %s: pointer [%d,+%d) is not in the open segment", Key(p.Segment), p.Offset, p.Length)
	}
	out, err := DecodeFrame(b.k, id, f, int(p.PlainLen))
	if err != nil {
		return nil, &CorruptError{Key: Key(p.Segment), Offset: int64(p.Offset), Err: err}
	}
	return out, nil
}

// Finish seals the segment and returns the object bytes:
// frames || sealed directory || 64-byte footer. Later calls return the same
// bytes; Add after Finish panics.
func (b *Builder) Finish() []byte {
	if b.sealed != nil {
		return b.sealed
	}
	f := Footer{
		Version:    FormatVersion,
		SegID:      b.segID,
		DirOffset:  uint64(len(b.buf)),
		DirLen:     uint32(len(b.entries)*DirEntrySize + keys.Overhead),
		FrameCount: uint32(len(b.entries)),
		FrameBytes: uint64(len(b.buf)),
	}
	dir := sealDirectory(b.k, f, b.entries)
	n := len(b.buf)
	out := append(b.buf, dir...) // frames already in place: no copy when capacity allows
	out = append(out, f.Marshal()...)
	b.sealed = out
	b.buf = out[:n:n]
	return out
}

// ForEachGroup calls f(lo, hi) for each run [lo, hi) of up to per
// consecutive indices of [0, n), on up to workers goroutines, and returns
// when all calls have.
func ForEachGroup(n, per, workers int, f func(lo, hi int)) {
	per = max(per, 1)
	forEach((n+per-1)/per, workers, func(c int) { f(c*per, min((c+1)*per, n)) })
}

// forEach calls f(0) ... f(n-1) on up to workers goroutines and returns
// when all calls have.
func forEach(n, workers int, f func(i int)) {
	workers = max(1, min(workers, n))
	if workers == 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var g worker.Group
	for range workers {
		g.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	g.Wait()
}
