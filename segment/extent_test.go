package segment

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func testPtr(seg uint64, off, plain uint32) Pointer {
	return Pointer{Segment: seg, Offset: off, Length: plain + FrameOverhead, PlainLen: plain, Gen: seg}
}

// Values stored before patches (one 32-byte pointer) decode as the
// base-only value of that pointer, and base-only values encode as that
// pointer, byte for byte.
func TestExtentBaseOnlyIsThePointer(t *testing.T) {
	p := Pointer{Segment: 0x100000017, Offset: 4096, Length: 1000, PlainLen: ExtentSize, Gen: 3, Flags: 5}
	x, err := UnmarshalExtent(p.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if x.Patched() || x.Base != p || !x.Equal(BaseOnly(p)) {
		t.Fatalf("decoded %+v", x)
	}
	if !bytes.Equal(BaseOnly(p).Marshal(), p.Marshal()) {
		t.Fatal("a base-only value does not encode as its pointer")
	}
	if _, err := UnmarshalExtent(make([]byte, PointerSize)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a zero pointer as the whole value: %v", err)
	}
}

func TestExtentRoundTrip(t *testing.T) {
	cases := []Extent{
		{Base: testPtr(0x100000002, 0, ExtentSize), Patches: []Patch{{At: 4096, End: 8192, Ptr: testPtr(0x100000003, 100, 4096)}}},
		{Patches: []Patch{{At: 100, End: 200, Ptr: testPtr(0x100000003, 0, 50)}}},
		{Base: testPtr(0x100000002, 0, 10), Patches: []Patch{{At: 0, End: ExtentSize}}},
		{Base: testPtr(0x100000002, 0, ExtentSize), Patches: func() []Patch {
			ps := make([]Patch, MaxPatches)
			for i := range ps {
				ps[i] = Patch{At: uint32(i) * 1024, End: uint32(i)*1024 + 512, Ptr: testPtr(0x100000010+uint64(i), 7, 512)}
			}
			return ps
		}()},
	}
	for i, x := range cases {
		if err := x.Validate(); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		b := x.Marshal()
		if len(b) != extentHeaderSize+patchEntrySize*len(x.Patches) {
			t.Fatalf("case %d: %d bytes", i, len(b))
		}
		y, err := UnmarshalExtent(b)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !y.Equal(x) {
			t.Fatalf("case %d: %+v decoded as %+v", i, x, y)
		}
	}
}

func TestExtentRejects(t *testing.T) {
	good := Extent{Base: testPtr(2, 0, 100), Patches: []Patch{{At: 10, End: 20, Ptr: testPtr(3, 0, 10)}}}
	bad := map[string]func(b []byte){
		"kind":          func(b []byte) { b[PointerSize] = 2 },
		"zero count":    func(b []byte) { b[PointerSize+1] = 0 },
		"count":         func(b []byte) { b[PointerSize+1] = 2 },
		"empty range":   func(b []byte) { b[extentHeaderSize+2] = 10 },
		"past extent":   func(b []byte) { b[extentHeaderSize+3] = 0x81 },
		"long frame":    func(b []byte) { b[extentHeaderSize+4+16] = 11 },
		"bad base":      func(b []byte) { b[12] = 1 },
		"bad patch ptr": func(b []byte) { b[extentHeaderSize+4+12] = 1 },
	}
	for name, f := range bad {
		b := good.Marshal()
		f(b)
		if _, err := UnmarshalExtent(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, n := range []int{0, 31, 33, 34, 35, extentHeaderSize + patchEntrySize - 1, extentHeaderSize + patchEntrySize + 1} {
		if _, err := UnmarshalExtent(make([]byte, n)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
	tooMany := Extent{Patches: make([]Patch, MaxPatches+1)}
	for i := range tooMany.Patches {
		tooMany.Patches[i] = Patch{At: 0, End: 1}
	}
	if tooMany.Validate() == nil {
		t.Error("more than MaxPatches patches validate")
	}
}

// patchModel checks WithPatch and Assemble against a plain byte array:
// random patches (with frames and without, some covering others) are
// applied to both, and random ranges of the extent read back.
func TestExtentPatchModel(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 34))
		frames := map[Pointer][]byte{}
		nextSeg := uint64(0x100000001)
		newFrame := func(data []byte) Pointer {
			p := testPtr(nextSeg, 0, uint32(len(data)))
			nextSeg++
			frames[p] = data
			return p
		}
		model := make([]byte, ExtentSize)
		var x Extent
		if rng.IntN(4) > 0 {
			base := randBytes(rng, 1+rng.IntN(ExtentSize))
			copy(model, base)
			x = BaseOnly(newFrame(base))
		}
		live := map[Pointer]bool{}
		for p := range x.Frames() {
			live[p] = true
		}
		for step := 0; step < 12; step++ {
			at := uint32(rng.IntN(ExtentSize))
			end := at + 1 + uint32(rng.IntN(ExtentSize-int(at)))
			if rng.IntN(3) == 0 {
				at, end = 0, ExtentSize // a whole-extent patch
			}
			var p Patch
			p.At, p.End = at, end
			clear(model[at:end])
			if rng.IntN(5) > 0 {
				data := randBytes(rng, 1+rng.IntN(int(end-at)))
				copy(model[at:], data)
				p.Ptr = newFrame(data)
			}
			nx, dropped := x.WithPatch(p)
			for _, d := range dropped {
				if !live[d] {
					t.Fatalf("seed %d: dropped %v, which the value did not hold", seed, d)
				}
				delete(live, d)
			}
			if p.HasFrame() {
				live[p.Ptr] = true
			}
			for q := range nx.Frames() {
				if !live[q] {
					t.Fatalf("seed %d: value holds %v, which is not live", seed, q)
				}
			}
			if nx.FrameBytes() != sumLen(live) {
				t.Fatalf("seed %d: value holds %d frame bytes, %d are live", seed, nx.FrameBytes(), sumLen(live))
			}
			if len(nx.Patches) > MaxPatches {
				break // the writer folds before this (fs.patchLimit)
			}
			if err := nx.Validate(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			y, err := UnmarshalExtent(nx.Marshal())
			if err != nil || !y.Equal(nx) {
				t.Fatalf("seed %d: round trip: %v", seed, err)
			}
			x = nx
			for r := 0; r < 4; r++ {
				from := uint32(rng.IntN(ExtentSize))
				n := 1 + rng.IntN(ExtentSize-int(from))
				dst := bytes.Repeat([]byte{0xee}, n)
				err := x.Assemble(dst, from, func(fp Pointer, off uint32, buf []byte) error {
					data, ok := frames[fp]
					if !ok || int(off)+len(buf) > len(data) || len(buf) == 0 {
						t.Fatalf("seed %d: read of %d bytes at %d of %v", seed, len(buf), off, fp)
					}
					copy(buf, data[off:])
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst, model[from:int(from)+n]) {
					t.Fatalf("seed %d step %d: bytes [%d,+%d) differ from the model", seed, step, from, n)
				}
			}
		}
	}
}

// A read that a newer patch covers whole reads only that patch.
func TestExtentAssembleReadsOnlyWhatShows(t *testing.T) {
	base := testPtr(1, 0, ExtentSize)
	patch := testPtr(2, 0, 4096)
	x := Extent{Base: base, Patches: []Patch{{At: 8192, End: 12288, Ptr: patch}}}
	var asked []Pointer
	read := func(p Pointer, off uint32, buf []byte) error {
		asked = append(asked, p)
		return nil
	}
	if err := x.Assemble(make([]byte, 4096), 8192, read); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != patch {
		t.Fatalf("read %v", asked)
	}
	asked = nil
	if err := x.Assemble(make([]byte, 100), 0, read); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != base {
		t.Fatalf("read %v", asked)
	}
}

func TestExtentReplace(t *testing.T) {
	a, b, c := testPtr(1, 0, 100), testPtr(2, 0, 10), testPtr(3, 64, 10)
	x := Extent{Base: a, Patches: []Patch{{At: 5, End: 15, Ptr: b}}}
	y, ok := x.Replace(b, c)
	if !ok || y.Patches[0].Ptr != c || y.Base != a || x.Patches[0].Ptr != b {
		t.Fatalf("replace: %+v %v (original %+v)", y, ok, x)
	}
	if _, ok := x.Replace(c, a); ok {
		t.Fatal("replaced a frame the value does not hold")
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func sumLen(m map[Pointer]bool) int64 {
	var n int64
	for p := range m {
		n += int64(p.Length)
	}
	return n
}

func FuzzUnmarshalExtent(f *testing.F) {
	f.Add(testPtr(0x100000017, 0, ExtentSize).Marshal())
	f.Add(Extent{Base: testPtr(2, 0, 100), Patches: []Patch{{At: 10, End: 20, Ptr: testPtr(3, 0, 10)}, {At: 0, End: 5}}}.Marshal())
	f.Add(Extent{Patches: []Patch{{At: 1, End: ExtentSize, Ptr: testPtr(3, 0, 10)}}}.Marshal())
	f.Add(make([]byte, extentHeaderSize+patchEntrySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := UnmarshalExtent(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if !bytes.Equal(x.Marshal(), b) {
			t.Fatalf("accepted %x re-encodes as %x", b, x.Marshal())
		}
		// Assembling any accepted value asks only for bytes its frames hold.
		dst := make([]byte, ExtentSize)
		_ = x.Assemble(dst, 0, func(p Pointer, off uint32, buf []byte) error {
			if len(buf) == 0 || uint64(off)+uint64(len(buf)) > uint64(p.PlainLen) {
				t.Fatalf("read of %d bytes at %d of a frame of %d", len(buf), off, p.PlainLen)
			}
			return nil
		})
	})
}
