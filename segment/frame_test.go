package segment

import (
	"bytes"
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
)

func TestFrameRoundtripAllCodecs(t *testing.T) {
	k := testKeys(t)
	id := FrameID{Ino: 42, Extent: 3, Gen: 9}
	cases := map[string][]byte{
		"text":   textExtent(1, ExtentSize),
		"random": randomExtent(ExtentSize),
		"zeros":  make([]byte, ExtentSize),
		"short":  textExtent(2, 100),
		"one":    {0x5a},
		"empty":  {},
	}
	for _, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
		for name, plain := range cases {
			t.Run(c.String()+"/"+name, func(t *testing.T) {
				f := EncodeFrame(nil, k, id, plain, c)
				got, err := DecodeFrame(k, id, f, len(plain))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, plain) {
					t.Fatal("plaintext differs")
				}
				if len(f) > MaxFrameLen(len(plain)) {
					t.Fatalf("frame %d bytes for %d plain bytes", len(f), len(plain))
				}
				if err := (Pointer{Length: uint32(len(f)), PlainLen: uint32(len(plain))}).Validate(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// innerCodec opens a frame of plainLen bytes and returns the codec byte
// it was stored with (a pieced frame: none) and its payload's length.
func innerCodec(t *testing.T, k *keys.Keys, id FrameID, f []byte, plainLen int) (Codec, int) {
	t.Helper()
	if Pieced(len(f), plainLen) {
		if _, err := DecodeFrame(k, id, f, plainLen); err != nil {
			t.Fatal(err)
		}
		return CodecNone, plainLen
	}
	var ab [frameAADLen]byte
	inner, err := k.Data.Open(frameAAD(&ab, k.UUID, id), f)
	if err != nil {
		t.Fatal(err)
	}
	return Codec(inner[0]), len(inner) - 1
}

func TestFrameCompressionChoice(t *testing.T) {
	k := testKeys(t)
	id := FrameID{Ino: 1, Extent: 2, Gen: 3}
	text := textExtent(5, ExtentSize)
	random := randomExtent(ExtentSize)
	for _, c := range []Codec{CodecLZ4, CodecZstd} {
		f := EncodeFrame(nil, k, id, text, c)
		got, n := innerCodec(t, k, id, f, len(text))
		if got != c || n >= len(text)/2 {
			t.Errorf("%v on text: stored as %v with %d payload bytes", c, got, n)
		}
		f = EncodeFrame(nil, k, id, random, c)
		got, n = innerCodec(t, k, id, f, len(random))
		if got != CodecNone || n != len(random) {
			t.Errorf("%v on random data: stored as %v with %d bytes, want raw", c, got, n)
		}
		if len(f) != PiecedLen(len(random)) {
			t.Errorf("%v on random data: frame %d bytes, want %d (pieced)", c, len(f), PiecedLen(len(random)))
		}
	}
	f := EncodeFrame(nil, k, id, text, CodecNone)
	if got, _ := innerCodec(t, k, id, f, len(text)); got != CodecNone {
		t.Errorf("CodecNone stored as %v", got)
	}
	// LZ4's early abort samples start, middle and end: an extent that
	// compresses anywhere among them is still compressed.
	for name, p := range map[string][]byte{
		"random head":   append(randomExtent(ExtentSize/2), text[:ExtentSize/2]...),
		"random tail":   append(append([]byte(nil), text[:ExtentSize-4096]...), randomExtent(4096)...),
		"text middle":   append(append(randomExtent(14<<10), text[:4<<10]...), randomExtent(14<<10)...),
		"short text":    text[:8<<10],
		"repeated 4KiB": bytes.Repeat(randomExtent(4096), 8),
	} {
		f := EncodeFrame(nil, k, id, p, CodecLZ4)
		if got, n := innerCodec(t, k, id, f, len(p)); got != CodecLZ4 || n >= len(p) {
			t.Errorf("%s: stored as %v with %d of %d bytes, want LZ4", name, got, n, len(p))
		}
	}
	// Random data with one compressible 1 KiB island between the samples
	// is stored raw: the probe's price.
	p := randomExtent(ExtentSize)
	copy(p[5000:], bytes.Repeat([]byte{'x'}, 1024))
	if got, _ := innerCodec(t, k, id, EncodeFrame(nil, k, id, p, CodecLZ4), len(p)); got != CodecNone {
		t.Errorf("mostly random extent stored as %v, want raw", got)
	}
}

func TestFrameAADBinding(t *testing.T) {
	k := testKeys(t)
	id := FrameID{Ino: 42, Extent: 3, Gen: 9}
	plain := textExtent(3, ExtentSize)
	for _, c := range []Codec{CodecNone, CodecLZ4, CodecZstd} {
		f := EncodeFrame(nil, k, id, plain, c)
		for _, other := range []FrameID{
			{Ino: 43, Extent: 3, Gen: 9},
			{Ino: 42, Extent: 4, Gen: 9},
			{Ino: 42, Extent: 3, Gen: 8},
		} {
			if _, err := DecodeFrame(k, other, f, len(plain)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%v: frame for %+v opened as %+v: err %v", c, id, other, err)
			}
		}
		// Another filesystem (uuid) with the same data key must not open it.
		k2 := *k
		k2.UUID[0] ^= 1
		if _, err := DecodeFrame(&k2, id, f, len(plain)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%v: frame opened under another fs uuid: %v", c, err)
		}
		// Wrong plain length.
		if _, err := DecodeFrame(k, id, f, len(plain)-1); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%v: wrong plain length accepted: %v", c, err)
		}
	}
}

func TestFrameFlippedBytes(t *testing.T) {
	k := testKeys(t)
	id := FrameID{Ino: 1, Extent: 1, Gen: 1}
	plain := textExtent(9, 4096)
	f := EncodeFrame(nil, k, id, plain, CodecZstd)
	for i := range f {
		g := bytes.Clone(f)
		g[i] ^= 0x40
		if out, err := DecodeFrame(k, id, g, len(plain)); !errors.Is(err, ErrCorrupt) || out != nil {
			t.Fatalf("flip at %d: out=%d bytes err=%v", i, len(out), err)
		}
	}
	for n := 0; n < len(f); n += 7 {
		if _, err := DecodeFrame(k, id, f[:n], len(plain)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
	if _, err := DecodeFrame(k, id, f, -1); !errors.Is(err, ErrCorrupt) {
		t.Fatal("negative plain length accepted")
	}
	if _, err := DecodeFrame(k, id, f, MaxPlainLen+1); !errors.Is(err, ErrCorrupt) {
		t.Fatal("oversized plain length accepted")
	}
}

// A frame whose authenticated payload lies about its codec or size (only
// possible with the key, i.e. a bug) still fails cleanly.
func TestFrameBadInnerPayload(t *testing.T) {
	k := testKeys(t)
	id := FrameID{Ino: 1, Extent: 1, Gen: 1}
	seal := func(inner []byte) []byte {
		var ab [frameAADLen]byte
		return k.Data.Seal(frameAAD(&ab, k.UUID, id), inner)
	}
	for name, inner := range map[string][]byte{
		"empty":        {},
		"unknowncodec": {9, 1, 2, 3},
		"lz4garbage":   {byte(CodecLZ4), 0xff, 0xff, 0xff},
		"zstdgarbage":  {byte(CodecZstd), 0x28, 0xb5, 0x2f, 0xfd, 0, 0},
		"rawshort":     {byte(CodecNone), 1, 2},
	} {
		if _, err := DecodeFrame(k, id, seal(inner), 10); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// zstd that decodes to more than plainLen.
	enc, _, _ := zstdCodecs()
	big := enc.EncodeAll(make([]byte, 1000), []byte{byte(CodecZstd)})
	if _, err := DecodeFrame(k, id, seal(big), 10); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zstd overlong: %v", err)
	}
	if _, err := DecodeFrame(k, id, seal(big), 1000); err != nil {
		t.Errorf("zstd exact: %v", err)
	}
}

func TestPointerRoundtrip(t *testing.T) {
	p := Pointer{Segment: 0x0102030405060708, Offset: 0x11121314, Length: 1 << 15, PlainLen: 1 << 15, Gen: 0xa1a2a3a4a5a6a7a8, Flags: 0xf1f2f3f4}
	b := p.Marshal()
	if len(b) != PointerSize {
		t.Fatalf("marshal: %d bytes", len(b))
	}
	if b[0] != 0x08 || b[8] != 0x14 || b[28] != 0xf4 {
		t.Fatalf("not little endian as documented: % x", b)
	}
	q, err := UnmarshalPointer(b)
	if err != nil || q != p {
		t.Fatalf("roundtrip: %+v %v", q, err)
	}
	for _, bad := range [][]byte{nil, b[:31], append(bytes.Clone(b), 0)} {
		if _, err := UnmarshalPointer(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%d bytes accepted", len(bad))
		}
	}
	for _, bp := range []Pointer{
		{Length: 10, PlainLen: 10},
		{Offset: 0xffffff00, Length: 0x1000, PlainLen: 0x1000},
		{Length: 100, PlainLen: MaxPlainLen + 1},
		{Length: 1000, PlainLen: 100},
	} {
		if _, err := UnmarshalPointer(bp.Marshal()); !errors.Is(err, ErrCorrupt) {
			t.Errorf("invalid pointer %+v accepted", bp)
		}
	}
}

func TestKey(t *testing.T) {
	for _, id := range []uint64{0, 1, 0x3f, 0x100000003f, 0xffffffffffffffff} {
		k := Key(id)
		got, ok := ParseKey(k)
		if !ok || got != id {
			t.Errorf("ParseKey(%q) = %x %v", k, got, ok)
		}
	}
	if got := Key(0x000000010000003f); got != "segments/3f/000000010000003f" {
		t.Errorf("Key = %q", got)
	}
	for _, bad := range []string{
		"", "segments/", "segments/3f/000000010000003", "segments/3e/000000010000003f",
		"segments/3F/000000010000003F", "segments/3f/000000010000003f.tmp", "meta/3f/000000010000003f",
		"segments/3f-000000010000003f", "segments/3f/00000001000000+f",
	} {
		if _, ok := ParseKey(bad); ok {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
	if ShardPrefix(0x3f) != "segments/3f/" {
		t.Error(ShardPrefix(0x3f))
	}
}
