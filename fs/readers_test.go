package fs

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// writeWhole creates (or replaces) name under the root with data.
func writeWhole(t *testing.T, e *Engine, name string, data []byte) {
	t.Helper()
	ctx := context.Background()
	a, err := e.Lookup(ctx, RootIno, name)
	if errors.Is(err, ErrNotExist) {
		a, err = e.Create(ctx, RootIno, name, 0o644, 0, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetAttr(ctx, a.Ino, SetAttr{Valid: SetSize, Size: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Write(ctx, a.Ino, data, 0); err != nil {
		t.Fatal(err)
	}
}

// readWhole returns the content of name under the root.
func readWhole(t *testing.T, e *Engine, name string) ([]byte, error) {
	t.Helper()
	ctx := context.Background()
	a, err := e.Lookup(ctx, RootIno, name)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, a.Size)
	n, err := e.Read(ctx, a.Ino, buf, 0)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func TestCacheDirLockedWhileOpen(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	dir := t.TempDir()
	e, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: dir, ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), "in use by another ebbfs process") {
		t.Fatalf("second engine on one cache directory: %v, want refused", err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e2, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: dir, ReadOnly: true})
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	e2.Close(ctx)
}

func TestPinManifestServesThatStateOnly(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	writeWhole(t, f.e, "a", []byte("one"))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	seq, err := f.e.DB().Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writeWhole(t, f.e, "a", []byte("two, later"))
	writeWhole(t, f.e, "b", []byte("new"))
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}

	pinned, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), PinManifest: seq})
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close(ctx)
	if !pinned.ReadOnly() {
		t.Fatal("a pinned engine is not read-only")
	}
	if got, err := readWhole(t, pinned, "a"); err != nil || !bytes.Equal(got, []byte("one")) {
		t.Fatalf("pinned a = %q, %v; want the manifest's %q", got, err, "one")
	}
	if _, err := readWhole(t, pinned, "b"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("pinned b: %v, want ErrNotExist (created after the manifest)", err)
	}
	if _, err := pinned.Create(ctx, RootIno, "c", 0o644, 0, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("create in a pinned engine: %v, want ErrReadOnly", err)
	}

	if _, err := Open(ctx, Options{Store: f.store, Keys: f.keys, CacheDir: t.TempDir(), PinManifest: seq + 1000}); err == nil {
		t.Fatal("pinning a manifest that does not exist succeeded")
	}
}
