package fs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"ebbfs.dev/ebbfs/segment"
)

// TestStoreOutageBarrierWaits: the store fails every request for 30 s
// while data is being written; the barrier waits the outage out and then
// succeeds, without a restart, and everything is in the store.
func TestStoreOutageBarrierWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s outage")
	}
	ctx := context.Background()
	base := objstore.NewMem()
	k, err := Init(ctx, base, "password123")
	if err != nil {
		t.Fatal(err)
	}
	faulty := objstore.NewFaulty(base)
	e, err := Open(ctx, Options{Store: faulty, Keys: k, CacheDir: t.TempDir(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	first := testutil.RandBytes(1, 200<<10)
	e.Write(ctx, a.Ino, first, 0)
	faulty.Outage(30 * time.Second)
	start := time.Now()
	second := testutil.RandBytes(2, 300<<10)
	if _, err := e.Write(ctx, a.Ino, second, int64(len(first))); err != nil {
		t.Fatal(err)
	}
	if err := e.Barrier(ctx); err != nil {
		t.Fatalf("barrier across the outage: %v", err)
	}
	if waited := time.Since(start); waited < 29*time.Second {
		t.Fatalf("barrier returned after %v, inside the 30 s outage", waited)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e2, err := Open(ctx, Options{Store: base, Keys: k, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close(ctx)
	got := make([]byte, len(first)+len(second))
	n, err := e2.Read(ctx, a.Ino, got, 0)
	if err != nil || !bytes.Equal(got[:n], append(first, second...)) {
		t.Fatalf("after the outage: %d bytes, %v; data differs", n, err)
	}
	r, err := Fsck(ctx, base, k, FsckOptions{VerifyData: true})
	if err != nil || !r.OK() {
		t.Fatalf("fsck: %v\n%s", err, r)
	}
}

type logBuf struct{ bytes.Buffer }

// TestTamperedSegmentIsEIO: a flipped byte in a segment object gives an
// error on the affected read (never wrong data), a log line naming the
// object, and no deletion.
func TestTamperedSegmentIsEIO(t *testing.T) {
	ctx := context.Background()
	s := objstore.NewMem()
	k, err := Init(ctx, s, "password123")
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	log := slog.New(slog.NewTextHandler(&logs, nil))
	e, err := Open(ctx, Options{Store: s, Keys: k, CacheDir: t.TempDir(), Logger: log, MemoryCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	a, _ := e.Create(ctx, RootIno, "f", 0o644, 0, 0)
	data := testutil.RandBytes(3, 4*extentSize)
	e.Write(ctx, a.Ino, data, 0)
	if err := e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	objs, _ := objstore.ListAll(ctx, s, "segments/")
	if len(objs) != 1 {
		t.Fatalf("%d segments, want 1", len(objs))
	}
	key := objs[0].Key
	obj, _ := s.Get(ctx, key)
	obj[100] ^= 1 // inside the first frame
	s.Put(ctx, key, obj, objstore.PutOptions{})
	e.rd.Forget(mustSeg(t, key))
	buf := make([]byte, extentSize)
	_, err = e.Read(ctx, a.Ino, buf, 0)
	if !errors.Is(err, segment.ErrCorrupt) {
		t.Fatalf("read of a tampered frame: %v, want a corruption error", err)
	}
	if !strings.Contains(logs.String(), key) {
		t.Fatalf("no log line names %s:\n%s", key, logs.String())
	}
	// The other extents of the segment still read correctly.
	if n, err := e.Read(ctx, a.Ino, buf, 2*extentSize); err != nil || !bytes.Equal(buf[:n], data[2*extentSize:3*extentSize]) {
		t.Fatalf("untouched extent: %v", err)
	}
	if _, err := s.Head(ctx, key); err != nil {
		t.Fatalf("tampered segment was deleted: %v", err)
	}
}

func mustSeg(t *testing.T, key string) uint64 {
	id, ok := segment.ParseKey(key)
	if !ok {
		t.Fatalf("bad segment key %s", key)
	}
	return id
}
