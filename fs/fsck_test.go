package fs

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"ebbfs.dev/ebbfs/lsm/schema"
)

// TestFsckDeepTreeAndCycle: a chain of nested directories checks clean
// (each directory's parent chain is walked once, not once per
// descendant); two directories made each other's parent (written straight
// into the metadata) are reported as not reaching the root.
func TestFsckDeepTreeAndCycle(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	const depth = 300
	dirs := make([]uint64, 0, depth)
	parent := uint64(RootIno)
	for i := range depth {
		a, err := f.e.Mkdir(ctx, parent, fmt.Sprintf("d%d", i), 0o755, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.e.Create(ctx, a.Ino, "file", 0o644, 0, 0); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, a.Ino)
		parent = a.Ino
	}
	r, err := f.e.Check(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Inodes != 1+2*depth {
		t.Fatalf("deep tree: %d inodes, want %d:\n%s", r.Inodes, 1+2*depth, r)
	}

	// d100's parent becomes d200 (its own descendant): d100 .. d299 no
	// longer reach the root.
	rec, err := f.e.getRecord(dirs[100])
	if err != nil {
		t.Fatal(err)
	}
	rec.Parent = dirs[200]
	b := f.e.db.NewBatch()
	b.Set(schema.InodeKey(dirs[100]), rec.Marshal())
	if err := f.e.commit(b); err != nil {
		t.Fatal(err)
	}
	r, err = f.e.Check(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	detached := 0
	for _, p := range r.Problems {
		if strings.Contains(p, "does not reach the root") {
			detached++
		}
	}
	if detached != depth-100 {
		t.Fatalf("%d directories reported detached, want %d:\n%s", detached, depth-100, r)
	}
}
