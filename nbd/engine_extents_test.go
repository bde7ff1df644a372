package nbd

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"ebbfs.dev/ebbfs/fs"
)

// extentsOfExport returns the whole layout of x's [off, off+n) as
// "D<len>"/"H<len>" words, asking again where an answer stops short.
func extentsOfExport(t *testing.T, x Export, off, n int64) string {
	t.Helper()
	var words []string
	var last *Extent
	var out []Extent
	for pos := off; pos < off+n; {
		ext, err := x.Extents(context.Background(), pos, off+n-pos)
		if err != nil {
			t.Fatalf("Extents(%d, %d): %v", pos, off+n-pos, err)
		}
		if len(ext) == 0 {
			t.Fatalf("Extents(%d, %d): nothing", pos, off+n-pos)
		}
		for _, e := range ext {
			if last != nil && last.Hole == e.Hole {
				last.Length += e.Length
			} else {
				out = append(out, e)
				last = &out[len(out)-1]
			}
			pos += e.Length
		}
	}
	for _, e := range out {
		k := "D"
		if e.Hole {
			k = "H"
		}
		words = append(words, fmt.Sprintf("%s%d", k, e.Length))
	}
	return fmt.Sprint(words)
}

// TestEngineExtents checks that the engine export reports holes from the
// extent map, for dirty and for committed data, and after TRIM, and that
// it advertises the file's extent size.
func TestEngineExtents(t *testing.T) {
	f := newEngFS(t, fs.Options{})
	const size = 64 * ext
	f.mkExport("disk", size)
	x := f.export("disk")
	if bs := x.BlockSize(); bs != ext {
		t.Fatalf("BlockSize %d, want the extent size %d", bs, ext)
	}
	ctx := context.Background()
	if got, want := extentsOfExport(t, x, 0, size), fmt.Sprint([]string{fmt.Sprintf("H%d", size)}); got != want {
		t.Fatalf("empty export: %s, want %s", got, want)
	}
	write := func(off, n int64) {
		t.Helper()
		if err := x.WriteAt(ctx, bytes.Repeat([]byte{0x5a}, int(n)), off); err != nil {
			t.Fatal(err)
		}
	}
	write(2*ext, 3*ext) // extents 2..4
	write(10*ext+5, 1)  // extent 10
	want := fmt.Sprintf("[H%d D%d H%d D%d H%d]", 2*ext, 3*ext, 5*ext, ext, 53*ext)
	if got := extentsOfExport(t, x, 0, size); got != want {
		t.Fatalf("dirty: %s, want %s", got, want)
	}
	f.barrier()
	if got := extentsOfExport(t, x, 0, size); got != want {
		t.Fatalf("committed: %s, want %s", got, want)
	}
	// A sub-range clips the extents at both ends.
	if got, want := extentsOfExport(t, x, 3*ext+7, 8*ext), fmt.Sprintf("[D%d H%d D%d H%d]", 2*ext-7, 5*ext, ext, 7); got != want {
		t.Fatalf("sub-range: %s, want %s", got, want)
	}
	// Dirty data next to committed data merges into one run.
	write(5*ext, ext)
	want = fmt.Sprintf("[H%d D%d H%d D%d H%d]", 2*ext, 4*ext, 4*ext, ext, 53*ext)
	if got := extentsOfExport(t, x, 0, size); got != want {
		t.Fatalf("dirty after committed: %s, want %s", got, want)
	}
	if err := x.Trim(ctx, 2*ext, 4*ext); err != nil {
		t.Fatal(err)
	}
	f.barrier()
	want = fmt.Sprintf("[H%d D%d H%d]", 10*ext, ext, 53*ext)
	if got := extentsOfExport(t, x, 0, size); got != want {
		t.Fatalf("after trim: %s, want %s", got, want)
	}
}

// TestEngineExtentsManyRuns checks that a layout with more runs than one
// answer holds is reported completely over several calls.
func TestEngineExtentsManyRuns(t *testing.T) {
	f := newEngFS(t, fs.Options{})
	const n = maxStatusExtents + 10 // data runs, each one extent, a hole between
	size := int64(2*n) * ext
	f.mkExport("disk", size)
	x := f.export("disk")
	ctx := context.Background()
	for i := range int64(n) {
		if err := x.WriteAt(ctx, []byte{1}, 2*i*ext); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			f.barrier() // half committed, half dirty
		}
	}
	ext1, err := x.Extents(ctx, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	var covered int64
	for _, e := range ext1 {
		covered += e.Length
	}
	if len(ext1) > maxStatusExtents || covered >= size || covered <= 0 {
		t.Fatalf("one answer: %d extents covering %d of %d", len(ext1), covered, size)
	}
	got := extentsOfExport(t, x, 0, size)
	var want []string
	for range n {
		want = append(want, fmt.Sprintf("D%d", ext), fmt.Sprintf("H%d", ext))
	}
	if got != fmt.Sprint(want) {
		t.Fatalf("layout over several calls differs: %.200s", got)
	}
}
