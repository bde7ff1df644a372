// Package storetest is the conformance suite every objstore.Store backend
// must pass. Backends run it from their own tests:
//
//	storetest.Run(t, func(t *testing.T) objstore.Store { return objstore.NewMem() })
//
// newStore is called once per subtest and must return an empty store.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"PutGet", testPutGet},
		{"ZeroLength", testZeroLength},
		{"GetRange", testGetRange},
		{"Head", testHead},
		{"Missing", testMissing},
		{"Delete", testDelete},
		{"DeleteMany", testDeleteMany},
		{"ListOrder", testListOrder},
		{"ListPagination", testListPagination},
		{"ListStartAfter", testListStartAfter},
		{"IfAbsent", testIfAbsent},
		{"IfAbsentRace", testIfAbsentRace},
		{"IfMatch", testIfMatch},
		{"IfMatchRace", testIfMatchRace},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func mustPut(t *testing.T, s objstore.Store, key string, data []byte) string {
	t.Helper()
	etag, err := s.Put(ctxT(t), key, data, objstore.PutOptions{})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	if etag == "" {
		t.Fatalf("Put(%q) returned an empty ETag", key)
	}
	return etag
}

func mustGet(t *testing.T, s objstore.Store, key string) []byte {
	t.Helper()
	b, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return b
}

func keysOf(objs []objstore.ObjectInfo) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func testPutGet(t *testing.T, s objstore.Store) {
	v1 := randBytes(1, 4096)
	e1 := mustPut(t, s, "segments/3f/000000010000003f", v1)
	if got := mustGet(t, s, "segments/3f/000000010000003f"); !bytes.Equal(got, v1) {
		t.Fatalf("Get returned %d bytes that differ from the %d put", len(got), len(v1))
	}
	v2 := randBytes(2, 100)
	e2 := mustPut(t, s, "segments/3f/000000010000003f", v2)
	if e1 == e2 {
		t.Fatalf("overwrite with different content kept ETag %q", e1)
	}
	if got := mustGet(t, s, "segments/3f/000000010000003f"); !bytes.Equal(got, v2) {
		t.Fatalf("Get after overwrite = %d bytes, want the new %d", len(got), len(v2))
	}
	// Top-level and deep keys.
	mustPut(t, s, "ebbfs.fs", []byte("descriptor"))
	if got := mustGet(t, s, "ebbfs.fs"); string(got) != "descriptor" {
		t.Fatalf("Get(ebbfs.fs) = %q", got)
	}
	// The returned slice is the caller's own.
	got := mustGet(t, s, "ebbfs.fs")
	got[0] = 'X'
	if again := mustGet(t, s, "ebbfs.fs"); string(again) != "descriptor" {
		t.Fatalf("mutating a Get result changed the store: %q", again)
	}
}

func testZeroLength(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "meta/journal/empty", nil)
	got, err := s.Get(ctx, "meta/journal/empty")
	if err != nil || len(got) != 0 {
		t.Fatalf("Get(empty) = %d bytes, %v; want 0, nil", len(got), err)
	}
	info, err := s.Head(ctx, "meta/journal/empty")
	if err != nil || info.Size != 0 {
		t.Fatalf("Head(empty) = %+v, %v; want size 0", info, err)
	}
	if b, err := s.GetRange(ctx, "meta/journal/empty", 0, 0); err != nil || len(b) != 0 {
		t.Fatalf("GetRange(empty, 0, 0) = %d bytes, %v", len(b), err)
	}
	if _, err := s.GetRange(ctx, "meta/journal/empty", 0, 1); err == nil {
		t.Fatal("GetRange(empty, 0, 1) succeeded; want an error")
	}
	objs, err := objstore.ListAll(ctx, s, "meta/")
	if err != nil || len(objs) != 1 || objs[0].Size != 0 {
		t.Fatalf("List(meta/) = %+v, %v; want the one empty object", objs, err)
	}
}

func testGetRange(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	data := randBytes(3, 1000)
	mustPut(t, s, "segments/00/r", data)
	for _, r := range [][2]int64{{0, 10}, {990, 10}, {500, 0}, {0, 1000}, {999, 1}, {1000, 0}, {123, 456}} {
		got, err := s.GetRange(ctx, "segments/00/r", r[0], r[1])
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", r[0], r[1], err)
		}
		if !bytes.Equal(got, data[r[0]:r[0]+r[1]]) {
			t.Fatalf("GetRange(%d, %d) returned wrong bytes (%d long)", r[0], r[1], len(got))
		}
		// ReadRange (the store's own, or GetRange and a copy) into a
		// buffer that held other bytes.
		dst := bytes.Repeat([]byte{0xa5}, int(r[1]))
		if err := objstore.ReadRange(ctx, s, "segments/00/r", r[0], dst); err != nil || !bytes.Equal(dst, data[r[0]:r[0]+r[1]]) {
			t.Fatalf("ReadRange(%d, %d): %v or wrong bytes", r[0], r[1], err)
		}
	}
	for _, r := range [][2]int64{{995, 10}, {1001, 0}, {1000, 1}, {-1, 5}, {0, 1001}} {
		if err := objstore.ReadRange(ctx, s, "segments/00/r", r[0], make([]byte, r[1])); err == nil || objstore.IsNotFound(err) {
			t.Fatalf("ReadRange(%d, %d) past the end: %v; want an error other than not-found", r[0], r[1], err)
		}
	}
	if err := objstore.ReadRange(ctx, s, "segments/00/none", 0, make([]byte, 1)); !objstore.IsNotFound(err) {
		t.Fatalf("ReadRange of a missing object: %v; want not-found", err)
	}
	// Far past the end too: a store must refuse such a range before it
	// makes room for it (1 TiB here).
	for _, r := range [][2]int64{{995, 10}, {1001, 0}, {1000, 1}, {-1, 5}, {0, 1001}, {0, -1}, {1, math.MaxInt64}, {math.MaxInt64, 1}, {0, 1 << 40}, {500, 1 << 36}} {
		if got, err := s.GetRange(ctx, "segments/00/r", r[0], r[1]); err == nil {
			t.Fatalf("GetRange(%d, %d) past the end = %d bytes, nil; want an error", r[0], r[1], len(got))
		} else if objstore.IsNotFound(err) {
			t.Fatalf("GetRange(%d, %d) past the end reported not-found: %v", r[0], r[1], err)
		}
	}
}

func testHead(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	data := randBytes(4, 777)
	etag := mustPut(t, s, "checkpoints/daily", data)
	info, err := s.Head(ctx, "checkpoints/daily")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "checkpoints/daily" || info.Size != 777 || info.ETag != etag {
		t.Fatalf("Head = %+v; want key checkpoints/daily, size 777, etag %q", info, etag)
	}
	if info.ModTime.IsZero() || time.Since(info.ModTime) > time.Hour || time.Until(info.ModTime) > time.Hour {
		t.Fatalf("Head ModTime %v is not near now", info.ModTime)
	}
}

func testMissing(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "meta/sst/1.sst", []byte("x"))
	for _, key := range []string{"nope", "meta/sst/2.sst", "meta/sst", "meta"} {
		if _, err := s.Get(ctx, key); !objstore.IsNotFound(err) {
			t.Errorf("Get(%q) err = %v; want not-found", key, err)
		}
		if _, err := s.GetRange(ctx, key, 0, 1); !objstore.IsNotFound(err) {
			t.Errorf("GetRange(%q) err = %v; want not-found", key, err)
		}
		if _, err := s.Head(ctx, key); !objstore.IsNotFound(err) {
			t.Errorf("Head(%q) err = %v; want not-found", key, err)
		}
		if err := s.Delete(ctx, key); err != nil {
			t.Errorf("Delete(%q) of a missing object = %v; want nil", key, err)
		}
	}
	if err := s.DeleteMany(ctx, []string{"nope", "meta/sst/9.sst"}); err != nil {
		t.Errorf("DeleteMany of missing objects = %v; want nil", err)
	}
	if got := mustGet(t, s, "meta/sst/1.sst"); string(got) != "x" {
		t.Errorf("unrelated object changed: %q", got)
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	mustPut(t, s, "segments/01/a", []byte("a"))
	mustPut(t, s, "segments/01/b", []byte("b"))
	if err := s.Delete(ctx, "segments/01/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "segments/01/a"); !objstore.IsNotFound(err) {
		t.Fatalf("Get after Delete: %v; want not-found", err)
	}
	if err := s.Delete(ctx, "segments/01/a"); err != nil {
		t.Fatalf("second Delete = %v; want nil", err)
	}
	objs, err := objstore.ListAll(ctx, s, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(objs); !slices.Equal(got, []string{"segments/01/b"}) {
		t.Fatalf("List after Delete = %v", got)
	}
	// A deleted key can be created again, also with IfAbsent.
	if _, err := s.Put(ctx, "segments/01/a", []byte("again"), objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatalf("IfAbsent Put after Delete: %v", err)
	}
}

func testDeleteMany(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	var keys []string
	for i := range 30 {
		k := fmt.Sprintf("segments/%02x/%016x", i%4, i)
		keys = append(keys, k)
		mustPut(t, s, k, []byte(k))
	}
	mustPut(t, s, "segments/keep", []byte("keep"))
	del := append(slices.Clone(keys), "segments/ff/missing")
	if err := s.DeleteMany(ctx, del); err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.ListAll(ctx, s, "segments/")
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(objs); !slices.Equal(got, []string{"segments/keep"}) {
		t.Fatalf("after DeleteMany, List = %v; want only segments/keep", got)
	}
	if err := s.DeleteMany(ctx, nil); err != nil {
		t.Fatalf("DeleteMany(nil) = %v", err)
	}
}

// listKeys is a set whose byte order differs from a naive directory walk:
// "a-c" < "a/b" because '-' (0x2d) < '/' (0x2f).
var listKeys = []string{"a/b", "a-c", "a/c/d", "a0", "b", "a/c/e", "ab/x"}

func putAll(t *testing.T, s objstore.Store, keys []string) {
	t.Helper()
	for _, k := range keys {
		mustPut(t, s, k, []byte("v:"+k))
	}
}

func testListOrder(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	putAll(t, s, listKeys)
	want := slices.Clone(listKeys)
	sort.Strings(want)
	cases := map[string][]string{
		"":      want,
		"a":     {"a-c", "a/b", "a/c/d", "a/c/e", "a0", "ab/x"},
		"a/":    {"a/b", "a/c/d", "a/c/e"},
		"a/c":   {"a/c/d", "a/c/e"},
		"a/c/":  {"a/c/d", "a/c/e"},
		"a/c/d": {"a/c/d"},
		"ab/":   {"ab/x"},
		"b":     {"b"},
		"zz":    nil,
		"a/zz/": nil,
	}
	for prefix, w := range cases {
		objs, err := objstore.ListAll(ctx, s, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		if got := keysOf(objs); !slices.Equal(got, w) {
			t.Errorf("List(%q) = %v; want %v", prefix, got, w)
		}
	}
	objs, err := objstore.ListAll(ctx, s, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		h, err := s.Head(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if o.Size != int64(len("v:"+o.Key)) || o.Size != h.Size || o.ETag != h.ETag {
			t.Errorf("List entry %+v disagrees with Head %+v", o, h)
		}
	}
}

func testListPagination(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	var keys []string
	for i := range 23 {
		keys = append(keys, fmt.Sprintf("meta/journal/%020d", i))
	}
	putAll(t, s, keys)
	mustPut(t, s, "meta/manifest/1", []byte("m"))
	var got []string
	after := ""
	pages := 0
	for {
		p, err := s.List(ctx, "meta/journal/", after, 5)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(p.Objects) > 5 {
			t.Fatalf("page of %d objects exceeds limit 5", len(p.Objects))
		}
		got = append(got, keysOf(p.Objects)...)
		if !p.More || len(p.Objects) == 0 {
			break
		}
		after = p.Objects[len(p.Objects)-1].Key
		if pages > 10 {
			t.Fatal("pagination does not end")
		}
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("paginated listing = %v; want %v", got, keys)
	}
	if pages < 5 {
		t.Fatalf("23 keys at 5 a page took %d pages; want at least 5", pages)
	}
	p, err := s.List(ctx, "meta/journal/", "", 23)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != 23 {
		t.Fatalf("List(limit 23) = %d objects", len(p.Objects))
	}
	if p, err := s.List(ctx, "meta/journal/", "", 0); err != nil || len(p.Objects) != 23 || p.More {
		t.Fatalf("List(limit 0) = %d objects, more %v, %v; want 23, false", len(p.Objects), p.More, err)
	}
}

func testListStartAfter(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	putAll(t, s, listKeys)
	sorted := slices.Clone(listKeys)
	sort.Strings(sorted)
	for _, after := range []string{"a", "a-c", "a/", "a/b", "a/bz", "a/c", "a/c/d", "a/c/e", "a0", "b", "c", "0"} {
		var want []string
		for _, k := range sorted {
			if k > after {
				want = append(want, k)
			}
		}
		p, err := s.List(ctx, "", after, 100)
		if err != nil {
			t.Fatalf("List(startAfter %q): %v", after, err)
		}
		if got := keysOf(p.Objects); !slices.Equal(got, want) {
			t.Errorf("List(startAfter %q) = %v; want %v", after, got, want)
		}
	}
	p, err := s.List(ctx, "a/", "a/b", 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(p.Objects); !slices.Equal(got, []string{"a/c/d", "a/c/e"}) {
		t.Errorf("List(a/, after a/b) = %v", got)
	}
}

func testIfAbsent(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	etag, err := s.Put(ctx, "meta/journal/1", []byte("first"), objstore.PutOptions{IfAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(ctx, "meta/journal/1", []byte("second"), objstore.PutOptions{IfAbsent: true})
	if !objstore.IsPreconditionFailed(err) {
		t.Fatalf("second IfAbsent Put err = %v; want precondition failed", err)
	}
	if got := mustGet(t, s, "meta/journal/1"); string(got) != "first" {
		t.Fatalf("losing IfAbsent Put changed the object to %q", got)
	}
	if h, err := s.Head(ctx, "meta/journal/1"); err != nil || h.ETag != etag {
		t.Fatalf("Head = %+v, %v; want ETag %q", h, err, etag)
	}
	// Zero-length IfAbsent objects work too.
	if _, err := s.Put(ctx, "meta/journal/2", nil, objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "meta/journal/2", nil, objstore.PutOptions{IfAbsent: true}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("second empty IfAbsent Put err = %v; want precondition failed", err)
	}
}

func testIfAbsentRace(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	const n = 16
	for round := range 3 {
		key := fmt.Sprintf("meta/journal/%d", round)
		var wg worker.Group
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Put(ctx, key, []byte(fmt.Sprintf("writer %d", i)), objstore.PutOptions{IfAbsent: true})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: writers %d and %d both won put-if-absent", round, winner, i)
				}
				winner = i
			case !objstore.IsPreconditionFailed(err):
				t.Fatalf("round %d: writer %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won put-if-absent", round)
		}
		if got := mustGet(t, s, key); string(got) != fmt.Sprintf("writer %d", winner) {
			t.Fatalf("round %d: object holds %q; winner was %d", round, got, winner)
		}
	}
}

func testIfMatch(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	e1 := mustPut(t, s, "writer.lease", []byte("epoch 1"))
	e2, err := s.Put(ctx, "writer.lease", []byte("epoch 2"), objstore.PutOptions{IfMatch: e1})
	if err != nil {
		t.Fatalf("IfMatch with the current ETag: %v", err)
	}
	if e2 == e1 || e2 == "" {
		t.Fatalf("IfMatch Put returned ETag %q (old %q)", e2, e1)
	}
	if h, err := s.Head(ctx, "writer.lease"); err != nil || h.ETag != e2 {
		t.Fatalf("Head after IfMatch = %+v, %v; want ETag %q", h, err, e2)
	}
	_, err = s.Put(ctx, "writer.lease", []byte("epoch 3"), objstore.PutOptions{IfMatch: e1})
	if !objstore.IsPreconditionFailed(err) {
		t.Fatalf("IfMatch with a stale ETag err = %v; want precondition failed", err)
	}
	if got := mustGet(t, s, "writer.lease"); string(got) != "epoch 2" {
		t.Fatalf("losing IfMatch changed the object to %q", got)
	}
	_, err = s.Put(ctx, "no-such-lease", []byte("x"), objstore.PutOptions{IfMatch: e2})
	if !objstore.IsPreconditionFailed(err) {
		t.Fatalf("IfMatch on a missing key err = %v; want precondition failed", err)
	}
	if _, err := s.Get(ctx, "no-such-lease"); !objstore.IsNotFound(err) {
		t.Fatalf("failed IfMatch created the object: %v", err)
	}
}

func testIfMatchRace(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	etag := mustPut(t, s, "writer.lease", []byte("epoch 0"))
	const n = 12
	for round := range 3 {
		var wg worker.Group
		errs := make([]error, n)
		etags := make([]string, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				body := fmt.Sprintf("epoch %d holder %d", round+1, i)
				etags[i], errs[i] = s.Put(ctx, "writer.lease", []byte(body), objstore.PutOptions{IfMatch: etag})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: holders %d and %d both won if-match", round, winner, i)
				}
				winner = i
			case !objstore.IsPreconditionFailed(err):
				t.Fatalf("round %d: holder %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won if-match", round)
		}
		if got := mustGet(t, s, "writer.lease"); string(got) != fmt.Sprintf("epoch %d holder %d", round+1, winner) {
			t.Fatalf("round %d: lease holds %q, winner %d", round, got, winner)
		}
		etag = etags[winner]
	}
}

func testConcurrent(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	const workers, per = 8, 10
	var wg worker.Group
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				key := fmt.Sprintf("segments/%02x/%04d", w, i)
				data := randBytes(int64(w*1000+i), 1000+i)
				if _, err := s.Put(ctx, key, data, objstore.PutOptions{}); err != nil {
					errc <- err
					return
				}
				got, err := s.Get(ctx, key)
				if err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(got, data) {
					errc <- fmt.Errorf("%s: read back different bytes", key)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	objs, err := objstore.ListAll(ctx, s, "segments/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != workers*per {
		t.Fatalf("List(segments/) = %d objects; want %d", len(objs), workers*per)
	}
}
