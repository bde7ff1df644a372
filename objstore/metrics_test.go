package objstore

import (
	"context"
	"testing"
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
