package fuse

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
)

// No goroutine outlives a mount: once Unmount returns (or Wait, after an
// umount from outside), the request loop, the node limit and a replica's
// notifier have stopped, and after the engines' Close nothing is left.
func TestNoGoroutineOutlivesMount(t *testing.T) {
	requireFUSE(t)
	leaks := testutil.SnapshotGoroutines()
	ctx := context.Background()
	st := objstore.NewMem()
	k, err := ebbfs.Init(ctx, st, "password123")
	if err != nil {
		t.Fatal(err)
	}
	w, err := ebbfs.Open(ctx, ebbfs.Options{Store: st, Keys: k, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("mounted "), 64<<10)
	dir := t.TempDir()
	srv, err := Mount(w, dir, DefaultMountOptions()) // with the node limit
	if err != nil {
		_ = w.Close(ctx)
		t.Fatal(err)
	}
	testutil.WaitMountTable(t, dir, true, time.Minute)
	if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back through the mount: %d bytes, %v", len(got), err)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	noMountGoroutines(t, leaks, "Unmount")
	if err := w.Barrier(ctx); err != nil {
		t.Fatal(err)
	}

	r, err := ebbfs.Open(ctx, ebbfs.Options{Store: st, Keys: k, CacheDir: t.TempDir(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	rdir := t.TempDir()
	rsrv, err := Mount(r, rdir, DefaultMountOptions()) // a replica: the notifier too
	if err != nil {
		_ = r.Close(ctx)
		t.Fatal(err)
	}
	testutil.WaitMountTable(t, rdir, true, time.Minute)
	if got, err := os.ReadFile(filepath.Join(rdir, "f")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read on the replica: %d bytes, %v", len(got), err)
	}
	if err := syscall.Unmount(rdir, 0); err != nil { // as umount(8) would
		t.Fatal(err)
	}
	rsrv.Wait()
	noMountGoroutines(t, leaks, "Wait")
	for _, e := range []*ebbfs.Engine{r, w} {
		if err := e.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	leaks.Check(t, 10*time.Second)
}

// noMountGoroutines fails if a goroutine of the mount (this package's or
// go-fuse's) started since leaks was taken still runs: Unmount and Wait
// return after them, with nothing left to wait for.
func noMountGoroutines(t *testing.T, leaks testutil.Goroutines, after string) {
	t.Helper()
	for _, s := range leaks.Leftover() {
		if strings.Contains(s, "ebbfs.dev/ebbfs/fs/fuse.") || strings.Contains(s, "hanwen/go-fuse") {
			t.Fatalf("a goroutine of the mount runs after %s returned:\n%s", after, s)
		}
	}
}
