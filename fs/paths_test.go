package fs

import (
	"context"
	"strings"
	"testing"
)

// TestInodePaths: a file linked from two directories has both paths, a
// nested directory's path is built through its parents, and an inode
// nothing names has none.
func TestInodePaths(t *testing.T) {
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
	x, err := f.e.Create(ctx, b.Ino, "x", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Link(ctx, x.Ino, RootIno, "top"); err != nil {
		t.Fatal(err)
	}
	got, err := inodePaths(f.e.scan, map[uint64]bool{x.Ino: true, b.Ino: true, 999: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(got[x.Ino], " "); s != "/a/b/x /top" {
		t.Errorf("paths of the linked file: %q", s)
	}
	if s := strings.Join(got[b.Ino], " "); s != "/a/b" {
		t.Errorf("paths of the directory: %q", s)
	}
	if len(got[999]) != 0 {
		t.Errorf("an unnamed inode has paths %v", got[999])
	}
}
