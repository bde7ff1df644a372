package reclaim

import (
	"fmt"
	"testing"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// BenchmarkRepack measures repack throughput (MB/s of live data moved):
// each iteration rewrites the 256 live extents (8 MiB) of a half-dead
// 16 MiB segment into a new one: footer + directory GETs, coalesced
// ranged GETs, frame authentication, one PUT, repoint transactions.
func BenchmarkRepack(b *testing.B) {
	v := newEngineEnv(b, noSweep)
	b.SetBytes(256 * segment.ExtentSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ino := v.writeFile(fmt.Sprintf("f%d", i), 512)
		v.writeExtents(ino, 0, 256)
		b.StartTimer()
		st, err := v.r.cycle(v.ctx)
		if err != nil || st.RelocatedFrames < 256 {
			b.Fatalf("%+v %v", st, err)
		}
	}
}

// BenchmarkCycleScan100k measures a cycle whose scan reads 100,000
// counters (all live, none a candidate); it sends no requests.
func BenchmarkCycleScan100k(b *testing.B) {
	v := newEngineEnv(b, noSweep)
	db := v.e.DB()
	const n = 100000
	for k := 0; k < n; {
		bt := db.NewBatch()
		for j := 0; j < 10000 && k < n; j, k = j+1, k+1 {
			bt.Merge(schema.CounterKey(uint64(k+1)), lsm.CounterDelta(4<<20, 4<<20, 4<<20+1000))
		}
		if err := db.Commit(bt); err != nil {
			b.Fatal(err)
		}
	}
	v.barrier()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := v.r.cycle(v.ctx)
		if err != nil || st.Counters < n || st.Requests.Requests() != 0 {
			b.Fatalf("%+v %v", st, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/counter")
}
