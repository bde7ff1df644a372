package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"ebbfs.dev/ebbfs/lsm"
	"ebbfs.dev/ebbfs/lsm/schema"
)

// fileData is file i's content of a given version: a few sizes, the
// largest over InlineDeleteExtents extents so that its unlink writes a
// tombstone.
func fileData(i, version int) []byte {
	n := []int{100, 40 << 10, 400 << 10}[i%3]
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*7 + j/1000 + version*13)
	}
	return b
}

// TestRestore replaces a state that deleted, overwrote and created files
// with a checkpoint's: the files are back byte for byte, what the
// restore removed is stale for an open handle, the counters are exact
// (fsck, before and after a restart), and the state persists.
func TestRestore(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	const files = 30
	inos := make([]uint64, files)
	for i := range inos {
		inos[i] = f.create(fmt.Sprintf("f%02d", i))
		f.write(inos[i], fileData(i, 0), 0)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	seq, err := f.e.DB().Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, err := f.e.LiveBytes()
	if err != nil {
		t.Fatal(err)
	}

	// The other state: half deleted, one overwritten, new files (one open).
	for i := 0; i < files; i += 2 {
		if err := f.e.Unlink(ctx, RootIno, fmt.Sprintf("f%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	f.write(inos[1], fileData(1, 1), 0)
	added := f.create("new")
	f.write(added, fileData(2, 5), 0)
	if err := f.e.Open(ctx, added); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Open(ctx, inos[3]); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.fsck()
	f.write(inos[5], []byte("dirty, never flushed"), 0)

	if err := f.e.Open(ctx, inos[1]); err != nil {
		t.Fatal(err)
	}
	mark := f.e.RestoreMark()
	st, err := f.e.Restore(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if st.InodesRemoved != 1 || st.InodesAdded != files/2 || st.SegmentsDead == 0 {
		t.Errorf("stats %+v: want 1 inode removed, %d added, dead segments", st, files/2)
	}
	if st.LiveBytesAfter != before {
		t.Errorf("live bytes after the restore %d, at the checkpoint %d", st.LiveBytesAfter, before)
	}
	check := func() {
		t.Helper()
		for i := range inos {
			a := f.lookup(fmt.Sprintf("f%02d", i))
			want := fileData(i, 0)
			if a.Ino != inos[i] || a.Size != uint64(len(want)) {
				t.Fatalf("f%02d: ino %d size %d, want %d %d", i, a.Ino, a.Size, inos[i], len(want))
			}
			if got := f.read(a.Ino, len(want)+1, 0); !bytes.Equal(got, want) {
				t.Fatalf("f%02d: content differs after the restore", i)
			}
		}
		if _, err := f.e.Lookup(ctx, RootIno, "new"); !errors.Is(err, ErrNotExist) {
			t.Fatalf("new file after the restore: %v", err)
		}
	}
	check()
	if _, err := f.e.Read(ctx, added, make([]byte, 10), 0); !errors.Is(err, ErrStale) {
		t.Errorf("open handle of a file the restore removed: %v, want ErrStale", err)
	}
	if _, err := f.e.Write(ctx, added, []byte("x"), 0); !errors.Is(err, ErrStale) {
		t.Errorf("write to a file the restore removed: %v, want ErrStale", err)
	}
	if !f.e.StaleSince(inos[1], mark) || f.e.StaleSince(inos[3], mark) || f.e.StaleSince(inos[1], f.e.RestoreMark()) {
		t.Error("StaleSince: want the rewritten open file stale for a handle from before the restore only, the unchanged one never")
	}
	if err := f.e.Release(ctx, inos[1]); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Release(ctx, added); err != nil {
		t.Fatal(err)
	}
	if err := f.e.Release(ctx, inos[3]); err != nil {
		t.Fatal(err)
	}
	live, err := f.e.LiveBytes()
	if err != nil || live != before {
		t.Fatalf("live bytes %d (%v), want %d", live, err, before)
	}
	if _, _, _, err := f.e.CleanTombstones(ctx); err != nil {
		t.Fatal(err)
	}
	check()
	f.fsck()
	f.reopen()
	check()
	f.fsck()
}

// TestRestoreRefusesGoneSegment: a checkpoint whose live segment has no
// counter any more (reclaimed: an expired ttl checkpoint's) is refused
// and nothing changes.
func TestRestoreRefusesGoneSegment(t *testing.T) {
	ctx := context.Background()
	f := newTestFS(t)
	ino := f.create("a")
	f.write(ino, fileData(1, 0), 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	seq, err := f.e.DB().Publish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.write(ino, fileData(1, 1), 0)
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	// Reclamation's removal of the dead segment (removeDead: DELETE,
	// then the counter).
	var gone [][]byte
	lo, hi := schema.PrefixRange(schema.PCounter)
	if err := f.e.MetaScan(lo, hi, func(k, v []byte) error {
		if live, _, _, err := lsm.DecodeCounter(v); err != nil || live == 0 {
			gone = append(gone, bytes.Clone(k))
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(gone) == 0 {
		t.Fatal("no dead segment after the overwrite")
	}
	b := f.e.db.NewBatch()
	for _, k := range gone {
		b.Delete(k)
	}
	if err := f.e.commit(b); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := f.e.Restore(ctx, seq); !errors.Is(err, ErrRestoreGone) {
		t.Fatalf("restore with a reclaimed segment: %v, want ErrRestoreGone", err)
	}
	if got := f.read(ino, 1<<20, 0); !bytes.Equal(got, fileData(1, 1)) {
		t.Fatal("a refused restore changed the file")
	}
}
