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
	n     float64        // MiB/s or ops/s, timed by the workload itself
	wall  time.Duration  // wall time around the workload
	cpu   time.Duration  // the FUSE server's CPU time meanwhile (-1: none)
	store *storeCounters // ebbfs's object-store traffic meanwhile
	drops int64          // page-cache drops by other processes meanwhile
	io    *ioCounters    // the server's block I/O meanwhile
	hwm   int64          // the server's VmHWM after the workload (0: unknown)
	tries int            // attempts made (warm reads retry when disturbed)
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

// randRead preads one verified page at each offset and returns ops/s.
func randRead(p *pattern, path string, offs []int64) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, pageSize)
	want := make([]byte, pageSize)
	start := time.Now()
	for _, off := range offs {
		if _, err := f.ReadAt(buf, off); err != nil {
			return 0, fmt.Errorf("pread at %d: %w", off, err)
		}
		p.fill(want, off)
		if !bytes.Equal(buf, want) {
			return 0, fmt.Errorf("wrong data in the page at %d", off)
		}
	}
	return opsps(len(offs), time.Since(start)), nil
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
