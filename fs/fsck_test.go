package fs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
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

// failingScans fails the scan of one key prefix, passing the others
// through.
type failingScans struct {
	db     metaScanner
	prefix byte
	err    error
}

func (f failingScans) Scan(lower, upper []byte, fn func(k, v []byte) error) error {
	if len(lower) > 0 && lower[0] == f.prefix {
		return f.err
	}
	return f.db.Scan(lower, upper, fn)
}

// TestFsckFailsOnScanError: a check whose scan of any kind of record
// fails returns that error rather than a report, which could call the
// filesystem consistent without having read those records (the orphan
// and tombstone scans once dropped their errors).
func TestFsckFailsOnScanError(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("a")
	f.write(ino, testutil.RandBytes(1, 3*4096), 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := check(ctx, f.e.db, f.e.opts.Store, f.e.opts.Keys, FsckOptions{}); err != nil || !r.OK() {
		t.Fatalf("clean filesystem: err %v, report:\n%v", err, r)
	}
	for _, c := range []struct {
		what   string
		prefix byte
	}{
		{"inodes", schema.PInode}, {"orphans", schema.POrphan}, {"tombstones", schema.PTombstone},
		{"dirents", schema.PDirent}, {"extents", schema.PExtent}, {"counters", schema.PCounter},
	} {
		boom := fmt.Errorf("disk read failed under %s", c.what)
		r, err := check(ctx, failingScans{f.e.db, c.prefix, boom}, f.e.opts.Store, f.e.opts.Keys, FsckOptions{})
		if !errors.Is(err, boom) || r != nil {
			t.Errorf("%s: scan failed, got report %v, err %v; want the scan's error", c.what, r, err)
		} else if !strings.Contains(err.Error(), c.what) {
			t.Errorf("%s: error %q does not say which scan failed", c.what, err)
		}
	}
}
