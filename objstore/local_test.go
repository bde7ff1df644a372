package objstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/objstore/storetest"
)

func TestLocalConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) objstore.Store {
		l, err := objstore.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

func newLocal(t *testing.T, root string) *objstore.Local {
	t.Helper()
	l, err := objstore.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Temp files written by in-flight Puts never appear in a listing, and a
// reader never sees a partial object: every Get returns one of the complete
// versions.
func TestLocalNoPartialObjects(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	l := newLocal(t, root)
	versions := [][]byte{bytes.Repeat([]byte{'a'}, 1<<20), bytes.Repeat([]byte{'b'}, 3<<20)}
	if _, err := l.Put(ctx, "segments/00/x", versions[0], objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if _, err := l.Put(ctx, "segments/00/x", versions[i%2], objstore.PutOptions{}); err != nil {
				t.Error(err)
				return
			}
			if _, err := l.Put(ctx, fmt.Sprintf("segments/01/%d", i), []byte("y"), objstore.PutOptions{IfAbsent: true}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	sawTemp := false
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		got, err := l.Get(ctx, "segments/00/x")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
			t.Fatalf("Get returned a partial object of %d bytes", len(got))
		}
		objs, err := objstore.ListAll(ctx, l, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if !strings.HasPrefix(o.Key, "segments/0") {
				t.Fatalf("List shows non-object %q", o.Key)
			}
		}
		if ents, _ := os.ReadDir(filepath.Join(root, ".tmp")); len(ents) > 0 {
			sawTemp = true
		}
	}
	stop.Store(true)
	wg.Wait()
	// Whether or not the loop caught one in flight, a planted temp file must
	// stay invisible.
	if err := os.WriteFile(filepath.Join(root, ".tmp", "put-123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := objstore.ListAll(ctx, l, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.HasPrefix(o.Key, ".") {
			t.Fatalf("List shows %q", o.Key)
		}
	}
	if _, err := l.Get(ctx, ".tmp/put-123"); !objstore.IsNotFound(err) {
		t.Fatalf("Get(.tmp/put-123) = %v; want not-found", err)
	}
	t.Logf("saw a temp file in flight: %v", sawTemp)
}

func TestLocalStaleTempsRemoved(t *testing.T) {
	root := t.TempDir()
	newLocal(t, root)
	old := filepath.Join(root, ".tmp", "put-old")
	fresh := filepath.Join(root, ".tmp", "put-fresh")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	newLocal(t, root)
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temp file survived NewLocal: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh temp file (maybe in use) was removed: %v", err)
	}
}

// Two Local instances on one root behave like two processes: their
// conditional writes still serialize.
func TestLocalTwoInstancesIfMatch(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a, b := newLocal(t, root), newLocal(t, root)
	etag, err := a.Put(ctx, "writer.lease", []byte("0"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			// Never the original content: an identical write keeps the ETag.
			_, err := s.Put(ctx, "writer.lease", []byte(fmt.Sprint("w", i)), objstore.PutOptions{IfMatch: etag})
			if err == nil {
				wins.Add(1)
			} else if !objstore.IsPreconditionFailed(err) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d IfMatch writers won; want exactly 1", wins.Load())
	}
}

// A file without the ETag xattr (placed or copied by hand, or a file
// system without user xattrs) has its content's MD5 as ETag: Head, List
// and IfMatch agree on it. Replacing the object, even with the same bytes,
// changes its ETag, so an IfMatch with the ETag of the old version fails.
func TestLocalETagWithoutXattr(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	l := newLocal(t, root)
	etag, err := l.Put(ctx, "k", []byte("hello"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := l.Head(ctx, "k"); err != nil || h.ETag != etag {
		t.Fatalf("Head after Put = %+v, %v; want ETag %q", h, err, etag)
	}
	// Replace the file by hand: same content, no xattr.
	p := filepath.Join(root, "k")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := l.Head(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum([]byte("hello"))
	if want := hex.EncodeToString(sum[:]); h.ETag != want {
		t.Fatalf("ETag of a hand-placed file %q; want its MD5 %q", h.ETag, want)
	}
	page, err := l.List(ctx, "", "", 10)
	if err != nil || len(page.Objects) != 1 || page.Objects[0].ETag != h.ETag {
		t.Fatalf("List = %+v, %v; want k with ETag %q", page.Objects, err, h.ETag)
	}
	if _, err := l.Put(ctx, "k", []byte("new"), objstore.PutOptions{IfMatch: etag}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("IfMatch with the replaced version's ETag: %v; want precondition failed", err)
	}
	e2, err := l.Put(ctx, "k", []byte("new"), objstore.PutOptions{IfMatch: h.ETag})
	if err != nil {
		t.Fatalf("IfMatch against a hand-placed file: %v", err)
	}
	if e2 == h.ETag {
		t.Fatalf("Put kept the ETag %q", e2)
	}
	// Rewriting identical bytes through Put is a new version too.
	e3, err := l.Put(ctx, "k", []byte("new"), objstore.PutOptions{IfMatch: e2})
	if err != nil || e3 == e2 {
		t.Fatalf("rewrite of identical bytes = %q, %v; want a new ETag (old %q)", e3, err, e2)
	}
	if _, err := l.Put(ctx, "k", []byte("new"), objstore.PutOptions{IfMatch: e2}); !objstore.IsPreconditionFailed(err) {
		t.Fatalf("IfMatch with a superseded ETag: %v; want precondition failed", err)
	}
}

func TestLocalRejectsBadKeys(t *testing.T) {
	ctx := context.Background()
	l := newLocal(t, t.TempDir())
	for _, k := range []string{"", "/abs", "a//b", "../escape", "a/../../b", "a/./b", "trailing/", ".tmp/x", ".locks/00", "nul\x00"} {
		if _, err := l.Put(ctx, k, []byte("x"), objstore.PutOptions{}); err == nil {
			t.Errorf("Put(%q) succeeded; want an error", k)
		}
	}
	if _, err := l.Put(ctx, "a", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Put(ctx, "a/b", []byte("x"), objstore.PutOptions{}); err == nil {
		t.Error(`Put("a/b") under object "a" succeeded; want an error`)
	}
	if _, err := l.Put(ctx, "k", []byte("x"), objstore.PutOptions{IfAbsent: true, IfMatch: "e"}); err == nil {
		t.Error("Put with both IfAbsent and IfMatch succeeded")
	}
}

func TestLocalCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := newLocal(t, t.TempDir())
	if _, err := l.Put(ctx, "k", []byte("x"), objstore.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with canceled ctx = %v", err)
	}
	if _, err := l.Head(context.Background(), "k"); !objstore.IsNotFound(err) {
		t.Fatalf("canceled Put left an object: %v", err)
	}
}
