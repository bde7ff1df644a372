package segment

import (
	"context"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment/segtest"
)

var benchCodecs = []Codec{CodecNone, CodecLZ4, CodecZstd}

func benchInputs() map[string][]byte {
	return map[string][]byte{
		"text":   textExtent(11, ExtentSize),
		"random": randomExtent(ExtentSize),
	}
}

func BenchmarkEncodeFrame(b *testing.B) {
	k := testKeys(b)
	id := FrameID{Ino: 1, Extent: 2, Gen: 3}
	for name, plain := range benchInputs() {
		for _, c := range benchCodecs {
			b.Run(name+"/"+c.String(), func(b *testing.B) {
				b.SetBytes(int64(len(plain)))
				var dst []byte
				var n int
				for b.Loop() {
					dst = EncodeFrame(dst[:0], k, id, plain, c)
					n = len(dst)
				}
				b.ReportMetric(float64(n)/float64(len(plain)), "ratio")
			})
		}
	}
}

func BenchmarkDecodeFrame(b *testing.B) {
	k := testKeys(b)
	id := FrameID{Ino: 1, Extent: 2, Gen: 3}
	for name, plain := range benchInputs() {
		for _, c := range benchCodecs {
			frame := EncodeFrame(nil, k, id, plain, c)
			b.Run(name+"/"+c.String(), func(b *testing.B) {
				b.SetBytes(int64(len(plain)))
				for b.Loop() {
					if _, err := DecodeFrame(k, id, frame, len(plain)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

const benchSegmentBytes = 32 << 20

// benchExtents returns 32 MiB of extents, three quarters text-like and one
// quarter random, as a file system might hold.
func benchExtents() [][]byte { return segtest.BenchExtents(benchSegmentBytes, ExtentSize) }

func newBenchLocal(b *testing.B) objstore.Store {
	s, err := objstore.NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkSegmentWrite(b *testing.B) {
	k := testKeys(b)
	exts := benchExtents()
	for _, c := range []Codec{CodecLZ4, CodecZstd} {
		b.Run(c.String(), func(b *testing.B) {
			s := newBenchLocal(b)
			ctx := context.Background()
			b.SetBytes(benchSegmentBytes)
			var seg uint64
			var size int
			for b.Loop() {
				seg++
				bl := NewBuilder(k, seg, c)
				bl.Grow(benchSegmentBytes + 64<<10)
				for i, e := range exts {
					bl.Add(FrameID{Ino: 1, Extent: uint64(i), Gen: 1}, e)
				}
				data := bl.Finish()
				size = len(data)
				if err := Upload(ctx, s, seg, data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size)/benchSegmentBytes, "ratio")
		})
	}
}

// BenchmarkOpenInto compares authenticating and decrypting a 32 KiB raw
// extent into a buffer of its size, as the reader does, as one whole frame
// and as a pieced frame (eight pieces). Each iteration first copies the
// frame, the same for both.
func BenchmarkOpenInto(b *testing.B) {
	for _, ci := range bothCiphers {
		k := cipherKeys(b, ci)
		id := FrameID{Ino: 1, Extent: 2, Gen: 3}
		plain := randomExtent(ExtentSize)
		var ab [frameAADLen]byte
		whole := k.Data.Seal(frameAAD(&ab, k.UUID, id), append([]byte{byte(CodecNone)}, plain...))
		pieced := EncodeFrame(nil, k, id, plain, CodecNone)
		for _, f := range []struct {
			name  string
			frame []byte
		}{{"whole", whole}, {"pieced", pieced}} {
			b.Run(string(ci)+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(plain)))
				buf := make([]byte, len(f.frame))
				for b.Loop() {
					copy(buf, f.frame)
					if _, _, err := openTo(k, id, buf, len(plain)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
