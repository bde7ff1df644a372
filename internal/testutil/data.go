package testutil

import (
	"math/rand"

	"ebbfs.dev/ebbfs/internal/keys"
)

// RandBytes returns n pseudo-random bytes, the same for the same seed.
func RandBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// FastKDF is the password key derivation at its cheapest (one pass over
// 64 KiB, one thread): tests that open many filesystems set
// fs.KDFForTests to it instead of paying the real cost each time.
func FastKDF() keys.KDFParams {
	p := keys.DefaultKDF()
	p.Time, p.MemoryKiB, p.Threads = 1, 64, 1
	return p
}
