package objstore_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"syscall"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/objstore"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkS3PutSegment uploads 32 MiB objects (a segment at the default
// SegmentTarget) with put-if-absent, as the writer does, to the S3 test
// server, one at a time (the writer encodes the next segment while one
// uploads) or two, for several part sizes. client-cpu-s/op is this process's
// CPU (the SDK, hashing, HTTP), not the server's.
func BenchmarkS3PutSegment(b *testing.B) {
	srv := s3test.Start(b)
	data := make([]byte, 32<<20)
	rand.New(rand.NewSource(1)).Read(data)
	runs := 0
	for _, part := range []int64{objstore.DefaultS3PartSize, 16 << 20, 8 << 20} {
		for _, streams := range []int{1, 2} {
			b.Run(fmt.Sprintf("part=%dMiB/streams=%d", part>>20, streams), func(b *testing.B) {
				runs++
				cfg := srv.Config(fmt.Sprintf("bench-%d-%d-%d/", part>>20, streams, runs))
				cfg.PartSize = part
				s, err := objstore.NewS3(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(data)))
				cpu0 := cpuNow()
				n := 0
				var mu sync.Mutex
				b.ResetTimer()
				for b.Loop() {
					var wg sync.WaitGroup
					for range streams {
						mu.Lock()
						n++
						key := fmt.Sprintf("segments/00/%08d", n)
						mu.Unlock()
						wg.Add(1)
						go func() {
							defer wg.Done()
							if _, err := s.Put(context.Background(), key, data, objstore.PutOptions{IfAbsent: true}); err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
				b.SetBytes(int64(len(data) * streams))
				b.ReportMetric((cpuNow()-cpu0).Seconds()/float64(b.N), "client-cpu-s/op")
			})
		}
	}
}
