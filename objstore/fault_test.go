package objstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/objstore/storetest"
)

func TestFaultyConformance(t *testing.T) {
	// With no rules, Faulty is transparent.
	storetest.Run(t, func(t *testing.T) objstore.Store { return objstore.NewFaulty(objstore.NewMem()) })
}

func TestFaultyRules(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMem()
	f := objstore.NewFaulty(mem)
	boom := errors.New("boom")
	id := f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Prefix: "segments/", Err: boom, Skip: 1, Count: 2})

	if _, err := f.Put(ctx, "segments/00/a", []byte("a"), objstore.PutOptions{}); err != nil {
		t.Fatalf("first Put (skipped by the rule) = %v", err)
	}
	for i := range 2 {
		_, err := f.Put(ctx, "segments/00/b", []byte("b"), objstore.PutOptions{})
		if !errors.Is(err, boom) {
			t.Fatalf("Put %d = %v; want boom", i, err)
		}
	}
	if _, err := mem.Head(ctx, "segments/00/b"); !objstore.IsNotFound(err) {
		t.Fatalf("a failed Put reached the store: %v", err)
	}
	if _, err := f.Put(ctx, "segments/00/b", []byte("b"), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put after the rule's Count = %v", err)
	}
	if _, err := f.Put(ctx, "meta/x", []byte("m"), objstore.PutOptions{}); err != nil {
		t.Fatalf("Put outside the prefix = %v", err)
	}
	if _, err := f.Get(ctx, "segments/00/a"); err != nil {
		t.Fatalf("Get (not in Ops) = %v", err)
	}
	if n := f.Fired(id); n != 2 {
		t.Fatalf("Fired = %d; want 2", n)
	}
	f.RemoveRule(id)
	if n := f.Fired(id); n != 0 {
		t.Fatalf("Fired after RemoveRule = %d", n)
	}

	// Fail: a transient injected error; DeleteMany matches on any key.
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDeleteMany}, Prefix: "segments/", Fail: true})
	err := f.DeleteMany(ctx, []string{"meta/x", "segments/00/a"})
	if !errors.Is(err, objstore.ErrInjected) || !objstore.IsUnavailable(err) {
		t.Fatalf("DeleteMany = %v; want injected, unavailable", err)
	}
	if _, err := mem.Head(ctx, "meta/x"); err != nil {
		t.Fatalf("failed DeleteMany deleted objects: %v", err)
	}
	f.Clear()
	if err := f.DeleteMany(ctx, []string{"meta/x"}); err != nil {
		t.Fatalf("DeleteMany after Clear = %v", err)
	}
}

func TestFaultyApplied(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMem()
	f := objstore.NewFaulty(mem)
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpPut}, Fail: true, Applied: true, Count: 1})
	_, err := f.Put(ctx, "meta/journal/1", []byte("j"), objstore.PutOptions{IfAbsent: true})
	if !objstore.IsUnavailable(err) {
		t.Fatalf("Put = %v; want unavailable", err)
	}
	if got, err := mem.Get(ctx, "meta/journal/1"); err != nil || string(got) != "j" {
		t.Fatalf("applied Put did not reach the store: %q, %v", got, err)
	}
	// The retry now loses, as it would against a real store.
	if _, err := f.Put(ctx, "meta/journal/1", []byte("j"), objstore.PutOptions{IfAbsent: true}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("retried Put = %v; want precondition failed", err)
	}
}

func TestFaultyLatencyAndStall(t *testing.T) {
	mem := objstore.NewMem()
	f := objstore.NewFaulty(mem)
	ctx := context.Background()
	if _, err := mem.Put(ctx, "k", []byte("v"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpGet}, Latency: 50 * time.Millisecond})
	start := time.Now()
	if got, err := f.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Fatalf("Get with latency = %q, %v", got, err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Get took %v; want at least 50ms", d)
	}
	// Latency respects cancellation.
	f.Clear()
	f.AddRule(objstore.Rule{Latency: time.Hour})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := f.Head(cctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Head under an hour of latency = %v; want deadline exceeded", err)
	}
	// A stall blocks until the context ends and does not perform the op.
	f.Clear()
	f.AddRule(objstore.Rule{Ops: []objstore.Op{objstore.OpDelete}, Stall: true})
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.Delete(sctx, "k") }()
	select {
	case err := <-done:
		t.Fatalf("stalled Delete returned early: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	scancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("stalled Delete = %v; want canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stalled Delete ignored cancellation")
	}
	if _, err := mem.Head(ctx, "k"); err != nil {
		t.Fatalf("stalled Delete deleted the object: %v", err)
	}
}

func TestFaultyOutage(t *testing.T) {
	ctx := context.Background()
	mem := objstore.NewMem()
	f := objstore.NewFaulty(mem)
	f.Outage(100 * time.Millisecond)
	start := time.Now()
	ops := []func() error{
		func() error { _, err := f.Put(ctx, "a", nil, objstore.PutOptions{}); return err },
		func() error { _, err := f.Get(ctx, "a"); return err },
		func() error { _, err := f.GetRange(ctx, "a", 0, 0); return err },
		func() error { _, err := f.Head(ctx, "a"); return err },
		func() error { return f.Delete(ctx, "a") },
		func() error { return f.DeleteMany(ctx, []string{"a"}) },
		func() error { _, err := f.List(ctx, "", "", 0); return err },
	}
	for i, op := range ops {
		if err := op(); !objstore.IsUnavailable(err) {
			t.Fatalf("op %d during outage = %v; want unavailable", i, err)
		}
	}
	if _, err := mem.Head(ctx, "a"); !objstore.IsNotFound(err) {
		t.Fatalf("a Put during the outage reached the store: %v", err)
	}
	// A caller's retry loop bridges the outage.
	for {
		_, err := f.Put(ctx, "a", []byte("x"), objstore.PutOptions{})
		if err == nil {
			break
		}
		if !objstore.IsUnavailable(err) {
			t.Fatal(err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("outage did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Fatalf("outage ended after %v; want 100ms", time.Since(start))
	}
	f.Outage(time.Hour)
	f.Clear()
	if _, err := f.Get(ctx, "a"); err != nil {
		t.Fatalf("Get after Clear = %v", err)
	}
}
