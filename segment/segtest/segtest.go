// Package segtest holds the test data that the tests of segment and
// segread share: keys made without the key derivation, and extents of
// text-like or random bytes. It imports neither package, so segment's own
// tests can use it.
package segtest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"ebbfs.dev/ebbfs/internal/keys"
)

// Keys returns fresh keys for a pieced filesystem without running the KDF.
func Keys(tb testing.TB) *keys.Keys {
	tb.Helper()
	k := &keys.Keys{Pieced: true}
	rand.Read(k.UUID[:])
	raw := make([]byte, 32)
	rand.Read(raw)
	a, err := keys.NewAEAD(raw)
	if err != nil {
		tb.Fatal(err)
	}
	k.Data, k.Meta = a, a
	return k
}

// TextExtent returns n bytes of compressible, text-like data, the same
// for the same seed.
func TextExtent(seed uint64, n int) []byte {
	r := mrand.New(mrand.NewPCG(seed, 1))
	words := []string{"the", "segment", "frame", "extent", "object", "store", "ebbfs", "reclaim", "pointer", "directory", "footer", "\n"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
		fmt.Fprintf(&b, "%d ", r.IntN(1000))
	}
	return b.Bytes()[:n]
}

// RandomExtent returns n incompressible bytes.
func RandomExtent(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// BenchExtents returns total bytes of extents of size bytes, three
// quarters text-like and one quarter random, as a file system might hold.
func BenchExtents(total, size int) [][]byte {
	out := make([][]byte, total/size)
	for i := range out {
		if i%4 == 3 {
			out[i] = RandomExtent(size)
		} else {
			out[i] = TextExtent(uint64(i), size)
		}
	}
	return out
}
