//go:build ebbfs_testclock

package reclaim

import (
	"bytes"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/lsm/schema"
	"ebbfs.dev/ebbfs/segment"
)

// value returns the current extent value of (ino, idx).
func (v *env) value(ino, idx uint64) segment.Extent {
	v.t.Helper()
	b, ok, err := v.host.MetaGet(schema.ExtentKey(ino, idx))
	if err != nil || !ok {
		v.t.Fatalf("extent %d/%d: ok=%v err=%v", ino, idx, ok, err)
	}
	x, err := segment.UnmarshalExtent(b)
	if err != nil {
		v.t.Fatal(err)
	}
	return x
}

// Repack relocates the frames of patched extents like any other, each
// piece on its own (the directory lists a patch's frame under its extent,
// and repoint replaces the piece of the value it moved), and asks the
// writer to fold each such value into one whole frame once writes pause
// (the idle fold): the segment of
// patches and a small one beside it are combined, then the merges leave
// every extent one frame outside the old segments, the file reads the
// same, and counters stay exact.
func TestRepackRelocatesPatches(t *testing.T) {
	v := newEnvTuned(t, false, nil)
	const n = 40
	ino := v.writeFile("a", n)
	base := v.segOf(ino, 0)
	p := make([]byte, 4096)
	for i := int64(0); i < n; i++ {
		rand.New(rand.NewSource(i)).Read(p)
		if _, err := v.e.Write(v.ctx, ino, p, i*segment.ExtentSize+8192); err != nil {
			t.Fatal(err)
		}
	}
	v.barrier()
	x := v.value(ino, 0)
	if len(x.Patches) != 1 || x.Base.Segment != base {
		t.Fatalf("extent 0: %+v", x)
	}
	patches := x.Patches[0].Ptr.Segment
	v.writeFile("b", 30) // small too: with the patches, over 1 MiB live
	want := v.readAll(ino, n)
	st := v.mustCycle()
	if st.Repacks != 1 || st.RelocatedFrames != n+30 {
		t.Fatalf("%+v; want the patches and file b combined", st)
	}
	if c, _ := v.counter(patches); c.live != 0 {
		t.Fatalf("drained segment of patches has %d live bytes", c.live)
	}
	// The merges the repack asked for, once writes pause: each is a
	// write the next barrier commits.
	testutil.Eventually(t, 30*time.Second, "every repacked extent merged", func() bool {
		v.clk.Advance(15 * time.Second) // the idle fold's pause
		v.barrier()
		for i := uint64(0); i < n; i++ {
			if v.value(ino, i).Patched() {
				return false
			}
		}
		return true
	})
	for i := uint64(0); i < n; i++ {
		if x := v.value(ino, i); x.Base.Segment == base || x.Base.Segment == patches {
			t.Fatalf("extent %d: %+v; want one frame in a new segment", i, x)
		}
	}
	if c, _ := v.counter(base); c.live != 0 {
		t.Fatalf("segment of the old bases has %d live bytes after the merges", c.live)
	}
	if got := v.readAll(ino, n); !bytes.Equal(got, want) {
		t.Fatal("content changed by repack and merge")
	}
	v.consistent()
}

// Random 4 KiB overwrites with barriers, reclamation cycles between
// them (repacks moving patches, merges they ask for, deletions): the
// counters stay exact (never negative) and the file reads as written.
func TestPatchChurnCountersExact(t *testing.T) {
	v := newEnvTuned(t, false, nil)
	const n = 64
	ino := v.writeFile("a", n)
	want := v.readAll(ino, n)
	rng := rand.New(rand.NewSource(34))
	p := make([]byte, 4096)
	for round := 0; round < 40; round++ {
		for i := 0; i < 32; i++ {
			rng.Read(p)
			off := rng.Int63n(n*segment.ExtentSize/4096) * 4096
			if _, err := v.e.Write(v.ctx, ino, p, off); err != nil {
				t.Fatal(err)
			}
			copy(want[off:], p)
		}
		v.barrier()
		if os.Getenv("P34_DEBUG") != "" {
			t.Logf("round %d", round)
			v.consistent()
		}
		v.clk.Advance(time.Minute)
		v.mustCycle()
		if strings.Contains(v.logBuf.String(), "negative") {
			t.Fatalf("round %d: %s", round, v.logBuf.String())
		}
	}
	v.barrier()
	if got := v.readAll(ino, n); !bytes.Equal(got, want) {
		t.Fatal("content differs")
	}
	v.consistent()
}
