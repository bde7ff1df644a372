package segread

import (
	"ebbfs.dev/ebbfs/segment"

	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestReadPartToEveryRange reads every range between piece boundaries
// (each one, one byte before and one after) of two pieced frames of odd
// lengths, from the store, the disk cache and the memory cache, into a
// buffer with guard bytes around it; a ReadPart result must also stay
// intact while later reads reuse the pooled buffers.
func TestReadPartToEveryRange(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 4)
	var pts []int
	for _, i := range []int{1, 3} {
		n := int(f.ps[i].PlainLen)
		pts = pts[:0]
		for b := 0; b <= n; b += segment.PieceSize {
			for _, d := range []int{-1, 0, 1} {
				if x := b + d; x >= 0 && x <= n {
					pts = append(pts, x)
				}
			}
		}
		pts = append(pts, n-1, n)
		check := func(name string, r *Reader) {
			for _, from := range pts {
				for _, to := range pts {
					if to <= from {
						continue
					}
					buf := bytes.Repeat([]byte{0xa5}, to-from+2)
					dst := buf[1 : len(buf)-1]
					if err := partTo(r, ctx, f.ids[i], f.ps[i], from, to, dst); err != nil {
						t.Fatalf("%s frame %d [%d,%d): %v", name, i, from, to, err)
					}
					if !bytes.Equal(dst, f.plains[i][from:to]) || buf[0] != 0xa5 || buf[len(buf)-1] != 0xa5 {
						t.Fatalf("%s frame %d [%d,%d): wrong bytes", name, i, from, to)
					}
					// ReadPart's result must stay intact across later reads
					// that reuse the pooled buffer.
					got, err := partOf(r, ctx, f.ids[i], f.ps[i], from, to)
					if err != nil {
						t.Fatal(err)
					}
					keep := bytes.Clone(got)
					for k := 0; k < 3; k++ {
						if _, err := partOf(r, ctx, f.ids[i], f.ps[i], 0, min(n, 3*segment.PieceSize-5)); err != nil {
							t.Fatal(err)
						}
						d2 := make([]byte, segment.PieceSize)
						if err := partTo(r, ctx, f.ids[i], f.ps[i], segment.PieceSize, 2*segment.PieceSize, d2); err != nil {
							t.Fatal(err)
						}
					}
					if !bytes.Equal(got, keep) || !bytes.Equal(got, f.plains[i][from:to]) {
						t.Fatalf("%s frame %d [%d,%d): ReadPart result changed under later reads", name, i, from, to)
					}
				}
			}
		}
		check("store", f.reader(t, ReaderOptions{MemoryBytes: -1}))
		dir := t.TempDir()
		rd := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
		f.readAll(t, rd, i)
		rd.disk.sync()
		rd.Close()
		rd = f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
		f.cs.reset()
		check("disk", rd)
		if c := f.cs.total(); c != 0 {
			t.Fatalf("disk: %d store requests", c)
		}
		rm := f.reader(t, ReaderOptions{})
		f.readAll(t, rm, i)
		check("mem", rm)
	}
}

// TestReadPartToDamagedDiskPiece: a damaged piece in the disk cache,
// met after earlier pieces of the range were opened into dst, sends the
// read to the whole frame, and dst then holds exactly the range.
func TestReadPartToDamagedDiskPiece(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 4)
	i := 1
	p, plain := f.ps[i], f.plains[i]
	n := int(p.PlainLen)
	for _, rg := range [][2]int{{0, 3 * segment.PieceSize}, {0, 6 * segment.PieceSize}, {100, 6 * segment.PieceSize}, {segment.PieceSize - 1, 3*segment.PieceSize + 1}, {0, n}, {segment.PieceSize, n}} {
		dir := t.TempDir()
		rd := f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
		f.readAll(t, rd, i)
		rd.disk.sync()
		rd.Close()
		path := filepath.Join(dir, "17", fmt.Sprintf("%016x", f.segID))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[int(p.Offset)+2*(segment.PieceSize+segment.PieceOverhead)+100] ^= 1 // piece 2
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		rd = f.reader(t, ReaderOptions{MemoryBytes: -1, DiskDir: dir})
		dst := bytes.Repeat([]byte{0xa5}, rg[1]-rg[0])
		if err := partTo(rd, ctx, f.ids[i], p, rg[0], rg[1], dst); err != nil {
			t.Fatalf("[%d,%d): %v", rg[0], rg[1], err)
		}
		if !bytes.Equal(dst, plain[rg[0]:rg[1]]) {
			t.Fatalf("[%d,%d): wrong bytes", rg[0], rg[1])
		}
		if st := rd.Stats(); st.DiskCorrupt != 1 {
			t.Fatalf("[%d,%d): %+v", rg[0], rg[1], st)
		}
	}
}
