package checkpoint

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/clock"
	"ebbfs.dev/ebbfs/objstore"
)

// TestRenewerSpanFollowsView: a following replica's renewals move
// CreateTime to its view time, so the span stays TTL plus lag rather than
// growing with uptime; without a newer view a renewal only extends; a
// removed record is made again.
func TestRenewerSpanFollowsView(t *testing.T) {
	ctx := context.Background()
	st := objstore.NewMem()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clock.NewFake(t0)
	view := t0
	r, err := NewRenewer(RenewerOptions{Store: st, Name: "reader-h-1", TTL: 3 * time.Minute,
		ManifestSeq: func() uint64 { return 7 }, ViewTime: func() time.Time { return view }, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.pin(ctx, 7); err != nil {
		t.Fatal(err)
	}
	r.mu.rec, _ = Get(ctx, st, "reader-h-1")

	// An hour of following: each renewal's view is a second old.
	for range 60 {
		clk.Advance(time.Minute)
		view = clk.Now().Add(-time.Second)
		if err := r.renew(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := Get(ctx, st, "reader-h-1")
	if err != nil {
		t.Fatal(err)
	}
	if span := rec.Span(); span != 3*time.Minute+time.Second || !rec.CreateTime.Equal(view) {
		t.Fatalf("after an hour: span %v create %v, want 3m1s from the view %v", span, rec.CreateTime, view)
	}

	// A stuck view: renewals extend, the span grows with the lag.
	for range 3 {
		clk.Advance(time.Minute)
		if err := r.renew(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ = Get(ctx, st, "reader-h-1")
	if span := rec.Span(); span != 6*time.Minute+time.Second {
		t.Fatalf("stuck view: span %v, want 6m1s", span)
	}

	// Removed meanwhile: made again.
	if err := st.Delete(ctx, Key("reader-h-1")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	view = clk.Now()
	if err := r.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, err = Get(ctx, st, "reader-h-1")
	if err != nil || rec.Span() != 3*time.Minute || rec.ManifestSeq != 7 {
		t.Fatalf("re-created record %+v, %v", rec, err)
	}
}

// TestRenewerWaitsForFirstManifest: a replica of a filesystem with no
// manifest yet starts without a record and pins the first manifest it
// learns of at the next renewal; Close removes that record.
func TestRenewerWaitsForFirstManifest(t *testing.T) {
	ctx := context.Background()
	st := objstore.NewMem()
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	var seq atomic.Uint64
	r, err := NewRenewer(RenewerOptions{Store: st, Name: "reader-h-2", TTL: 3 * time.Minute,
		ManifestSeq: seq.Load, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatalf("Start with no manifest: %v", err)
	}
	if _, err := Get(ctx, st, "reader-h-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a record before any manifest: %v", err)
	}
	if err := r.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(ctx, st, "reader-h-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a record before any manifest: %v", err)
	}
	seq.Store(5)
	if err := r.renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec, err := Get(ctx, st, "reader-h-2")
	if err != nil || rec.ManifestSeq != 5 {
		t.Fatalf("record %+v (%v), want manifest 5 pinned", rec, err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(ctx, st, "reader-h-2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record left after Close: %v", err)
	}
}

// The worker of a renewer with nothing pinned looks for the first
// manifest every second, not every TTL/3: until its record exists the
// writer's grace does not account for this reader.
func TestRenewerPinsFirstManifestWithinASecond(t *testing.T) {
	ctx := context.Background()
	st := objstore.NewMem()
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	var seq atomic.Uint64
	r, err := NewRenewer(RenewerOptions{Store: st, Name: "reader-h-3", TTL: 40 * time.Minute,
		ManifestSeq: seq.Load, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	seq.Store(7)
	deadline := time.Now().Add(5 * time.Second)
	for {
		clk.Advance(time.Second)
		if rec, err := Get(ctx, st, "reader-h-3"); err == nil && rec.ManifestSeq == 7 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no record pinning the first manifest after the worker's polls (it waited TTL/3)")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
