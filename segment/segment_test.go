package segment

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
)

func TestBuilderFinishParse(t *testing.T) {
	k := testKeys(t)
	for _, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
		data, ids, plains, ps := buildSegment(t, k, 0x1234, c, 9)
		f, err := ParseFooter(data[len(data)-FooterSize:])
		if err != nil {
			t.Fatal(err)
		}
		if f.SegID != 0x1234 || f.FrameCount != 9 || f.ObjectSize() != int64(len(data)) {
			t.Fatalf("footer %+v for %d bytes", f, len(data))
		}
		ents, err := ParseDirectory(k, f, data[f.DirOffset:f.DirOffset+uint64(f.DirLen)])
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != len(ps) {
			t.Fatalf("%d entries, want %d", len(ents), len(ps))
		}
		for i, e := range ents {
			if e.Pointer(0x1234) != ps[i] || e.ID() != ids[i] {
				t.Fatalf("entry %d = %+v, pointer %+v id %+v", i, e, ps[i], ids[i])
			}
			got, err := DecodeFrame(k, e.ID(), data[e.Offset:uint64(e.Offset)+uint64(e.Length)], int(e.PlainLen))
			if err != nil || !bytes.Equal(got, plains[i]) {
				t.Fatalf("frame %d: %v", i, err)
			}
		}
	}
}

func TestBuilderEmptyAndEncoded(t *testing.T) {
	k := testKeys(t)
	b := NewBuilder(k, 5, CodecLZ4)
	data := b.Finish()
	if len(data) != keyOverhead()+FooterSize {
		t.Fatalf("empty segment is %d bytes", len(data))
	}
	if !bytes.Equal(b.Finish(), data) {
		t.Fatal("second Finish differs")
	}
	f, err := ParseFooter(data[len(data)-FooterSize:])
	if err != nil {
		t.Fatal(err)
	}
	if ents, err := ParseDirectory(k, f, data[:len(data)-FooterSize]); err != nil || len(ents) != 0 {
		t.Fatalf("%v %v", ents, err)
	}

	// Repack: copy frames verbatim into another segment; they still open.
	src, ids, plains, ps := buildSegment(t, k, 6, CodecZstd, 4)
	out := NewBuilder(k, 7, CodecZstd)
	var np []Pointer
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		q := out.AddEncoded(ids[i], src[p.Offset:p.End()], p.PlainLen)
		if q.Length != p.Length || q.PlainLen != p.PlainLen || q.Gen != p.Gen || q.Segment != 7 {
			t.Fatalf("AddEncoded pointer %+v from %+v", q, p)
		}
		np = append(np, q)
		got, err := out.Read(ids[i], q)
		if err != nil || !bytes.Equal(got, plains[i]) {
			t.Fatalf("open-buffer read: %v", err)
		}
	}
	seg := out.Finish()
	for j, q := range np {
		i := len(ps) - 1 - j
		got, err := DecodeFrame(k, ids[i], seg[q.Offset:q.End()], int(q.PlainLen))
		if err != nil || !bytes.Equal(got, plains[i]) {
			t.Fatalf("copied frame %d: %v", i, err)
		}
	}
	if out.Frames() != 4 || out.Size() != int(np[3].End()) {
		t.Fatalf("Frames %d Size %d", out.Frames(), out.Size())
	}
}

func keyOverhead() int { return FrameOverhead - 1 }

// Every single flipped byte anywhere in a segment is detected: by the
// footer checksum, the directory AEAD, or the frame AEAD.
func TestSegmentFlippedByteAnywhere(t *testing.T) {
	k := testKeys(t)
	const segID = 0xabc
	// Small frames (one compressed, one raw, one empty) so every byte can
	// be flipped quickly.
	bld := NewBuilder(k, segID, CodecLZ4)
	plains := [][]byte{textExtent(1, 700), randomExtent(300), {}}
	var ps []Pointer
	for i, p := range plains {
		ps = append(ps, bld.Add(FrameID{Ino: 5, Extent: uint64(i), Gen: 2}, p))
	}
	data := bld.Finish()
	mem := objstore.NewMem()
	ctx := context.Background()
	// verify returns an error if any part of the segment fails to verify,
	// nil if all frames decode to the expected plaintext.
	verify := func(obj []byte) error {
		if _, err := mem.Put(ctx, Key(segID), obj, objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		_, ents, err := ReadDirectoryVia(ctx, mem.GetRange, k, segID, int64(len(obj)), discardLogger())
		if err != nil {
			return err
		}
		for i, e := range ents {
			got, err := DecodeFrame(k, e.ID(), obj[e.Offset:uint64(e.Offset)+uint64(e.Length)], int(e.PlainLen))
			if err != nil {
				return err
			}
			if !bytes.Equal(got, plains[i]) || e.Pointer(segID) != ps[i] {
				t.Fatalf("wrong data accepted for frame %d", i)
			}
		}
		return nil
	}
	if err := verify(data); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(data); i++ {
		g := bytes.Clone(data)
		g[i] ^= 1 << (i % 8)
		err := verify(g)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at %d of %d: err %v", i, len(data), err)
		}
	}
}

func TestFooterValidation(t *testing.T) {
	good := Footer{Version: FormatVersion, SegID: 9, DirOffset: 1000, DirLen: 3*DirEntrySize + uint32(keyOverhead()), FrameCount: 3, FrameBytes: 1000}
	b := good.Marshal()
	if len(b) != FooterSize || string(b[:8]) != "EBBFSSEG" {
		t.Fatalf("footer % x", b)
	}
	if f, err := ParseFooter(b); err != nil || f != good {
		t.Fatalf("%+v %v", f, err)
	}
	bads := map[string]Footer{
		"version":  {Version: 2, SegID: 9, DirOffset: 1000, DirLen: good.DirLen, FrameCount: 3, FrameBytes: 1000},
		"dirOff":   {Version: 1, SegID: 9, DirOffset: 999, DirLen: good.DirLen, FrameCount: 3, FrameBytes: 1000},
		"dirLen":   {Version: 1, SegID: 9, DirOffset: 1000, DirLen: good.DirLen + 1, FrameCount: 3, FrameBytes: 1000},
		"tooMany":  {Version: 1, SegID: 9, DirOffset: 100, DirLen: good.DirLen, FrameCount: 3, FrameBytes: 100},
		"tooLarge": {Version: 1, SegID: 9, DirOffset: 1 << 33, DirLen: good.DirLen, FrameCount: 3, FrameBytes: 1 << 33},
	}
	for name, f := range bads {
		if _, err := ParseFooter(f.Marshal()); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: accepted", name)
		}
	}
	r := bytes.Clone(b)
	r[50] = 1
	if _, err := ParseFooter(r); !errors.Is(err, ErrCorrupt) {
		t.Error("bad checksum accepted")
	}
	if _, err := ParseFooter(b[:63]); !errors.Is(err, ErrCorrupt) {
		t.Error("short footer accepted")
	}
}

// AddFrames seals frames in parallel and in place: mixed compressible,
// incompressible, short and empty extents, added after a frame from Add
// and followed by another, come out contiguous, in order, each decoding to
// its plaintext, and the sealed segment parses with the same entries.
func TestBuilderAddFrames(t *testing.T) {
	k := testKeys(t)
	for _, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
		for _, workers := range []int{1, 3} {
			b := NewBuilder(k, 0x77, c)
			first := textExtent(1, ExtentSize)
			ps := []Pointer{b.Add(FrameID{Ino: 9, Extent: 0, Gen: 1}, first)}
			plains := [][]byte{first}
			ids := []FrameID{{Ino: 9, Extent: 0, Gen: 1}}
			var batchIDs []FrameID
			var batch [][]byte
			for i := range 40 {
				var p []byte
				switch i % 5 {
				case 0:
					p = randomExtent(ExtentSize)
				case 1:
					p = textExtent(uint64(i), ExtentSize)
				case 2:
					p = randomExtent(1 + i*100)
				case 3:
					p = nil
				case 4:
					p = bytes.Repeat([]byte{byte(i)}, ExtentSize)
				}
				batchIDs = append(batchIDs, FrameID{Ino: 10 + uint64(i%3), Extent: uint64(i), Gen: 0x77})
				batch = append(batch, p)
			}
			got := b.AddFrames(batchIDs, batch, workers)
			if len(got) != len(batch) {
				t.Fatalf("%d pointers for %d frames", len(got), len(batch))
			}
			ps, ids, plains = append(ps, got...), append(ids, batchIDs...), append(plains, batch...)
			last := textExtent(99, 1000)
			ps = append(ps, b.Add(FrameID{Ino: 9, Extent: 1, Gen: 1}, last))
			ids, plains = append(ids, FrameID{Ino: 9, Extent: 1, Gen: 1}), append(plains, last)

			var end uint64
			for i, p := range ps {
				if uint64(p.Offset) != end || p.Segment != 0x77 || p.PlainLen != uint32(len(plains[i])) {
					t.Fatalf("%v workers %d: pointer %d = %+v, want offset %d", c, workers, i, p, end)
				}
				end = p.End()
				got, err := b.Read(ids[i], p) // the open buffer serves reads
				if err != nil || !bytes.Equal(got, plains[i]) {
					t.Fatalf("%v workers %d: open-buffer read of frame %d: %v", c, workers, i, err)
				}
			}
			if b.Size() != int(end) || b.Frames() != len(ps) {
				t.Fatalf("Size %d Frames %d; want %d, %d", b.Size(), b.Frames(), end, len(ps))
			}
			data := b.Finish()
			f, err := ParseFooter(data[len(data)-FooterSize:])
			if err != nil {
				t.Fatal(err)
			}
			ents, err := ParseDirectory(k, f, data[f.DirOffset:f.DirOffset+uint64(f.DirLen)])
			if err != nil || len(ents) != len(ps) {
				t.Fatalf("directory: %d entries, %v", len(ents), err)
			}
			for i, e := range ents {
				if e.Pointer(0x77) != ps[i] || e.ID() != ids[i] {
					t.Fatalf("entry %d = %+v; pointer %+v id %+v", i, e, ps[i], ids[i])
				}
				dec, err := DecodeFrame(k, e.ID(), data[e.Offset:uint64(e.Offset)+uint64(e.Length)], int(e.PlainLen))
				if err != nil || !bytes.Equal(dec, plains[i]) {
					t.Fatalf("%v workers %d: frame %d: %v", c, workers, i, err)
				}
			}
		}
	}
}

// TestBuilderSealGroups: under either cipher, the pieced frames of one
// AddFrames call share their nonce prefix in groups of sealGroup
// consecutive frames, and only there; every piece's own 12 nonce bytes
// differ; and a reader decrypting the run with one Opener per goroutine
// (decodeEach, which keeps the key derived for a group) or one per frame
// reads them all.
func TestBuilderSealGroups(t *testing.T) {
	for _, ci := range bothCiphers {
		t.Run(string(ci), func(t *testing.T) { testSealGroups(t, cipherKeys(t, ci)) })
	}
}

func testSealGroups(t *testing.T, k *keys.Keys) {
	b := NewBuilder(k, 0x78, CodecLZ4)
	const n = 3*sealGroup + 3
	ids := make([]FrameID, n)
	plains := make([][]byte, n)
	for i := range n {
		ids[i] = FrameID{Ino: 5, Extent: uint64(i), Gen: 1}
		plains[i] = randomExtent(ExtentSize) // incompressible: pieced
	}
	ps := b.AddFrames(ids, plains, 1) // one worker: groups of sealGroup
	data := b.Finish()
	prefix := func(i, piece int) []byte {
		at := int(ps[i].Offset) + piece*(PieceSize+PieceOverhead)
		return data[at : at+12]
	}
	own := map[string]bool{}
	for i := range n {
		if !Pieced(int(ps[i].Length), int(ps[i].PlainLen)) {
			t.Fatalf("frame %d is not pieced", i)
		}
		for piece := range pieceCount(ExtentSize) {
			if !bytes.Equal(prefix(i, piece), prefix(i-i%sealGroup, 0)) {
				t.Fatalf("frame %d piece %d: nonce prefix differs from its group's", i, piece)
			}
			at := int(ps[i].Offset) + piece*(PieceSize+PieceOverhead)
			key := string(data[at+12 : at+24])
			if own[key] {
				t.Fatalf("frame %d piece %d: nonce bytes repeated", i, piece)
			}
			own[key] = true
		}
		if i%sealGroup == 0 && i > 0 && bytes.Equal(prefix(i, 0), prefix(i-1, 0)) {
			t.Fatalf("frame %d starts a group but shares the previous group's prefix", i)
		}
	}
	for _, workers := range []int{1, 2, 0} { // 0: an Opener per frame
		got := make([][]byte, n)
		errs := make([]error, n)
		decode := func(o *keys.Opener, j int) {
			got[j], errs[j] = DecodeFrameWith(nil, k, o, ids[j], data[ps[j].Offset:ps[j].End()], ExtentSize)
		}
		if workers == 0 {
			for j := range n {
				decode(nil, j)
			}
		} else { // as segread's reader does: an Opener per group
			chunk := n
			if workers > 1 {
				chunk = SealGroupSize(n, workers)
			}
			ForEachGroup(n, chunk, workers, func(lo, hi int) {
				o := k.Data.NewOpener()
				for j := lo; j < hi; j++ {
					decode(&o, j)
				}
			})
		}
		for j := range n {
			if errs[j] != nil || !bytes.Equal(got[j], plains[j]) {
				t.Fatalf("workers %d: frame %d: %v", workers, j, errs[j])
			}
		}
	}
	// With two workers, a batch of 8 frames is two groups of 4 (both
	// workers busy), sharing nothing across.
	b2 := NewBuilder(k, 0x79, CodecLZ4)
	ps2 := b2.AddFrames(ids[:8], plains[:8], 2)
	data2 := b2.Finish()
	at := func(i int) []byte { return data2[ps2[i].Offset : ps2[i].Offset+12] }
	if !bytes.Equal(at(0), at(3)) || !bytes.Equal(at(4), at(7)) || bytes.Equal(at(3), at(4)) {
		t.Fatal("8 frames on 2 workers are not sealed as two groups of 4")
	}
}

// TestBuilderIn: a segment built in a given buffer with room for it is
// built there (Finish's object is that memory), whatever the buffer held.
func TestBuilderIn(t *testing.T) {
	k := testKeys(t)
	buf := bytes.Repeat([]byte{0xee}, 1<<20)
	b := NewBuilderIn(k, 0x7a, CodecLZ4, buf)
	ids := []FrameID{{Ino: 1, Extent: 0, Gen: 1}, {Ino: 1, Extent: 1, Gen: 1}}
	plains := [][]byte{randomExtent(ExtentSize), textExtent(3, ExtentSize)}
	ps := b.AddFrames(ids, plains, 2)
	obj := b.Finish()
	if &obj[0] != &buf[0] {
		t.Fatal("the segment was not built in the buffer given")
	}
	for i, p := range ps {
		got, err := DecodeFrame(k, ids[i], obj[p.Offset:p.End()], int(p.PlainLen))
		if err != nil || !bytes.Equal(got, plains[i]) {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if f, err := ParseFooter(obj[len(obj)-FooterSize:]); err != nil || f.ObjectSize() != int64(len(obj)) {
		t.Fatalf("footer %+v, %v", f, err)
	}
}
