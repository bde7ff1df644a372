package segment

import (
	"encoding/binary"
	"fmt"
	"iter"
)

// An extent's value in the metadata store (docs/FORMAT.md, "Extent
// value"; design: docs/PATCHES.md) is either one 32-byte Pointer, the
// frame holding the whole extent (the form every value had before
// patches), or a base and a list of patches:
//
//	base pointer (32; all zero: no base, zeroes) || kind u8 = 1 || count u8 (1..MaxPatches)
//	count × ( at u16 LE || end u16 LE || pointer (32; all zero: zeroes, no frame) )
//
// The extent's bytes are the base's (zeroes past its PlainLen) with each
// patch painted over them, oldest first: the newest wins where patches
// overlap. A patch's frame holds the bytes [At, At+PlainLen); the rest of
// [At, End) is zeroes. The two forms have different lengths (32, and
// 34 + 36n), so values stored before patches decode as they did.

// MaxPatches is the most patches an extent value may hold.
const MaxPatches = 16

// Extent value layout.
const (
	extentKindPatches = 1
	patchEntrySize    = 4 + PointerSize
	extentHeaderSize  = PointerSize + 2
)

// Patch is the bytes [At, End) of an extent, newer than the base and the
// patches before it in its value.
type Patch struct {
	At, End uint32
	// Ptr is the frame holding bytes [At, At+Ptr.PlainLen); the zero
	// Pointer means the whole range is zeroes and no frame holds it.
	Ptr Pointer
}

// HasFrame reports whether a frame holds the patch's bytes.
func (p Patch) HasFrame() bool { return p.Ptr != Pointer{} }

// Extent is a decoded extent value.
type Extent struct {
	// Base is the frame holding the extent's bytes from 0 (zeroes past
	// its PlainLen); the zero Pointer (only in a value with patches)
	// means there is none: zeroes below the patches.
	Base Pointer
	// Patches paint over the base, oldest first. Nil for a base-only
	// value.
	Patches []Patch
}

// BaseOnly is the value of an extent held whole by the frame p.
func BaseOnly(p Pointer) Extent { return Extent{Base: p} }

// Patched reports whether the value has patches.
func (x Extent) Patched() bool { return len(x.Patches) > 0 }

// HasBase reports whether a frame holds the extent's base.
func (x Extent) HasBase() bool { return x.Base != Pointer{} }

// Frames yields every frame the value references (its pieces): the base
// first, then the patches' frames in order.
func (x Extent) Frames() iter.Seq[Pointer] {
	return func(yield func(Pointer) bool) {
		if x.HasBase() && !yield(x.Base) {
			return
		}
		for _, p := range x.Patches {
			if p.HasFrame() && !yield(p.Ptr) {
				return
			}
		}
	}
}

// NewestGen is the highest write generation among the value's frames (0
// if it has none): a range tombstone whose mark is above it was written
// after every piece of the value.
func (x Extent) NewestGen() uint64 {
	var g uint64
	for p := range x.Frames() {
		g = max(g, p.Gen)
	}
	return g
}

// FrameBytes is the sum of the lengths of the value's frames: what it
// holds live in segment counters.
func (x Extent) FrameBytes() int64 {
	var n int64
	for p := range x.Frames() {
		n += int64(p.Length)
	}
	return n
}

// End is where the value's stored bytes end: past it the extent reads as
// zeroes.
func (x Extent) End() uint32 {
	end := x.Base.PlainLen
	for _, p := range x.Patches {
		end = max(end, p.End)
	}
	return end
}

// Equal reports whether x and y are the same value.
func (x Extent) Equal(y Extent) bool {
	if x.Base != y.Base || len(x.Patches) != len(y.Patches) {
		return false
	}
	for i := range x.Patches {
		if x.Patches[i] != y.Patches[i] {
			return false
		}
	}
	return true
}

// Replace returns the value with the frame old replaced by new wherever
// it appears (a repack's move), and whether it appeared.
func (x Extent) Replace(old, new Pointer) (Extent, bool) {
	found := false
	out := Extent{Base: x.Base}
	if x.HasBase() && x.Base == old {
		out.Base, found = new, true
	}
	if len(x.Patches) > 0 {
		out.Patches = make([]Patch, len(x.Patches))
		for i, p := range x.Patches {
			if p.HasFrame() && p.Ptr == old {
				p.Ptr, found = new, true
			}
			out.Patches[i] = p
		}
	}
	return out, found
}

// Validate reports whether x can be encoded: a base-only value needs a
// valid base; a patched one at most MaxPatches patches, each a valid
// non-empty range of the extent whose frame (if any) fits in it.
func (x Extent) Validate() error {
	if !x.Patched() {
		return x.Base.Validate()
	}
	if len(x.Patches) > MaxPatches {
		return fmt.Errorf("extent: %d patches, at most %d", len(x.Patches), MaxPatches)
	}
	if x.HasBase() {
		if err := x.Base.Validate(); err != nil {
			return fmt.Errorf("extent base: %w", err)
		}
	}
	for i, p := range x.Patches {
		if p.At >= p.End || p.End > MaxPlainLen {
			return fmt.Errorf("extent: patch %d covers [%d,%d)", i, p.At, p.End)
		}
		if !p.HasFrame() {
			continue
		}
		if err := p.Ptr.Validate(); err != nil {
			return fmt.Errorf("extent: patch %d: %w", i, err)
		}
		if p.Ptr.PlainLen == 0 || p.Ptr.PlainLen > p.End-p.At {
			return fmt.Errorf("extent: patch %d of [%d,%d) holds %d bytes", i, p.At, p.End, p.Ptr.PlainLen)
		}
	}
	return nil
}

// Marshal returns the encoding of x (which must be valid).
func (x Extent) Marshal() []byte {
	if !x.Patched() {
		return x.Base.Marshal()
	}
	b := make([]byte, 0, extentHeaderSize+patchEntrySize*len(x.Patches))
	b = x.Base.AppendTo(b)
	b = append(b, extentKindPatches, byte(len(x.Patches)))
	for _, p := range x.Patches {
		b = binary.LittleEndian.AppendUint16(b, uint16(p.At))
		b = binary.LittleEndian.AppendUint16(b, uint16(p.End))
		b = p.Ptr.AppendTo(b)
	}
	return b
}

// UnmarshalExtent decodes and validates an extent value of either form.
func UnmarshalExtent(b []byte) (Extent, error) {
	if len(b) == PointerSize {
		p, err := UnmarshalPointer(b)
		return Extent{Base: p}, err
	}
	if len(b) < extentHeaderSize+patchEntrySize || (len(b)-extentHeaderSize)%patchEntrySize != 0 {
		return Extent{}, fmt.Errorf("extent: value of %d bytes: %w", len(b), ErrCorrupt)
	}
	n := int(b[PointerSize+1])
	if b[PointerSize] != extentKindPatches || n == 0 || len(b) != extentHeaderSize+patchEntrySize*n {
		return Extent{}, fmt.Errorf("extent: value of %d bytes, kind %d, %d patches: %w", len(b), b[PointerSize], n, ErrCorrupt)
	}
	x := Extent{Base: rawPointer(b), Patches: make([]Patch, n)}
	for i := range x.Patches {
		e := b[extentHeaderSize+patchEntrySize*i:]
		x.Patches[i] = Patch{
			At:  uint32(binary.LittleEndian.Uint16(e)),
			End: uint32(binary.LittleEndian.Uint16(e[2:])),
			Ptr: rawPointer(e[4:]),
		}
	}
	if err := x.Validate(); err != nil {
		return Extent{}, fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	return x, nil
}

// rawPointer decodes 32 bytes as a Pointer without validating it.
func rawPointer(b []byte) Pointer {
	return Pointer{
		Segment:  binary.LittleEndian.Uint64(b[0:]),
		Offset:   binary.LittleEndian.Uint32(b[8:]),
		Length:   binary.LittleEndian.Uint32(b[12:]),
		PlainLen: binary.LittleEndian.Uint32(b[16:]),
		Gen:      binary.LittleEndian.Uint64(b[20:]),
		Flags:    binary.LittleEndian.Uint32(b[28:]),
	}
}

// WithPatch returns the value with patch p appended as the newest piece,
// and the frames it no longer needs: every older piece that the newer
// patches cover whole (the base when they cover [0, PlainLen)). A value
// left with no base and one patch from 0 with a frame is the base-only
// value of that frame (the same bytes). The result may hold more than
// MaxPatches patches; the caller checks (Validate).
func (x Extent) WithPatch(p Patch) (Extent, []Pointer) {
	all := make([]Patch, 0, len(x.Patches)+1)
	all = append(append(all, x.Patches...), p)
	var dropped []Pointer
	base := x.Base
	if x.HasBase() && covered(0, base.PlainLen, all) {
		dropped = append(dropped, base)
		base = Pointer{}
	}
	kept := make([]Patch, 0, len(all))
	for i, q := range all {
		if i < len(all)-1 && covered(q.At, q.End, all[i+1:]) {
			if q.HasFrame() {
				dropped = append(dropped, q.Ptr)
			}
			continue
		}
		kept = append(kept, q)
	}
	if base == (Pointer{}) && len(kept) == 1 && kept[0].At == 0 && kept[0].HasFrame() {
		return Extent{Base: kept[0].Ptr}, dropped
	}
	return Extent{Base: base, Patches: kept}, dropped
}

// covered reports whether the union of the patches' ranges covers
// [from, to).
func covered(from, to uint32, ps []Patch) bool {
	for from < to {
		next := from
		for _, q := range ps {
			if q.At <= from && q.End > next {
				next = q.End
			}
		}
		if next == from {
			return false
		}
		from = next
	}
	return true
}

// Assemble writes the extent's bytes [from, from+len(dst)) into dst:
// zeroes, then each piece's part of the range that the newer patches do
// not cover whole, oldest first. read fills buf with the plaintext bytes
// [off, off+len(buf)) of frame p (0 <= off, off+len(buf) <= p.PlainLen);
// an error from it ends Assemble. Only the parts of frames the range
// needs are asked for.
func (x Extent) Assemble(dst []byte, from uint32, read func(p Pointer, off uint32, buf []byte) error) error {
	to := from + uint32(len(dst))
	clear(dst)
	paint := func(p Pointer, at, end uint32, newer []Patch) error {
		lo, hi := max(from, at), min(to, end)
		if lo >= hi || covered(lo, hi, newer) {
			return nil
		}
		// The frame's bytes, then zeroes to end (dst is clear, but an
		// older piece may have painted there).
		fend := min(hi, at+p.PlainLen)
		if p == (Pointer{}) {
			fend = lo
		}
		if lo < fend {
			if err := read(p, lo-at, dst[lo-from:fend-from]); err != nil {
				return err
			}
		}
		if fend < hi {
			clear(dst[max(lo, fend)-from : hi-from])
		}
		return nil
	}
	if x.HasBase() {
		if err := paint(x.Base, 0, x.Base.PlainLen, x.Patches); err != nil {
			return err
		}
	}
	for i, q := range x.Patches {
		if err := paint(q.Ptr, q.At, q.End, x.Patches[i+1:]); err != nil {
			return err
		}
	}
	return nil
}
