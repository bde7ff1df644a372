package tests

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// BenchmarkMountGroupCommit: 4 KiB write+fsync loops on a local store,
// one thread, then 8 threads (each on its own file) for groupCommitPhase
// each, through the mount. It reports commits per second of each, their
// ratio (8 threads share barriers: group commit), and store writes per
// fsync from the request metrics. Run once (-benchtime=1x): make bench.
func BenchmarkMountGroupCommit(b *testing.B) {
	e := benchEnv(b)
	phase := func(threads int) (perSec, writesPerFsync float64) {
		b.Helper()
		files := make([]*os.File, threads)
		for i := range files {
			f, err := os.Create(e.path(fmt.Sprintf("gc%d-%d", threads, i)))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			files[i] = f
		}
		before := e.scrapeUnix().sum("ebbfs_store_requests_total", `op="put"`)
		var commits atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, threads)
		start := time.Now()
		for _, f := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for i := 0; time.Since(start) < groupCommitPhase; i++ {
					buf[0] = byte(i)
					if _, err := f.WriteAt(buf, int64(i%256)*4096); err != nil {
						errs <- err
						return
					}
					if err := f.Sync(); err != nil {
						errs <- err
						return
					}
					commits.Add(1)
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		puts := e.scrapeUnix().sum("ebbfs_store_requests_total", `op="put"`) - before
		n := float64(commits.Load())
		return n / took.Seconds(), puts / n
	}
	one, w1 := phase(1)
	eight, w8 := phase(8)
	b.ReportMetric(one, "commits/s-1thread")
	b.ReportMetric(eight, "commits/s-8threads")
	b.ReportMetric(eight/one, "ratio-8:1")
	b.ReportMetric(w1, "puts/fsync-1thread")
	b.ReportMetric(w8, "puts/fsync-8threads")
}

// groupCommitPhase is how long each phase of BenchmarkMountGroupCommit
// runs.
const groupCommitPhase = 5 * time.Second
