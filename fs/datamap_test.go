package fs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestDataRanges checks the data ranges of a file with committed, dirty,
// punched, truncated and reserved extents, clipping, the bound on ranges
// and the end of the file.
func TestDataRanges(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("a")
	const es = extentSize
	one := []byte{1}
	for _, i := range []int64{0, 1, 5} {
		f.write(ino, one, i*es)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	f.write(ino, one, 9*es+7) // dirty
	if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: 20 * es}); err != nil {
		t.Fatal(err)
	}
	// Reserved (fallocate) extents hold no data.
	if err := f.e.Allocate(ctx, ino, 12*es, 3*es, false); err != nil {
		t.Fatal(err)
	}
	check := func(name string, off, length int64, maxRanges int, want []DataRange, wantEnd int64) {
		t.Helper()
		got, end, err := f.e.DataRanges(ctx, ino, off, length, maxRanges)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) || end != wantEnd {
			t.Errorf("%s: %v end %d (%v), want %v end %d", name, got, end, err, want, wantEnd)
		}
	}
	all := []DataRange{{0, 2 * es}, {5 * es, es}, {9 * es, es}}
	check("whole file", 0, 20*es, 10, all, 20*es)
	check("past the end is clipped", 0, 1<<40, 10, all, 20*es)
	check("sub-range", es+3, 8*es, 10, []DataRange{{es + 3, es - 3}, {5 * es, es}, {9 * es, 3}}, 9*es+3)
	check("bounded", 0, 20*es, 2, all[:2], 9*es)
	check("bounded to one", 0, 20*es, 1, all[:1], 5*es)
	check("a hole", 2*es, 3*es, 10, nil, 5*es)

	if err := f.e.Punch(ctx, ino, es, es); err != nil {
		t.Fatal(err)
	}
	check("after a punch", 0, 20*es, 10, []DataRange{{0, es}, {5 * es, es}, {9 * es, es}}, 20*es)
	if _, _, err := f.e.DataRanges(ctx, ino, 20*es, 1, 10); !errors.Is(err, ErrNoData) {
		t.Errorf("at the end of the file: %v, want ErrNoData", err)
	}
	for _, bad := range [][3]int64{{-1, 1, 1}, {0, 0, 1}, {0, 1, 0}} {
		if _, _, err := f.e.DataRanges(ctx, ino, bad[0], bad[1], int(bad[2])); !errors.Is(err, ErrInvalid) {
			t.Errorf("DataRanges%v: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestDataRangesAfterRangeTombstone: extents a truncate dropped with a
// range tombstone (not yet cleaned) are holes after the file grows again.
func TestDataRangesAfterRangeTombstone(t *testing.T) {
	f := newTestFS(t)
	ctx := context.Background()
	ino := f.create("big")
	const n = InlineDropExtents + 10
	for i := range int64(n) {
		f.write(ino, []byte{1}, i*extentSize)
	}
	if err := f.e.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	for _, size := range []uint64{extentSize, n * extentSize} {
		if _, err := f.e.SetAttr(ctx, ino, SetAttr{Valid: SetSize, Size: size}); err != nil {
			t.Fatal(err)
		}
	}
	if f.rangeTombs() != 1 {
		t.Fatal("no range tombstone: the test does not test what it says")
	}
	got, end, err := f.e.DataRanges(ctx, ino, 0, n*extentSize, 10)
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]DataRange{{0, extentSize}}) || end != n*extentSize {
		t.Fatalf("after truncate and grow: %v end %d (%v)", got, end, err)
	}
}
