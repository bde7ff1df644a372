package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

const (
	pageSize    = 4 * KiB  // random reads and small files
	blockSize   = 1 * MiB  // sequential writes and reads
	patternSize = 16 * MiB // period of the random base pattern
)

// pattern is the content of every file the benchmark writes: incompressible
// (ebbfs compresses frames with LZ4) and with no two 4 KiB pages equal,
// since each page starts with its own page number, so that nothing below
// can deduplicate it. Any aligned page can be recomputed for verification.
type pattern struct{ base []byte }

func newPattern(seed uint64) *pattern {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	r := rand.NewChaCha8(s)
	base := make([]byte, patternSize)
	_, _ = r.Read(base) // never fails
	return &pattern{base: base}
}

// fill writes the content of the file at [off, off+len(dst)); off and
// len(dst) are multiples of pageSize, len(dst) at most patternSize.
func (p *pattern) fill(dst []byte, off int64) {
	for i := 0; i < len(dst); i += pageSize {
		o := off + int64(i)
		pg := dst[i : i+pageSize]
		copy(pg, p.base[o%patternSize:])
		binary.LittleEndian.PutUint64(pg, uint64(o/pageSize))
	}
}

// result is one measurement.
type result struct {
	n     float64         // MiB/s or ops/s, timed by the workload itself
	wall  time.Duration   // wall time around the workload
	cpu   time.Duration   // the FUSE server's CPU time meanwhile (-1: none)
	store *storeCounters  // ebbfs's object-store traffic meanwhile
	drops int64           // page-cache drops by other processes meanwhile
	io    *ioCounters     // the server's block I/O meanwhile
	hwm   int64           // the server's VmHWM after the workload (0: unknown)
	tries int             // attempts made (warm reads retry when disturbed)
	ow    *overwriteStats // the random-overwrite workload's other figures
	count int64           // the db group: commits (or writes) made, for requests per commit
	err   error
}

// ioCounters are a server's block-layer bytes.
type ioCounters struct{ rd, wr int64 }

// seqWrite writes size bytes in 1 MiB writes to a new file and fsyncs it;
// the time includes the fsync and the close.
func seqWrite(p *pattern, path string, size int64) (float64, error) {
	buf := make([]byte, blockSize)
	start := time.Now()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	for off := int64(0); off < size; off += blockSize {
		p.fill(buf, off)
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return mibps(size, time.Since(start)), nil
}

// seqRead reads f from offset 0 to EOF in 1 MiB reads; with verify it
// checks every byte against the pattern.
func seqRead(p *pattern, f *os.File, size int64, verify bool) (float64, error) {
	buf := make([]byte, blockSize)
	want := make([]byte, blockSize)
	start := time.Now()
	var off int64
	for {
		n, err := f.ReadAt(buf, off)
		if n > 0 && verify {
			if n%pageSize != 0 && off+int64(n) != size {
				return 0, fmt.Errorf("short read of %d bytes at %d", n, off)
			}
			p.fill(want[:(n+pageSize-1)/pageSize*pageSize], off)
			if !bytes.Equal(buf[:n], want[:n]) {
				return 0, fmt.Errorf("wrong data in [%d, %d)", off, off+int64(n))
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	el := time.Since(start)
	if off != size {
		return 0, fmt.Errorf("read %d bytes, want %d", off, size)
	}
	return mibps(size, el), nil
}

// randOffsets returns n page-aligned offsets in [0, size), the same for
// every target.
func randOffsets(seed uint64, size int64, n int) []int64 {
	r := rand.New(rand.NewPCG(seed, 0x6d6f756e7462656e))
	out := make([]int64, n)
	pages := size / pageSize
	for i := range out {
		out[i] = r.Int64N(pages) * pageSize
	}
	return out
}

// randRead preads one verified page at each offset, inFlight at a time
// (from as many goroutines, each taking every inFlight-th offset), and
// returns ops/s.
func randRead(p *pattern, path string, offs []int64, inFlight int) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	errs := make([]error, inFlight)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, pageSize)
			want := make([]byte, pageSize)
			for i := w; i < len(offs); i += inFlight {
				off := offs[i]
				if _, err := f.ReadAt(buf, off); err != nil {
					errs[w] = fmt.Errorf("pread at %d: %w", off, err)
					return
				}
				p.fill(want, off)
				if !bytes.Equal(buf, want) {
					errs[w] = fmt.Errorf("wrong data in the page at %d", off)
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return opsps(len(offs), d), nil
}

// smallName is the name of the i-th small file.
func smallName(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("f%06d", i)) }

// createFiles creates n files of 4 KiB each in dir (open O_EXCL, write,
// close; no fsync).
func createFiles(p *pattern, dir string, n int) (float64, error) {
	buf := make([]byte, pageSize)
	start := time.Now()
	for i := 0; i < n; i++ {
		f, err := os.OpenFile(smallName(dir, i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return 0, err
		}
		p.fill(buf, int64(i)*pageSize)
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return 0, err
		}
		if err := f.Close(); err != nil {
			return 0, err
		}
	}
	return opsps(n, time.Since(start)), nil
}

// statFiles lstats every file and checks its size.
func statFiles(dir string, n int) (float64, error) {
	start := time.Now()
	for i := 0; i < n; i++ {
		var st syscall.Stat_t
		name := smallName(dir, i)
		if err := syscall.Lstat(name, &st); err != nil {
			return 0, fmt.Errorf("lstat %s: %w", name, err)
		}
		if st.Size != pageSize {
			return 0, fmt.Errorf("%s has size %d, want %d", name, st.Size, pageSize)
		}
	}
	return opsps(n, time.Since(start)), nil
}

// deleteFiles unlinks every file.
func deleteFiles(dir string, n int) (float64, error) {
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := syscall.Unlink(smallName(dir, i)); err != nil {
			return 0, fmt.Errorf("unlink: %w", err)
		}
	}
	return opsps(n, time.Since(start)), nil
}

func mibps(n int64, d time.Duration) float64 { return float64(n) / MiB / d.Seconds() }
func opsps(n int, d time.Duration) float64   { return float64(n) / d.Seconds() }

// fillGen writes the content that generation gen of the random-overwrite
// workload puts at [off, off+len(dst)) (aligned pages): generation 0 is
// the pattern the file starts with; a later one is another page of the
// random base for each page, headed by its page number and gen, so that
// every write differs from what it replaces and stays incompressible.
func (p *pattern) fillGen(dst []byte, off int64, gen uint32) {
	if gen == 0 {
		p.fill(dst, off)
		return
	}
	const basePages = patternSize / pageSize
	for i := 0; i < len(dst); i += pageSize {
		pg := uint64(off+int64(i)) / pageSize
		src := (pg*2654435761 + uint64(gen)*40503) % basePages * pageSize
		d := dst[i : i+pageSize]
		copy(d, p.base[src:src+pageSize])
		binary.LittleEndian.PutUint64(d, pg)
		binary.LittleEndian.PutUint64(d[8:], uint64(gen))
	}
}

// fsyncLoop writes n pages at sequential aligned offsets of a new file,
// each pwrite followed by an fsync, and returns ops/s (one op = a pwrite
// and its fsync; the open and close are not timed).
func fsyncLoop(p *pattern, path string, n int) (float64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, pageSize)
	start := time.Now()
	for i := 0; i < n; i++ {
		off := int64(i) * pageSize
		p.fill(buf, off)
		if _, err := f.WriteAt(buf, off); err != nil {
			return 0, fmt.Errorf("pwrite at %d: %w", off, err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("fsync after the pwrite at %d: %w", off, err)
		}
	}
	el := time.Since(start)
	if err := f.Close(); err != nil {
		return 0, err
	}
	return opsps(n, el), nil
}

// verifyFile reads path from start to end in 1 MiB reads and checks its
// size and every page against want(dst, off), which fills dst with the
// content expected at off.
func verifyFile(path string, size int64, want func(dst []byte, off int64)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != size {
		return fmt.Errorf("%s has size %d, want %d", path, st.Size(), size)
	}
	buf := make([]byte, blockSize)
	exp := make([]byte, blockSize)
	for off := int64(0); off < size; off += blockSize {
		n := int(min(blockSize, size-off))
		if _, err := io.ReadFull(io.NewSectionReader(f, off, int64(n)), buf[:n]); err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		want(exp[:n], off)
		if !bytes.Equal(buf[:n], exp[:n]) {
			for i := 0; i < n; i += pageSize {
				if !bytes.Equal(buf[i:i+pageSize], exp[i:i+pageSize]) {
					return fmt.Errorf("wrong data in the page at %d", off+int64(i))
				}
			}
		}
	}
	return nil
}

// overwritePlan is the random-overwrite workload: writes random aligned
// pages of a file of size, an fsync after every fsyncEvery of them and
// after the last. The same for every target (from the seed).
type overwritePlan struct {
	size       int64
	offs       []int64
	fsyncEvery int
}

func newOverwritePlan(seed uint64, size int64, writes, fsyncEvery int) *overwritePlan {
	r := rand.New(rand.NewPCG(seed, 0x6f76657277726974))
	offs := make([]int64, writes)
	pages := size / pageSize
	for i := range offs {
		offs[i] = r.Int64N(pages) * pageSize
	}
	return &overwritePlan{size: size, offs: offs, fsyncEvery: fsyncEvery}
}

// model returns, for every page of the file, the generation of its last
// write (0: the sequential content; write i is generation i+1).
func (w *overwritePlan) model() []uint32 {
	gen := make([]uint32, w.size/pageSize)
	for i, off := range w.offs {
		gen[off/pageSize] = uint32(i + 1)
	}
	return gen
}

// run performs the writes on the existing file at path and returns ops/s
// (one op = one 4 KiB pwrite; the fsyncs are in the time, the open and
// close are not).
func (w *overwritePlan) run(p *pattern, path string) (float64, time.Duration, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	buf := make([]byte, pageSize)
	start := time.Now()
	for i, off := range w.offs {
		p.fillGen(buf, off, uint32(i+1))
		if _, err := f.WriteAt(buf, off); err != nil {
			return 0, 0, fmt.Errorf("pwrite at %d: %w", off, err)
		}
		if (i+1)%w.fsyncEvery == 0 || i == len(w.offs)-1 {
			if err := f.Sync(); err != nil {
				return 0, 0, fmt.Errorf("fsync after write %d: %w", i+1, err)
			}
		}
	}
	el := time.Since(start)
	if err := f.Close(); err != nil {
		return 0, 0, err
	}
	return opsps(len(w.offs), el), el, nil
}

// verify checks the whole file against the model.
func (w *overwritePlan) verify(p *pattern, path string) error {
	gen := w.model()
	return verifyFile(path, w.size, func(dst []byte, off int64) {
		for i := 0; i < len(dst); i += pageSize {
			o := off + int64(i)
			p.fillGen(dst[i:i+pageSize], o, gen[o/pageSize])
		}
	})
}
