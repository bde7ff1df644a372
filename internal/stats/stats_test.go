package stats

import (
	"math"
	"testing"
	"time"
)

func TestHistogramQuantile(t *testing.T) {
	h := NewHistogram()
	for i := 0; i < 99; i++ {
		h.Observe(150 * time.Microsecond) // bucket (0.0001, 0.0002]
	}
	h.Observe(3 * time.Second)
	s := h.Snapshot()
	if s.Count != 100 || math.Abs(s.Sum-(99*0.00015+3)) > 1e-9 {
		t.Fatalf("count %d sum %f", s.Count, s.Sum)
	}
	if p50 := s.Quantile(0.5); p50 <= 0.0001 || p50 > 0.0002 {
		t.Fatalf("p50 %f, want within (0.0001, 0.0002]", p50)
	}
	if p999 := s.Quantile(0.999); p999 < 2 || p999 > 4.0 {
		t.Fatalf("p99.9 %f, want in the 3 s bucket", p999)
	}
	if !math.IsNaN(NewHistogram().Snapshot().Quantile(0.5)) {
		t.Fatal("quantile of nothing is not NaN")
	}
	d := h.Snapshot().Sub(s)
	if d.Count != 0 {
		t.Fatalf("delta of equal snapshots: %+v", d)
	}
}

func TestOps(t *testing.T) {
	o := NewOps("read")
	o.Get("read").Done(time.Now(), 4096, false)
	o.Get("write").Done(time.Now(), 10, true)
	var nilOps *Ops
	nilOps.Get("x").Done(time.Now(), 1, false) // no panic
	s := o.Snapshot()
	if s["read"].Count != 1 || s["read"].Bytes != 4096 || s["write"].Errors != 1 {
		t.Fatalf("%+v", s)
	}
}
