package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The scale test: many files and a large sparse file on a local-directory
// store, through the real binary and a real FUSE mount. make test runs a
// small version (20,000 files in two directories, a 1 GiB sparse file);
// EBBFS_SCALE=1 (make bench-scale) runs the full one: a million files in
// ten directories of 100,000 and a 100 GiB sparse file. Either way it
// checks that readdir returns every name exactly once, that the writer's
// peak RSS stays under its documented bound, that fsck finds the filesystem
// consistent, and that a new cache directory recovers everything from the
// store alone; it logs the rates and times (the figures of bench/README.md).

type scaleSize struct {
	dirs, perDir int   // files = dirs * perDir
	sparse       int64 // size of the sparse file
	writes       int   // random 4 KiB writes into it
	workers      int   // concurrent processes' worth of goroutines
	timeout      time.Duration
}

func scaleSizeFromEnv() scaleSize {
	if os.Getenv("EBBFS_SCALE") == "1" {
		return scaleSize{dirs: 10, perDir: 100_000, sparse: 100 << 30, writes: 100_000, workers: 4, timeout: 20 * time.Minute}
	}
	return scaleSize{dirs: 2, perDir: 10_000, sparse: 1 << 30, writes: 2_000, workers: 4, timeout: 3 * time.Minute}
}

// scaleMemorySize is the writer's cache.memory_size in this test; its
// resident memory bound is this plus 448 MiB (README, cache.memory_size).
const (
	scaleMemorySize = 64 << 20
	scaleRSSBound   = scaleMemorySize + 448<<20
)

func TestScale(t *testing.T) {
	sz := scaleSizeFromEnv()
	e := newEnv(t)
	e.init()
	p := e.mount()
	pid := p.cmd.Process.Pid
	files := sz.dirs * sz.perDir
	t.Logf("scale: %d files in %d directories of %d, a %d GiB sparse file with %d random 4 KiB writes, %d workers",
		files, sz.dirs, sz.perDir, sz.sparse>>30, sz.writes, sz.workers)
	fig := &scaleFigures{}

	name := func(prefix string, i int) string {
		return filepath.Join(e.mnt, fmt.Sprintf("d%d", i/sz.perDir), fmt.Sprintf("%s%07d", prefix, i))
	}
	for d := range sz.dirs {
		if err := os.Mkdir(e.path(fmt.Sprintf("d%d", d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Create: empty files, no fsync (the periodic barrier runs meanwhile).
	fig.phase(t, "create", files, pid, func() {
		scaleParallel(t, files, sz.workers, func(i int) error {
			f, err := os.OpenFile(name("f", i), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		})
	})
	fig.phase(t, "flush after create", 1, pid, func() { e.mustEbbfs("flush") })

	// Stat, the kernel's dentries and inodes dropped first (every stat is
	// a lookup through FUSE).
	dropDentries(t)
	fig.phase(t, "stat", files, pid, func() {
		scaleParallel(t, files, sz.workers, func(i int) error {
			fi, err := os.Lstat(name("f", i))
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() || fi.Size() != 0 {
				return fmt.Errorf("%s: mode %v size %d", fi.Name(), fi.Mode(), fi.Size())
			}
			return nil
		})
	})

	// Readdir of one full directory: every name exactly once.
	dropDentries(t)
	fig.phase(t, "readdir", sz.perDir, pid, func() {
		if err := scaleCheckDir(e.path("d0"), "f", 0, sz.perDir); err != nil {
			t.Fatal(err)
		}
	})

	// Rename: every file to the next directory under a new name.
	fig.phase(t, "rename", files, pid, func() {
		scaleParallel(t, files, sz.workers, func(i int) error {
			j := (i + sz.perDir) % files
			return os.Rename(name("f", i), filepath.Join(filepath.Dir(name("f", j)), fmt.Sprintf("g%07d", i)))
		})
	})
	fig.phase(t, "readdir after rename", sz.perDir, pid, func() {
		// d1 now holds g0000000.. of what d0 held.
		if err := scaleCheckDir(e.path("d1"), "g", 0, sz.perDir); err != nil {
			t.Fatal(err)
		}
	})

	// The sparse file: random 4 KiB writes at 4 KiB-aligned offsets, then
	// one fsync.
	sparse := e.path("sparse")
	writes := scaleSparseWrites(sz)
	fig.phase(t, "sparse random writes + fsync", len(writes), pid, func() {
		f, err := os.OpenFile(sparse, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(sz.sparse); err != nil {
			t.Fatal(err)
		}
		var next atomic.Int64
		scaleParallel(t, sz.workers, sz.workers, func(int) error {
			buf := make([]byte, 4096)
			for {
				k := int(next.Add(1)) - 1
				if k >= len(writes) {
					return nil
				}
				scaleBlock(buf, writes[k])
				if _, err := f.WriteAt(buf, writes[k]); err != nil {
					return err
				}
			}
		})
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync: %v", err)
		}
	})
	fig.phase(t, "sparse verify", len(writes), pid, func() {
		if err := scaleVerifySparse(sparse, sz.sparse, writes); err != nil {
			t.Fatal(err)
		}
	})

	e.mustEbbfs("flush")
	hwm := scaleProcKiB(t, pid, "VmHWM")
	fig.add("writer peak RSS (VmHWM)", fmt.Sprintf("%d MiB (bound %d MiB)", hwm>>10, scaleRSSBound>>20))
	p.stop()
	if limit := int64(scaleRSSBound) >> 10; hwm > limit {
		t.Errorf("writer peak RSS %d KiB over its bound %d KiB", hwm, limit)
	}

	// fsck of the full tree.
	scaleFsck(t, e, fig, "fsck", files+sz.dirs+2)

	// Recovery from the store alone: a new cache directory, mount, first
	// stat.
	r := e.sameStore()
	start := time.Now()
	rp := r.start()
	// A longer deadline than waitMounted's: a recovery of a million files
	// replays the journal first.
	if !rp.waitUp(sz.timeout, false) {
		t.Fatalf("ebbfs run exited with %d before mounting:\n%s", rp.code, tail(rp.out.String(), 80))
	}
	mounted := time.Since(start)
	if _, err := os.Lstat(filepath.Join(r.mnt, "d1", "g0000000")); err != nil {
		t.Fatalf("first stat after recovery: %v", err)
	}
	fig.add("recovery (new cache dir): mounted / first stat", fmt.Sprintf("%.2f s / %.2f s", mounted.Seconds(), time.Since(start).Seconds()))
	rpid := rp.cmd.Process.Pid
	name = func(prefix string, i int) string {
		return filepath.Join(r.mnt, fmt.Sprintf("d%d", i/sz.perDir), fmt.Sprintf("%s%07d", prefix, i))
	}
	fig.phase(t, "readdir after recovery", sz.perDir, rpid, func() {
		if err := scaleCheckDir(filepath.Join(r.mnt, "d1"), "g", 0, sz.perDir); err != nil {
			t.Fatal(err)
		}
	})
	fig.phase(t, "sparse verify after recovery", len(writes), rpid, func() {
		if err := scaleVerifySparse(filepath.Join(r.mnt, "sparse"), sz.sparse, writes); err != nil {
			t.Fatal(err)
		}
	})

	// Delete everything on the recovered mount.
	fig.phase(t, "delete", files, rpid, func() {
		scaleParallel(t, files, sz.workers, func(i int) error {
			j := (i + sz.perDir) % files
			return os.Remove(filepath.Join(filepath.Dir(name("f", j)), fmt.Sprintf("g%07d", i)))
		})
	})
	for d := range sz.dirs {
		if err := os.Remove(filepath.Join(r.mnt, fmt.Sprintf("d%d", d))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(r.mnt, "sparse")); err != nil {
		t.Fatal(err)
	}
	r.mustEbbfs("flush")
	rhwm := scaleProcKiB(t, rpid, "VmHWM")
	fig.add("recovered writer peak RSS (VmHWM)", fmt.Sprintf("%d MiB", rhwm>>10))
	rp.stop()
	if limit := int64(scaleRSSBound) >> 10; rhwm > limit {
		t.Errorf("recovered writer peak RSS %d KiB over its bound %d KiB", rhwm, limit)
	}
	scaleFsck(t, r, fig, "fsck after delete", 1)
	t.Logf("scale figures (%d files, %d GiB sparse file):\n%s", files, sz.sparse>>30, fig)
}

// scaleFigures collects the lines of the closing table.
type scaleFigures struct {
	b strings.Builder
}

func (f *scaleFigures) add(what, value string) {
	fmt.Fprintf(&f.b, "  %-48s %s\n", what, value)
}

func (f *scaleFigures) String() string { return f.b.String() }

// phase times fn, which does n operations, and records the rate and the
// writer's RSS after it.
func (f *scaleFigures) phase(t *testing.T, what string, n int, pid int, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	d := time.Since(start)
	rss := scaleProcKiB(t, pid, "VmRSS")
	line := fmt.Sprintf("%.1f s", d.Seconds())
	if n > 1 {
		line = fmt.Sprintf("%.0f ops/s (%d in %.1f s)", float64(n)/d.Seconds(), n, d.Seconds())
	}
	f.add(what, fmt.Sprintf("%s, writer RSS %d MiB", line, rss>>10))
	t.Logf("%s: %s, writer RSS %d MiB", what, line, rss>>10)
}

// scaleParallel runs fn(i) for i in [0, n) over workers goroutines and
// fails the test on the first error.
func scaleParallel(t *testing.T, n, workers int, fn func(i int) error) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		mu    sync.Mutex
		first error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n)) // stop the others
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// scaleCheckDir reads dir in chunks of 1,000 entries and requires exactly
// prefix+%07d for i in [lo, lo+n), each once, and nothing else.
func scaleCheckDir(dir, prefix string, lo, n int) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	seen := make([]bool, n)
	count := 0
	for {
		names, err := f.Readdirnames(1000)
		for _, nm := range names {
			i, perr := strconv.Atoi(strings.TrimPrefix(nm, prefix))
			if !strings.HasPrefix(nm, prefix) || perr != nil || i < lo || i >= lo+n {
				return fmt.Errorf("readdir %s: unexpected name %q", dir, nm)
			}
			if seen[i-lo] {
				return fmt.Errorf("readdir %s: %q listed twice", dir, nm)
			}
			seen[i-lo] = true
			count++
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("readdir %s: %w", dir, err)
		}
	}
	if count != n {
		return fmt.Errorf("readdir %s: %d names, want %d", dir, count, n)
	}
	return nil
}

// scaleSparseWrites returns distinct random 4 KiB-aligned offsets below
// size (seeded: the same every run).
func scaleSparseWrites(sz scaleSize) []int64 {
	rng := rand.New(rand.NewPCG(13, 5))
	seen := make(map[int64]bool, sz.writes)
	out := make([]int64, 0, sz.writes)
	for len(out) < sz.writes {
		off := rng.Int64N(sz.sparse/4096) * 4096
		if !seen[off] {
			seen[off] = true
			out = append(out, off)
		}
	}
	return out
}

// scaleBlock fills buf with the content written at off.
func scaleBlock(buf []byte, off int64) {
	rng := rand.New(rand.NewPCG(uint64(off), 0x5ca1e))
	for i := 0; i < len(buf); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			buf[i+j] = byte(v >> (8 * j))
		}
	}
}

// scaleVerifySparse checks the file's size, every written block, and a
// hole beside each of the first 1,000 writes (zeroes unless written).
func scaleVerifySparse(p string, size int64, writes []int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != size {
		return fmt.Errorf("%s: size %d, want %d", p, fi.Size(), size)
	}
	written := make(map[int64]bool, len(writes))
	for _, off := range writes {
		written[off] = true
	}
	want := make([]byte, 4096)
	got := make([]byte, 4096)
	zero := make([]byte, 4096)
	for k, off := range writes {
		scaleBlock(want, off)
		if _, err := f.ReadAt(got, off); err != nil {
			return fmt.Errorf("%s: read at %d: %w", p, off, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: block at %d differs from what was written", p, off)
		}
		if hole := off + 4096; k < 1000 && hole < size && !written[hole] {
			if _, err := f.ReadAt(got, hole); err != nil {
				return fmt.Errorf("%s: read at %d: %w", p, hole, err)
			}
			if !bytes.Equal(got, zero) {
				return fmt.Errorf("%s: hole at %d is not zeroes", p, hole)
			}
		}
	}
	return nil
}

// scaleFsck runs ebbfs fsck (no 2-minute limit here), records its time
// and peak RSS, and requires a consistent filesystem with at least
// minInodes inodes.
func scaleFsck(t *testing.T, e *env, fig *scaleFigures, what string, minInodes int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := e.command(ctx, ebbfsBin, "fsck", "-c", e.cfg)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr (tail):\n%s", what, err, so.String(), tail(se.String(), 40))
	}
	out := so.String()
	if !strings.Contains(out, "filesystem is consistent") {
		t.Fatalf("%s: %s", what, out)
	}
	var inodes int
	if _, err := fmt.Sscanf(out, "inodes %d,", &inodes); err != nil || inodes < minInodes {
		t.Fatalf("%s: %d inodes (%v), want at least %d:\n%s", what, inodes, err, minInodes, out)
	}
	maxrss := int64(0)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxrss = ru.Maxrss // KiB on Linux
	}
	fig.add(what, fmt.Sprintf("%.1f s, peak RSS %d MiB, %s", d.Seconds(), maxrss>>10, strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])))
	t.Logf("%s: %.1f s, peak RSS %d MiB", what, d.Seconds(), maxrss>>10)
}

// scaleProcKiB reads a "kB" field of /proc/PID/status.
func scaleProcKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %q", pid, field, line)
			}
			return v
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// dropDentries makes the kernel forget dentries and inodes (not the page
// cache), so the next lookups go to the FUSE server.
func dropDentries(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		t.Logf("drop_caches: %v (lookups may be served by the kernel's cache)", err)
	}
}
