package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// The fuzz targets check that parsers return errors (wrapping ErrCorrupt)
// on any input, never panic, and that whatever they accept re-encodes to
// the same bytes. Where authentication would stop the fuzzer at the door,
// a "seal" switch seals the fuzzed bytes with the right key and AAD first,
// so the validation behind the AEAD (directory entries, decompression) is
// fuzzed too.

func FuzzUnmarshalPointer(f *testing.F) {
	f.Add(Pointer{Segment: 0x100000017, Offset: 0, Length: 1000, PlainLen: ExtentSize, Gen: 3}.Marshal())
	f.Add(Pointer{Segment: 1, Offset: 1 << 31, Length: ExtentSize + FrameOverhead, PlainLen: ExtentSize, Gen: 1, Flags: 5}.Marshal())
	f.Add(make([]byte, 32))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := UnmarshalPointer(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if !bytes.Equal(p.Marshal(), b) {
			t.Fatalf("accepted %x re-encodes as %x", b, p.Marshal())
		}
	})
}

func validSegments() [][]byte {
	k := fixedKeys()
	var out [][]byte
	for n, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
		b := NewBuilder(k, uint64(0x100+n), c)
		for i := 0; i < n+1; i++ {
			b.Add(FrameID{Ino: 9, Extent: uint64(i), Gen: 1}, textExtent(uint64(i), 200*(i+1)))
		}
		out = append(out, b.Finish())
	}
	out = append(out, NewBuilder(k, 7, CodecNone).Finish())
	return out
}

func FuzzParseFooter(f *testing.F) {
	for _, s := range validSegments() {
		f.Add(s[len(s)-FooterSize:], false)
		f.Add(s[len(s)-FooterSize:], true)
	}
	f.Add(make([]byte, FooterSize), true)
	f.Add([]byte("EBBFSSEG"), false)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC && len(b) == FooterSize {
			// Recompute the checksum so the field checks behind it are fuzzed.
			b = binary.LittleEndian.AppendUint32(bytes.Clone(b[:60]), crc32.Checksum(b[:60], crcTable))
		}
		foot, err := ParseFooter(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if !bytes.Equal(foot.Marshal(), b) {
			t.Fatalf("accepted footer re-encodes differently")
		}
		if foot.ObjectSize() < FooterSize || uint64(foot.FrameCount)*FrameOverhead > foot.FrameBytes {
			t.Fatalf("accepted inconsistent footer %+v", foot)
		}
	})
}

func FuzzParseDirectory(f *testing.F) {
	k := fixedKeys()
	for _, s := range validSegments() {
		foot, err := ParseFooter(s[len(s)-FooterSize:])
		if err != nil {
			f.Fatal(err)
		}
		dir := s[foot.DirOffset : foot.DirOffset+uint64(foot.DirLen)]
		f.Add(s[len(s)-FooterSize:], dir, false)
		plain, err := k.Data.Open(dirAAD(k.UUID, foot), dir)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(s[len(s)-FooterSize:], plain, true)
	}
	f.Fuzz(func(t *testing.T, footer, dir []byte, seal bool) {
		foot, err := ParseFooter(footer)
		if err != nil {
			return
		}
		if seal {
			dir = k.Data.Seal(dirAAD(k.UUID, foot), dir)
		}
		ents, err := ParseDirectory(k, foot, dir)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if len(ents) != int(foot.FrameCount) {
			t.Fatalf("%d entries for %d frames", len(ents), foot.FrameCount)
		}
		var next uint64
		for _, e := range ents {
			if uint64(e.Offset) != next || e.Length < FrameOverhead {
				t.Fatalf("accepted bad entry %+v", e)
			}
			next += uint64(e.Length)
		}
		if next != foot.FrameBytes {
			t.Fatalf("entries cover %d of %d bytes", next, foot.FrameBytes)
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	k := fixedKeys()
	id := FrameID{Ino: 3, Extent: 4, Gen: 5}
	for _, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
		for _, p := range [][]byte{textExtent(1, 3000), randomExtent(100), {}} {
			fr := EncodeFrame(nil, k, id, p, c)
			f.Add(fr, len(p), false)
			var ab [frameAADLen]byte
			inner, err := k.Data.Open(frameAAD(&ab, k.UUID, id), fr)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(inner, len(p), true)
		}
	}
	// Pieced frames: whole, and with a piece cut short.
	for _, n := range []int{PieceSize + 1, 3 * PieceSize} {
		fr := EncodeFrame(nil, k, id, randomExtent(n), CodecNone)
		f.Add(fr, n, false)
		f.Add(fr[:len(fr)-1], n, false)
	}
	f.Fuzz(func(t *testing.T, frame []byte, plainLen int, seal bool) {
		if seal {
			var ab [frameAADLen]byte
			frame = k.Data.Seal(frameAAD(&ab, k.UUID, id), frame)
		}
		out, err := DecodeFrame(k, id, frame, plainLen)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			if out != nil {
				t.Fatal("data returned with an error")
			}
			return
		}
		if len(out) != plainLen {
			t.Fatalf("%d bytes for plain length %d", len(out), plainLen)
		}
		if !seal {
			if VerifyFrame(k, id, frame, plainLen) != nil {
				t.Fatal("DecodeFrame accepts what VerifyFrame refuses")
			}
		}
	})
}
