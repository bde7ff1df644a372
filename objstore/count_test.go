package objstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/objstore/storetest"
)

func TestCountingConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store { return objstore.NewCounting(objstore.NewMem()) })
}

func TestCountingKinds(t *testing.T) {
	ctx := context.Background()
	c := objstore.NewCounting(objstore.NewMem())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Put(ctx, "segments/3f/a", make([]byte, 100), objstore.PutOptions{})
	must(err)
	_, err = c.Put(ctx, "segments/40/b", make([]byte, 50), objstore.PutOptions{})
	must(err)
	_, err = c.Put(ctx, "meta/journal/1", make([]byte, 7), objstore.PutOptions{IfAbsent: true})
	must(err)
	_, err = c.Get(ctx, "segments/3f/a")
	must(err)
	_, err = c.GetRange(ctx, "segments/3f/a", 36, 64)
	must(err)
	_, err = c.Head(ctx, "meta/journal/1")
	must(err)
	_, err = c.Get(ctx, "missing") // failures count too
	if !objstore.IsNotFound(err) {
		t.Fatalf("Get(missing) = %v", err)
	}
	_, err = c.List(ctx, "segments/3f/", "", 0)
	must(err)
	_, err = c.List(ctx, "meta/", "", 0)
	must(err)
	must(c.Delete(ctx, "segments/40/b"))
	must(c.DeleteMany(ctx, []string{"segments/3f/a", "segments/40/x", "meta/journal/1"}))

	want := objstore.Counts{Put: 3, Get: 2, GetRange: 1, Head: 1, Delete: 1, DeleteMany: 1,
		DeletedObjects: 3, List: 2, BytesUp: 157, BytesDown: 164}
	if got := c.Snapshot(); got != want {
		t.Fatalf("Snapshot = %+v\nwant       %+v", got, want)
	}
	if got := c.Snapshot().Requests(); got != 11 {
		t.Fatalf("Requests = %d; want 11", got)
	}
	seg := c.CountsFor("segments/")
	wantSeg := objstore.Counts{Put: 2, Get: 1, GetRange: 1, Delete: 1, DeleteMany: 1, DeletedObjects: 2,
		List: 1, BytesUp: 150, BytesDown: 164}
	if seg != wantSeg {
		t.Fatalf("CountsFor(segments/) = %+v\nwant                  %+v", seg, wantSeg)
	}
	if got := c.CountsFor("segments/3f/").List; got != 1 {
		t.Fatalf("LISTs of segments/3f/ = %d; want 1", got)
	}
	if got := c.CountsFor("meta/journal/"); got.Put != 1 || got.Head != 1 || got.List != 0 || got.DeletedObjects != 1 {
		t.Fatalf("CountsFor(meta/journal/) = %+v", got)
	}
	if got := c.CountsFor("segments/4"); got.Put != 1 || got.Delete != 1 || got.Get != 0 {
		t.Fatalf("CountsFor(segments/4) = %+v; want segments/40/'s counts", got)
	}
	if got := c.CountsFor("checkpoints/"); got != (objstore.Counts{}) {
		t.Fatalf("CountsFor(checkpoints/) = %+v; want zero", got)
	}
	before := c.Snapshot()
	_, err = c.Head(ctx, "segments/3f/zz")
	if !objstore.IsNotFound(err) {
		t.Fatal(err)
	}
	if d := c.Snapshot().Sub(before); d != (objstore.Counts{Head: 1}) {
		t.Fatalf("Sub = %+v; want one Head", d)
	}
	if m := c.Snapshot().Map(); m["get_range"] != 1 || m["delete_many"] != 1 || m["bytes_up"] != 157 {
		t.Fatalf("Map = %v", m)
	}
	c.Reset()
	if got := c.Snapshot(); got != (objstore.Counts{}) {
		t.Fatalf("after Reset, Snapshot = %+v", got)
	}
	if got := c.CountsFor("segments/"); got != (objstore.Counts{}) {
		t.Fatalf("after Reset, CountsFor(segments/) = %+v", got)
	}
}

func TestCountingConcurrent(t *testing.T) {
	ctx := context.Background()
	c := objstore.NewCounting(objstore.NewMem())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				k := fmt.Sprintf("segments/%02x/%d", w, i)
				if _, err := c.Put(ctx, k, []byte("abc"), objstore.PutOptions{}); err != nil {
					t.Error(err)
				}
				_ = c.Snapshot()
			}
		}()
	}
	wg.Wait()
	if got := c.Snapshot(); got.Put != 400 || got.BytesUp != 1200 {
		t.Fatalf("Snapshot = %+v; want 400 puts, 1200 bytes", got)
	}
	if got := c.CountsFor("segments/03/"); got.Put != 50 {
		t.Fatalf("CountsFor(segments/03/) = %+v; want 50 puts", got)
	}
}
