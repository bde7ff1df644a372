package fs

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// BenchmarkRandomOverwrite is issue 34's workload in process: a file on
// default 32 KiB extents, then random 4 KiB overwrites (one per 4 KiB of
// the file) with a barrier every 256, on a memory store, without patches
// and with them at several bounds (patchLimit, mergePatches,
// mergeEighths). The file is 64 MiB, or EBBFS_BENCH_RW_MIB (256 for the
// issue's full workload). It reports the segment bytes uploaded per byte
// overwritten during the overwrites (upload/written) and until the merge
// queue and the idle fold's are drained afterwards
// (settle-upload/written), the segment PUTs,
// and the frame bytes the file's values reference per byte of the file
// at the end of the overwrites (live/file) and once drained
// (settled-live/file): what reclamation can bring the store back to.
func BenchmarkRandomOverwrite(b *testing.B) {
	mib := int64(64)
	if s := os.Getenv("EBBFS_BENCH_RW_MIB"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 {
			b.Fatalf("EBBFS_BENCH_RW_MIB=%q", s)
		}
		mib = v
	}
	type bounds struct{ limit, merge, eighths int }
	cases := []struct {
		name string
		on   bool
		bd   bounds
	}{{"whole", false, bounds{}}}
	for _, bd := range []bounds{{8, 4, 4}, {8, 6, 6}, {8, 8, 8}, {12, 12, 12}} {
		cases = append(cases, struct {
			name string
			on   bool
			bd   bounds
		}{fmt.Sprintf("patches-%d-%d-%d", bd.limit, bd.merge, bd.eighths), true, bd})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				o := Options{wholeWrites: !c.on, patchLimit: c.bd.limit, mergePatches: c.bd.merge, mergeEighths: c.bd.eighths}
				r := randomOverwrite(b, o, mib<<20)
				b.ReportMetric(r.upload, "upload/written")
				b.ReportMetric(r.settleUpload, "settle-upload/written")
				b.ReportMetric(r.puts, "PUTs")
				b.ReportMetric(r.live, "live/file")
				b.ReportMetric(r.settled, "settled-live/file")
			}
		})
	}
}

type overwriteResult struct{ upload, settleUpload, puts, live, settled float64 }

func randomOverwrite(b *testing.B, o Options, fileSize int64) overwriteResult {
	const (
		every = 256
		size  = 4096
	)
	writes := int(fileSize / size)
	ctx := context.Background()
	cs := objstore.NewCounting(objstore.NewMem())
	k, err := Init(ctx, cs, "password123")
	if err != nil {
		b.Fatal(err)
	}
	o.Store, o.Keys, o.CacheDir = cs, k, b.TempDir()
	e, err := Open(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	a, err := e.Create(ctx, RootIno, "db", 0o644, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(34, 34))
	buf := make([]byte, 1<<20)
	e.fillRandom(b, a.Ino, fileSize, rng, buf)
	before := cs.CountsFor(segment.KeyPrefix)
	p := buf[:size]
	b.ResetTimer()
	for i := 1; i <= writes; i++ {
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		off := rng.Int64N(fileSize/size) * size
		if _, err := e.Write(ctx, a.Ino, p, off); err != nil {
			b.Fatal(err)
		}
		if i%every == 0 {
			if err := e.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	var r overwriteResult
	d := cs.CountsFor(segment.KeyPrefix).Sub(before)
	r.upload = float64(d.BytesUp) / float64(writes*size)
	r.puts = float64(d.Put)
	r.live = float64(e.liveFrameBytes(b, a.Ino, fileSize)) / float64(fileSize)
	// Settle: merge what is queued and what the idle fold would (the
	// merger may be at it too) and commit it, until nothing is left.
	for {
		q, idle := e.merges.take(), e.idle.take()
		if len(q)+len(idle) == 0 {
			break
		}
		e.settleMerges(b, q, idle)
	}
	d = cs.CountsFor(segment.KeyPrefix).Sub(before)
	r.settleUpload = float64(d.BytesUp) / float64(writes*size)
	r.settled = float64(e.liveFrameBytes(b, a.Ino, fileSize)) / float64(fileSize)
	return r
}

// liveFrameBytes is the frame bytes the extent values of ino reference.
func (e *Engine) liveFrameBytes(b *testing.B, ino uint64, size int64) int64 {
	var n int64
	for idx := uint64(0); idx*32768 < uint64(size); idx++ { // default extents
		x, ok, err := e.extentValue(ino, idx)
		if err != nil {
			b.Fatal(err)
		}
		if ok {
			n += x.FrameBytes()
		}
	}
	return n
}

// BenchmarkColdReadAfterOverwrite is the cold read: a file
// rewritten by random 4 KiB writes (one per 4 KiB of the file, a barrier
// every 256, patches on, default bounds), read sequentially in 1 MiB
// reads by an engine opened on an empty cache directory, before the
// merges and the idle fold and after them, against the same read of a
// file written sequentially, on a local-directory store. The file is 64
// MiB or EBBFS_BENCH_RW_MIB. It reports each read's rate as a ratio of
// the sequential file's (before/seq, after/seq) and the store GETs each
// took.
func BenchmarkColdReadAfterOverwrite(b *testing.B) {
	mib := int64(64)
	if s := os.Getenv("EBBFS_BENCH_RW_MIB"); s != "" {
		if v, err := strconv.ParseInt(s, 10, 64); err == nil && v > 0 {
			mib = v
		}
	}
	fileSize := mib << 20
	for range b.N {
		ctx := context.Background()
		dir, err := objstore.NewLocal(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		cs := objstore.NewCounting(dir)
		k, err := Init(ctx, cs, "password123")
		if err != nil {
			b.Fatal(err)
		}
		o := Options{Store: cs, Keys: k, patchWrites: true}
		open := func() *Engine {
			o.CacheDir = b.TempDir()
			e, err := Open(ctx, o)
			if err != nil {
				b.Fatal(err)
			}
			return e
		}
		e := open()
		rng := rand.New(rand.NewPCG(34, 35))
		buf := make([]byte, 1<<20)
		var seq, rw uint64
		for _, name := range []string{"seq", "rw"} {
			a, err := e.Create(ctx, RootIno, name, 0o644, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			if name == "seq" {
				seq = a.Ino
			} else {
				rw = a.Ino
			}
			e.fillRandom(b, a.Ino, fileSize, rng, buf)
		}
		p := buf[:4096]
		for i := 1; i <= int(fileSize/4096); i++ {
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			if _, err := e.Write(ctx, rw, p, rng.Int64N(fileSize/4096)*4096); err != nil {
				b.Fatal(err)
			}
			if i%256 == 0 {
				if err := e.Barrier(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := e.Barrier(ctx); err != nil {
			b.Fatal(err)
		}
		// The merges queued by then are left for after: stop the engine
		// before the merger takes them.
		queued, idle := e.merges.take(), e.idle.take()
		if err := e.Close(ctx); err != nil {
			b.Fatal(err)
		}
		coldRead := func(ino uint64) (time.Duration, int64) {
			e := open()
			defer e.Close(ctx)
			before := cs.Snapshot()
			t0 := time.Now()
			for off := int64(0); off < fileSize; off += int64(len(buf)) {
				if _, err := e.Read(ctx, ino, buf, off); err != nil {
					b.Fatal(err)
				}
			}
			d := cs.Snapshot().Sub(before)
			return time.Since(t0), d.Get + d.GetRange
		}
		tSeq, gSeq := coldRead(seq)
		tBefore, gBefore := coldRead(rw)
		e = open()
		e.settleMerges(b, queued, idle)
		if err := e.Close(ctx); err != nil {
			b.Fatal(err)
		}
		tAfter, gAfter := coldRead(rw)
		tSeq2, _ := coldRead(seq) // A/B: the sequential file again
		tSeq = min(tSeq, tSeq2)
		b.ReportMetric(tSeq.Seconds()/tBefore.Seconds(), "before/seq")
		b.ReportMetric(tSeq.Seconds()/tAfter.Seconds(), "after/seq")
		b.ReportMetric(float64(gSeq), "GETs-seq")
		b.ReportMetric(float64(gBefore), "GETs-before")
		b.ReportMetric(float64(gAfter), "GETs-after")
	}
}

// settleMerges does what the merger does with the merges queued and then
// what the idle fold does with idle, and commits them.
func (e *Engine) settleMerges(b *testing.B, queued, idle []extentID) {
	ctx := context.Background()
	for _, x := range queued {
		if err := e.mergeExtent(ctx, x.ino, x.idx, false); err != nil {
			b.Fatal(err)
		}
	}
	slices.SortFunc(idle, func(x, y extentID) int { return cmp.Or(cmp.Compare(x.ino, y.ino), cmp.Compare(x.idx, y.idx)) })
	for _, x := range idle {
		if err := e.mergeExtent(ctx, x.ino, x.idx, true); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.Barrier(ctx); err != nil {
		b.Fatal(err)
	}
}

// fillRandom writes size random bytes into ino sequentially, in pieces
// of len(buf), and makes them durable.
func (e *Engine) fillRandom(b *testing.B, ino uint64, size int64, rng *rand.Rand, buf []byte) {
	ctx := context.Background()
	for off := int64(0); off < size; off += int64(len(buf)) {
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		if _, err := e.Write(ctx, ino, buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.Barrier(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPatchesAB is the A/B: a sequential write (64 MiB in 1
// MiB writes, then a barrier), a cold sequential read of it (an engine
// on an empty cache directory) and 2,000 random 4 KiB reads of it, with
// patches on and off alternated over 3 rounds, on a local-directory
// store. It reports, per workload, the median time with patches over
// the median without (below 1: faster with patches).
func BenchmarkPatchesAB(b *testing.B) {
	const size = 64 << 20
	for range b.N {
		var times [2][3][]time.Duration // [patches][workload]
		for round := range 6 {
			whole := round%2 == 1
			ctx := context.Background()
			dir, err := objstore.NewLocal(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			k, err := Init(ctx, dir, "password123")
			if err != nil {
				b.Fatal(err)
			}
			o := Options{Store: dir, Keys: k, wholeWrites: whole}
			o.CacheDir = b.TempDir()
			e, err := Open(ctx, o)
			if err != nil {
				b.Fatal(err)
			}
			a, err := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(34, uint64(round)))
			buf := make([]byte, 1<<20)
			t0 := time.Now()
			e.fillRandom(b, a.Ino, size, rng, buf)
			tw := time.Since(t0)
			if err := e.Close(ctx); err != nil {
				b.Fatal(err)
			}
			o.CacheDir = b.TempDir()
			if e, err = Open(ctx, o); err != nil {
				b.Fatal(err)
			}
			t0 = time.Now()
			for off := int64(0); off < size; off += int64(len(buf)) {
				if _, err := e.Read(ctx, a.Ino, buf, off); err != nil {
					b.Fatal(err)
				}
			}
			tr := time.Since(t0)
			t0 = time.Now()
			for range 2000 {
				if _, err := e.Read(ctx, a.Ino, buf[:4096], rng.Int64N(size/4096)*4096); err != nil {
					b.Fatal(err)
				}
			}
			tq := time.Since(t0)
			if err := e.Close(ctx); err != nil {
				b.Fatal(err)
			}
			p := 0
			if !whole {
				p = 1
			}
			for i, d := range []time.Duration{tw, tr, tq} {
				times[p][i] = append(times[p][i], d)
			}
		}
		median := func(ds []time.Duration) float64 {
			slices.Sort(ds)
			return ds[len(ds)/2].Seconds()
		}
		for i, name := range []string{"seqwrite", "coldread", "randread"} {
			b.ReportMetric(median(times[1][i])/median(times[0][i]), name+"-patches/whole")
		}
	}
}
