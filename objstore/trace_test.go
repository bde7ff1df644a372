package objstore

import (
	"context"
	"testing"
)

// TestTracedStreamsRequests: an attached tracer gets each request with
// the purpose of its context (other without one), its op, key and size;
// a full buffer drops and counts instead of blocking; after Close nothing
// is traced and the hot paths stop tagging.
func TestTracedStreamsRequests(t *testing.T) {
	ctx := context.Background()
	tr := NewTraced(NewMem())
	if _, err := tr.Put(ctx, "a", []byte("hello"), PutOptions{}); err != nil { // nobody attached
		t.Fatal(err)
	}
	sub := tr.Subscribe(2)
	if !Tracing() {
		t.Fatal("Tracing() is false with a tracer attached")
	}
	if _, err := tr.Get(WithPurpose(ctx, PurposeReadMiss), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.GetRange(DefaultIfTracing(WithPurpose(ctx, PurposeSweep), PurposeReadMiss), "a", 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := tr.Delete(ctx, "a"); err != nil { // the buffer is full: dropped
		t.Fatal(err)
	}
	ev := <-sub.C()
	if ev.Op != "get" || ev.Purpose != PurposeReadMiss || ev.Key != "a" || ev.Bytes != 5 {
		t.Errorf("first event %+v", ev)
	}
	ev = <-sub.C()
	if ev.Op != "get_range" || ev.Purpose != PurposeSweep || ev.Bytes != 2 {
		t.Errorf("second event %+v: an outer purpose must stay", ev)
	}
	if sub.Dropped() != 1 {
		t.Errorf("dropped %d, want 1", sub.Dropped())
	}
	if _, err := tr.List(ctx, "", "", 0); err != nil {
		t.Fatal(err)
	}
	if ev = <-sub.C(); ev.Op != "list" || ev.Purpose != PurposeOther {
		t.Errorf("untagged list: %+v", ev)
	}
	sub.Close()
	sub.Close() // twice is fine
	if _, ok := <-sub.C(); ok {
		t.Error("the channel is open after Close")
	}
	if Tracing() {
		t.Error("Tracing() is true after the only tracer closed")
	}
	if c := TagIfTracing(ctx, PurposeReadAhead); c != ctx {
		t.Error("TagIfTracing made a new context with nobody tracing")
	}
}

// BenchmarkTracedIdle is the cost of the tracer when nobody is attached:
// a Get through Traced against one straight to the store (the difference
// is one atomic load and a call).
func BenchmarkTracedIdle(b *testing.B) {
	ctx := context.Background()
	m := NewMem()
	if _, err := m.Put(ctx, "k", make([]byte, 64), PutOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		s    Store
	}{{"direct", m}, {"traced", NewTraced(m)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.s.Head(TagIfTracing(ctx, PurposeReadMiss), "k"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
