package tests

import (
	"fmt"
	"os"
	"testing"
)

// The mount benchmarks: the real binary, a real FUSE mount, a local-directory
// store (so the numbers are ebbfs's, not a network's). Run with
//
//	make bench    (or: go test -run '^$' -bench . ./tests)

func benchEnv(b *testing.B) *env {
	b.Helper()
	e := newEnv(b)
	e.init()
	e.mount()
	return e
}

// BenchmarkMountSeqWrite writes a file sequentially in 1 MiB writes; the
// closing fsync is inside the measurement.
func BenchmarkMountSeqWrite(b *testing.B) {
	e := benchEnv(b)
	buf := randBytes(b, 1<<20)
	f, err := os.Create(e.path("seq"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMountSeqRead reads a 64 MiB file (written and made durable
// first) sequentially in 1 MiB reads, from the engine's caches.
func BenchmarkMountSeqRead(b *testing.B) {
	e := benchEnv(b)
	const size = 64 << 20
	data := randBytes(b, size)
	writeFile(b, e.path("r"), data)
	fsyncFile(b, e.path("r"))
	f, err := os.Open(e.path("r"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	off := int64(0)
	for i := 0; i < b.N; i++ {
		if _, err := f.ReadAt(buf, off); err != nil {
			b.Fatal(err)
		}
		off = (off + int64(len(buf))) % size
	}
}

// BenchmarkMountFsync is the latency of a 4 KiB write plus fsync: one
// durability barrier (segment upload and journal object) per op.
func BenchmarkMountFsync(b *testing.B) {
	e := benchEnv(b)
	f, err := os.Create(e.path("sync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := randBytes(b, 4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.WriteAt(buf, int64(i%256)*4096); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMountCreateStatUnlink is a metadata round: create, stat, unlink.
func BenchmarkMountCreateStatUnlink(b *testing.B) {
	e := benchEnv(b)
	if err := os.Mkdir(e.path("d"), 0o755); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := e.path(fmt.Sprintf("d/f%d", i))
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
		if _, err := os.Stat(p); err != nil {
			b.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			b.Fatal(err)
		}
	}
}
