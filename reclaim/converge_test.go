package reclaim

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/segment"
)

// TestGarbageEventuallyReclaimed is a seeded random workload (writes,
// overwrites, unlinks) interleaved with cycles, checked against an
// in-memory model of the file contents; once the workload stops, a
// bounded number of cycles brings the bytes under segments/ to within a
// few percent of the live bytes (DESIGN section 12, invariant 4).
func TestGarbageEventuallyReclaimed(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			v := newEngineEnv(t, noSweep, func(o *Options) { o.MinDeadPercent = 3 })
			rng := rand.New(rand.NewSource(seed))
			model := map[string][]byte{}
			inos := map[string]uint64{}
			for round := 0; round < 12; round++ {
				for op := 0; op < 4; op++ {
					name := fmt.Sprintf("f%d", rng.Intn(6))
					switch {
					case model[name] == nil || rng.Intn(4) > 0:
						if model[name] == nil {
							a, err := v.e.Create(v.ctx, fs.RootIno, name, 0o644, 0, 0)
							if err != nil {
								t.Fatal(err)
							}
							inos[name] = a.Ino
						}
						from, n := rng.Intn(48), 1+rng.Intn(24)
						buf := make([]byte, n*segment.ExtentSize)
						rng.Read(buf)
						if _, err := v.e.Write(v.ctx, inos[name], buf, int64(from)*segment.ExtentSize); err != nil {
							t.Fatal(err)
						}
						m := model[name]
						if end := (from + n) * segment.ExtentSize; len(m) < end {
							m = append(m, make([]byte, end-len(m))...)
						}
						copy(m[from*segment.ExtentSize:], buf)
						model[name] = m
					default:
						if err := v.e.Unlink(v.ctx, fs.RootIno, name); err != nil {
							t.Fatal(err)
						}
						delete(model, name)
						delete(inos, name)
					}
				}
				v.barrier()
				for {
					_, n, _, err := v.e.CleanTombstones(v.ctx)
					if err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						break
					}
				}
				v.mustCycle()
				v.clk.Advance(MinGrace / 2)
				rep, err := v.e.Check(v.ctx, false)
				if err != nil || !rep.OK() {
					t.Fatalf("round %d: %v\n%s", round, err, rep)
				}
			}
			for i := 0; i < 6; i++ {
				v.mustCycle()
				v.clk.Advance(MinGrace)
			}
			for name, want := range model {
				buf := make([]byte, len(want))
				n, err := v.e.Read(v.ctx, inos[name], buf, 0)
				if err != nil || !bytes.Equal(buf[:n], want) {
					t.Fatalf("%s: content differs from the model (%v)", name, err)
				}
			}
			sp, err := v.r.Space(v.ctx)
			if err != nil {
				t.Fatal(err)
			}
			var stored int64
			for _, s := range v.objects() {
				stored += s
			}
			t.Logf("stored %d bytes in %d segments for %d live bytes", stored, len(v.objects()), sp.LiveBytes)
			if limit := sp.LiveBytes + sp.LiveBytes/25 + 1<<20; stored > limit {
				t.Fatalf("segments/ holds %d bytes for %d live (limit %d): %+v", stored, sp.LiveBytes, limit, sp)
			}
			if sp.DeadSegments != 0 {
				t.Fatalf("%d dead segments left", sp.DeadSegments)
			}
			v.barrier()
			v.consistent()
		})
	}
}
