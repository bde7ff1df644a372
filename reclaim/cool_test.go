package reclaim

import (
	"bytes"
	"testing"
)

// A segment between min_dead_percent and HotDeadPercent dead is repacked
// only once its live bytes have stayed put for CoolTime; the scheduler
// runs that cycle by itself. Repacking it on every cycle while it is
// still being overwritten is what multiplied the uploads of random
// overwrites.
func TestRepackWaitsForAHotSegmentToCool(t *testing.T) {
	v := newFakeEnv(t, noSweep)
	ino := v.writeFile("f", 64) // 2 MiB, one segment
	src := v.segOf(ino, 0)
	if st := v.mustCycle(); st.Repacks != 0 {
		t.Fatalf("%+v: repacked a segment with nothing dead", st)
	}

	v.writeExtents(ino, 0, 16) // 25% of src dead: it was just overwritten
	if st := v.mustCycle(); st.Repacks != 0 {
		t.Fatalf("%+v: repacked a segment whose live bytes changed since the last cycle", st)
	}
	v.r.mu.Lock()
	coolAt, want := v.r.mu.coolAt, v.clk.Mono()+DefaultCoolTime
	v.r.mu.Unlock()
	if coolAt != want {
		t.Fatalf("next cycle for the deferred segment at %v, want %v", coolAt, want)
	}

	v.clk.Advance(DefaultCoolTime / 2)
	v.writeExtents(ino, 16, 4) // still being written: the wait starts again
	if st := v.mustCycle(); st.Repacks != 0 {
		t.Fatalf("%+v: repacked a segment that changed %v ago", st, DefaultCoolTime/2)
	}
	if c, _ := v.counter(src); c.live == 0 {
		t.Fatal("source drained early")
	}
	want2 := v.readAll(ino, 64)

	// Left alone, the worker's own schedule repacks it once it cooled.
	v.start()
	cycles := v.cycles()
	v.advance(DefaultCoolTime - 1)
	if c, _ := v.counter(src); c.live == 0 {
		t.Fatal("source drained before it cooled")
	}
	v.advance(1)
	if v.cycles() == cycles {
		t.Fatal("no cycle ran when the deferred segment cooled")
	}
	if c, _ := v.counter(src); c.live != 0 {
		t.Fatalf("a segment 31%% dead and unchanged for %v was not repacked: %+v", DefaultCoolTime, c)
	}
	if got := v.readAll(ino, 64); !bytes.Equal(got, want2) {
		t.Fatal("content changed by repack")
	}
	v.barrier()
	v.consistent()
}

// noCooling repacks segments without waiting for them to cool, for tests
// of what a repack does rather than of when.
func noCooling(o *Options) { o.CoolTime = -1 }

// More than HotDeadPercent dead is repacked at once, hot or not; so is
// every segment when CoolTime is negative.
func TestRepackOfHotSegments(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cool      func(*Options)
		overwrite int
	}{
		{"more than 90% dead", func(*Options) {}, 60},
		{"no cooling", noCooling, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newFakeEnv(t, noSweep, tc.cool)
			ino := v.writeFile("f", 64)
			src := v.segOf(ino, 0)
			v.mustCycle()
			v.writeExtents(ino, 0, tc.overwrite)
			if st := v.mustCycle(); st.Repacks != 1 {
				t.Fatalf("%+v: want the source repacked at once", st)
			}
			if c, _ := v.counter(src); c.live != 0 {
				t.Fatalf("source not drained: %+v", c)
			}
		})
	}
}
