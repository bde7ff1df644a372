package segment

import (
	"bytes"
	mrand "math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// The probe's estimate agrees with what LZ4 really does to 2 KiB samples
// of data that clearly compresses or clearly does not.
func TestSampleCompressibleAgreesWithLZ4(t *testing.T) {
	r := mrand.New(mrand.NewPCG(5, 6))
	alphabet := func(k int) []byte {
		b := make([]byte, probeSample)
		for i := range b {
			b[i] = byte(r.IntN(k))
		}
		return b
	}
	mix := func(textEvery int) []byte {
		b := randomExtent(probeSample)
		txt := textExtent(9, probeSample)
		for i := 0; i < len(b); i += textEvery {
			copy(b[i:min(i+textEvery/2, len(b))], txt[i:])
		}
		return b
	}
	cases := map[string][]byte{
		"text":                  textExtent(1, probeSample),
		"zeros":                 make([]byte, probeSample),
		"period 7":              bytes.Repeat([]byte("abcdefg"), probeSample/7+1)[:probeSample],
		"random":                randomExtent(probeSample),
		"random 16 symbols":     alphabet(16),
		"random 4 symbols":      alphabet(4),
		"half text in 64B runs": mix(128),
		"repeated 100B block":   bytes.Repeat(randomExtent(100), probeSample/100+1)[:probeSample],
	}
	var lc lz4.Compressor
	out := make([]byte, lz4.CompressBlockBound(probeSample))
	for name, s := range cases {
		m, err := lc.CompressBlock(s, out)
		lz := err == nil && m > 0 && m <= len(s)-len(s)/16
		if got := sampleCompressible(s); got != lz {
			t.Errorf("%s: estimate %v, LZ4 %v (%d -> %d bytes)", name, got, lz, len(s), m)
		}
	}
	if sampleCompressible(nil) || sampleCompressible([]byte{1, 2, 3}) {
		t.Error("tiny samples called compressible")
	}
}

func BenchmarkLZ4Probe(b *testing.B) {
	for name, plain := range map[string][]byte{"random": randomExtent(ExtentSize), "text": textExtent(3, ExtentSize)} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(ExtentSize)
			for b.Loop() {
				lz4Worthwhile(plain)
			}
		})
	}
}
