package fs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// TestReadWaitsForStoreWithoutInodeLock: during a store outage, a read of
// data no cache holds and a write into part of such an extent wait for
// the store (no error), and they wait without the inode lock: a stat and a
// lookup of the same file, and a read of its cached part, answer at once.
// When the store is back both finish with the right bytes.
func TestReadWaitsForStoreWithoutInodeLock(t *testing.T) {
	ctx := context.Background()
	base := objstore.NewMem()
	k, err := Init(ctx, base, "password123")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open(ctx, Options{Store: base, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := testutil.RandBytes(3, 4*extentSize)
	if _, err := e.Write(ctx, a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Fresh caches: the data is only in the store.
	faulty := objstore.NewFaulty(base)
	// Patches off: the partial write below reads its extent (a patch
	// would not wait for the store at all).
	e, err = Open(ctx, Options{Store: faulty, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour, DiskCacheBytes: -1, wholeWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	cached := make([]byte, extentSize)
	if _, err := e.Read(ctx, a.Ino, cached, 0); err != nil || !bytes.Equal(cached, data[:extentSize]) {
		t.Fatalf("read before the outage: %v", err)
	}
	faulty.Outage(time.Hour)
	type result struct {
		n   int
		err error
	}
	readDone, writeDone := make(chan result, 1), make(chan result, 1)
	got := make([]byte, extentSize)
	go func() {
		n, err := e.Read(ctx, a.Ino, got, 2*extentSize)
		readDone <- result{n, err}
	}()
	patch := []byte("patched")
	go func() {
		n, err := e.Write(ctx, a.Ino, patch, 3*extentSize+100)
		writeDone <- result{n, err}
	}()
	time.Sleep(time.Second) // both are waiting for the store by now
	quick := func(what string, f func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s during the outage: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s waited for the store", what)
		}
	}
	quick("stat", func() error { _, err := e.GetAttr(ctx, a.Ino); return err })
	quick("lookup", func() error { _, err := e.Lookup(ctx, RootIno, "f"); return err })
	quick("a read of the cached extent", func() error {
		b := make([]byte, extentSize)
		_, err := e.Read(ctx, a.Ino, b, 0)
		if err == nil && !bytes.Equal(b, data[:extentSize]) {
			t.Error("the cached extent reads wrong")
		}
		return err
	})
	select {
	case r := <-readDone:
		t.Fatalf("the read of uncached data returned during the outage: %d, %v", r.n, r.err)
	case r := <-writeDone:
		t.Fatalf("the partial write returned during the outage: %d, %v", r.n, r.err)
	default:
	}
	faulty.Clear()
	for _, ch := range []chan result{readDone, writeDone} {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("after the outage: %v", r.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a read or write did not finish after the outage")
		}
	}
	if !bytes.Equal(got, data[2*extentSize:3*extentSize]) {
		t.Fatal("the read that waited returned wrong bytes")
	}
	want := append([]byte(nil), data[3*extentSize:]...)
	copy(want[100:], patch)
	b := make([]byte, extentSize)
	if _, err := e.Read(ctx, a.Ino, b, 3*extentSize); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("the extent after the partial write: %v", err)
	}
}
