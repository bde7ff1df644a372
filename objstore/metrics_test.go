package objstore

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestTimedRecordsByOperation(t *testing.T) {
	ctx := context.Background()
	s := NewTimed(NewMem())
	if !IsLocal(NewTimed(&Local{})) {
		t.Fatal("IsLocal does not see through Timed")
	}
	if _, err := s.Put(ctx, "a/b", []byte("hello"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a/b", []byte("x"), PutOptions{IfAbsent: true}); !IsPreconditionFailed(err) {
		t.Fatalf("conditional put: %v", err)
	}
	if _, err := s.Get(ctx, "a/missing"); !IsNotFound(err) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := s.GetRange(ctx, "a/b", 1, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRange(ctx, "a/b", 3, 10); err == nil {
		t.Fatal("range past the end succeeded")
	}
	snap := s.Ops().Snapshot()
	if p := snap["put"]; p.Count != 2 || p.Errors != 0 || p.Bytes != 6 || p.Latency.Count != 2 {
		t.Fatalf("put: %+v", p)
	}
	if g := snap["get"]; g.Count != 1 || g.Errors != 0 {
		t.Fatalf("get (not found is no error): %+v", g)
	}
	if g := snap["get_range"]; g.Count != 2 || g.Errors != 1 || g.Bytes != 2 {
		t.Fatalf("get_range: %+v", g)
	}
}

func TestTimedHealth(t *testing.T) {
	f := NewFaulty(NewMem())
	tm := NewTimed(f)
	ctx := context.Background()
	if since, _ := tm.Health(); !since.IsZero() {
		t.Fatal("a fresh store is failing")
	}
	f.Outage(time.Hour)
	_, _ = tm.Get(ctx, "k")
	since, last := tm.Health()
	if since.IsZero() || last == "" {
		t.Fatalf("outage not noted: %v %q", since, last)
	}
	_, _ = tm.Put(ctx, "k", []byte("x"), PutOptions{})
	if again, _ := tm.Health(); !again.Equal(since) {
		t.Fatal("a second failure moved the start of the outage")
	}
	f.Clear()
	if _, err := tm.Get(ctx, "missing"); !IsNotFound(err) {
		t.Fatal(err)
	}
	if s, l := tm.Health(); !s.IsZero() || l != "" {
		t.Fatalf("an answer (NotFound) did not end the outage: %v %q", s, l)
	}
}

func TestTimedHealthIgnoresCancelled(t *testing.T) {
	f := NewFaulty(NewMem())
	tm := NewTimed(f)
	f.AddRule(Rule{Stall: true, Count: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tm.Get(ctx, "k"); err == nil {
		t.Fatal("a stalled request with a cancelled context succeeded")
	}
	if s, _ := tm.Health(); !s.IsZero() {
		t.Fatal("a request the caller cancelled made the store look unreachable")
	}
}

// TestTimedHealthStall: a store that answers nothing (a stopped server, a
// dropped link) is unreachable once a request has waited stallAfter with
// no answer to any request meanwhile; an answer to another request (a
// slow store, not a dead one) or to the waiting one ends that.
func TestTimedHealthStall(t *testing.T) {
	f := NewFaulty(NewMem())
	tm := NewTimed(f)
	tm.stallAfter = 50 * time.Millisecond
	f.AddRule(Rule{Ops: []Op{OpGet}, Stall: true, Count: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _, _ = tm.Get(ctx, "k") }()
	deadline := time.Now().Add(10 * time.Second)
	var since time.Time
	var last string
	for since.IsZero() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		since, last = tm.Health()
	}
	if since.IsZero() || !strings.Contains(last, "no answer to a get request") {
		t.Fatalf("a stalled request did not make the store unreachable: %v %q", since, last)
	}
	if _, err := tm.Head(context.Background(), "missing"); !IsNotFound(err) {
		t.Fatal(err)
	}
	if s, l := tm.Health(); !s.IsZero() {
		t.Fatalf("an answer to another request left the store unreachable: %v %q", s, l)
	}
	cancel()
	<-done
	time.Sleep(60 * time.Millisecond)
	if s, l := tm.Health(); !s.IsZero() {
		t.Fatalf("no request in flight, yet unreachable: %v %q", s, l)
	}
}
