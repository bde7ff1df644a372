package fs

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// TestTmpfileLinkAndOrphan: a file made by CreateTmp has no name and no
// links; Link names it (and it survives a restart); one never linked is
// gone after a restart that did not see its last close (as after a
// crash), its bytes reclaimed and fsck clean.
func TestTmpfileLinkAndOrphan(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	kept, err := f.e.CreateTmp(ctx, RootIno, 0o600, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if kept.Nlink != 0 || !kept.IsRegular() {
		t.Fatalf("CreateTmp: %+v", kept)
	}
	data := testutil.RandBytes(3, 3*extentSize)
	f.write(kept.Ino, data, 0)
	if ents, err := f.e.ReadDir(ctx, RootIno); err != nil || len(ents) != 0 {
		t.Fatalf("root lists %v, %v", ents, err)
	}
	if _, err := f.e.Link(ctx, kept.Ino, RootIno, "kept"); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Release(ctx, kept.Ino); err != nil {
		t.Fatal(err)
	}
	lost, err := f.e.CreateTmp(ctx, RootIno, 0o600, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.write(lost.Ino, testutil.RandBytes(4, 20*extentSize), 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	// A file unlinked while open cannot be linked again once closed.
	if err := f.e.Release(ctx, lost.Ino); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Link(ctx, lost.Ino, RootIno, "late"); !errors.Is(err, ErrNotExist) {
		t.Fatalf("link of a closed unnamed file: %v, want ErrNotExist", err)
	}
	third, err := f.e.CreateTmp(ctx, RootIno, 0o600, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.write(third.Ino, testutil.RandBytes(5, 20*extentSize), 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.reopen() // third's last close never happened
	if got := f.read(f.lookup("kept").Ino, len(data)+1, 0); !bytes.Equal(got, data) {
		t.Fatal("the linked file does not read back after a restart")
	}
	for _, ino := range []uint64{lost.Ino, third.Ino} {
		if _, err := f.e.GetAttr(ctx, ino); !errors.Is(err, ErrNotExist) {
			t.Fatalf("unnamed inode %d after a restart: %v", ino, err)
		}
	}
	f.drainTombstones()
	live, err := f.e.LiveBytes()
	// The linked file's frames only (its bytes plus each frame's
	// overhead), not the 40 extents of the others.
	if err != nil || live > int64(len(data)+len(data)/32) {
		t.Fatalf("live bytes %d (%v), want about the linked file's %d", live, err, len(data))
	}
	f.fsck()
}

// TestParentOf finds a directory's parent and name, also after a rename.
func TestParentOf(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	a, err := f.e.Mkdir(ctx, RootIno, "a", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.e.Mkdir(ctx, a.Ino, "b", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, name, err := f.e.ParentOf(ctx, b.Ino); err != nil || p != a.Ino || name != "b" {
		t.Fatalf("ParentOf(b) = %d %q %v", p, name, err)
	}
	if err := f.e.Rename(ctx, a.Ino, "b", RootIno, "c", 0); err != nil {
		t.Fatal(err)
	}
	if p, name, err := f.e.ParentOf(ctx, b.Ino); err != nil || p != RootIno || name != "c" {
		t.Fatalf("ParentOf(b) after rename = %d %q %v", p, name, err)
	}
	file := f.create("file")
	if _, _, err := f.e.ParentOf(ctx, file); !errors.Is(err, ErrNotDir) {
		t.Fatalf("ParentOf(file): %v", err)
	}
	if _, _, err := f.e.ParentOf(ctx, 1<<40); !errors.Is(err, ErrNotExist) {
		t.Fatalf("ParentOf(missing): %v", err)
	}
}

// drainTombstones runs the tombstone cleaner until it has nothing left,
// then a barrier.
func (f *testFS) drainTombstones() {
	f.t.Helper()
	ctx := context.Background()
	for n := 1; n > 0; {
		var err error
		if _, n, _, err = f.e.CleanTombstones(ctx); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := f.e.Barrier(ctx); err != nil {
		f.t.Fatal(err)
	}
}
