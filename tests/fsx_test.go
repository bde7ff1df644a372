package tests

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFSX is a file-system exerciser in the manner of fsx: random
// operations on one file of a mount on default settings (32 KiB extents,
// partial writes stored as patches), each checked against a model in
// memory: partial writes inside the file and past its end, reads,
// truncates down and up, punched holes, writes and reads through a
// shared mapping (msync'ed), fsyncs. Every read compares what it got;
// the whole file is compared every 10,000 operations, and at the end
// again after a remount with an empty cache (every byte from the store),
// after which fsck --verify-data must be clean. EBBFS_FSX_OPS sets the
// number of operations (20,000 by default; the issue asks for
// 1,000,000).
func TestFSX(t *testing.T) {
	t.Parallel()
	ops := 20000
	if s := os.Getenv("EBBFS_FSX_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("EBBFS_FSX_OPS=%q", s)
		}
		ops = n
	}
	e := newEnv(t)
	e.init()
	p := e.mount()
	path := e.path("fsx")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	x := &fsx{t: t, f: f, rng: rand.New(rand.NewPCG(34, uint64(ops)))}
	for i := 1; i <= ops; i++ {
		x.step(i)
		if i%10000 == 0 {
			x.checkAll(i)
		}
		if i%50000 == 0 {
			t.Logf("fsx: %d operations checked", i)
		}
	}
	x.checkAll(ops)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Logf("fsx: %d operations: %v", ops, x.count)
	p.stop()
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	if got := readFile(t, path); !bytes.Equal(got, x.model) {
		t.Fatalf("after a remount with an empty cache the file differs (%d bytes, want %d)", len(got), len(x.model))
	}
	p.stop()
	if r := e.ebbfs("fsck", "--verify-data"); r.code != 0 {
		t.Fatalf("fsck --verify-data: %s", r)
	}
}

// fsxMax is the largest the file grows: 8 extents of 32 KiB and a bit.
const fsxMax = 8*32768 + 5000

type fsx struct {
	t     *testing.T
	f     *os.File
	rng   *rand.Rand
	model []byte
	count map[string]int
}

func (x *fsx) step(i int) {
	if x.count == nil {
		x.count = map[string]int{}
	}
	fd := int(x.f.Fd())
	size := len(x.model)
	switch op := x.rng.IntN(100); {
	case op < 35 || size == 0: // a write, mostly small, anywhere up to past the end
		off := x.rng.IntN(min(size+1, fsxMax-1))
		n := 1 + x.rng.IntN(min(x.smallLen(), fsxMax-off))
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(x.rng.Uint32())
		}
		if k, err := unix.Pwrite(fd, b, int64(off)); err != nil || k != n {
			x.t.Fatalf("op %d: pwrite %d at %d: %d, %v", i, n, off, k, err)
		}
		x.grow(off + n)
		copy(x.model[off:], b)
		x.count["write"]++
	case op < 60: // a read
		off := x.rng.IntN(size)
		n := 1 + x.rng.IntN(x.smallLen())
		b := make([]byte, n)
		k, err := unix.Pread(fd, b, int64(off))
		want := x.model[off:min(off+n, size)]
		if err != nil || !bytes.Equal(b[:k], want) {
			x.t.Fatalf("op %d: pread %d at %d: %d bytes (want %d), %v; the bytes differ", i, n, off, k, len(want), err)
		}
		x.count["read"]++
	case op < 68: // truncate, down or up
		to := x.rng.IntN(fsxMax)
		if err := unix.Ftruncate(fd, int64(to)); err != nil {
			x.t.Fatalf("op %d: truncate to %d: %v", i, to, err)
		}
		if to < size {
			x.model = x.model[:to]
		} else {
			x.grow(to)
		}
		x.count["truncate"]++
	case op < 78: // punch a hole
		off := x.rng.IntN(size)
		n := 1 + x.rng.IntN(x.smallLen())
		if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(n)); err != nil {
			x.t.Fatalf("op %d: punch %d at %d: %v", i, n, off, err)
		}
		clear(x.model[off:min(off+n, size)])
		x.count["punch"]++
	case op < 88: // a write through a shared mapping
		x.mapped(i, true)
	case op < 95: // a read through a mapping
		x.mapped(i, false)
	default:
		if err := x.f.Sync(); err != nil {
			x.t.Fatalf("op %d: fsync: %v", i, err)
		}
		x.count["fsync"]++
	}
}

// smallLen is a length for an operation: mostly under 8 KiB, sometimes
// up to 3 extents.
func (x *fsx) smallLen() int {
	if x.rng.IntN(8) == 0 {
		return 3 * 32768
	}
	return 8192
}

func (x *fsx) grow(to int) {
	if to > len(x.model) {
		x.model = append(x.model, make([]byte, to-len(x.model))...)
	}
}

// mapped writes (or reads) a random range of the file through a shared
// mapping of it; a write is msync'ed before the mapping goes.
func (x *fsx) mapped(i int, write bool) {
	size := len(x.model)
	if size == 0 {
		return
	}
	off := x.rng.IntN(size)
	n := 1 + x.rng.IntN(min(x.smallLen(), size-off))
	page := off &^ 4095
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	m, err := unix.Mmap(int(x.f.Fd()), int64(page), off+n-page, prot, unix.MAP_SHARED)
	if err != nil {
		x.t.Fatalf("op %d: mmap %d at %d: %v", i, off+n-page, page, err)
	}
	defer unix.Munmap(m)
	if !write {
		if !bytes.Equal(m[off-page:], x.model[off:off+n]) {
			x.t.Fatalf("op %d: a mapped read of %d at %d differs", i, n, off)
		}
		x.count["mapread"]++
		return
	}
	for j := off - page; j < len(m); j++ {
		m[j] = byte(x.rng.Uint32())
	}
	copy(x.model[off:], m[off-page:])
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		x.t.Fatalf("op %d: msync: %v", i, err)
	}
	x.count["mapwrite"]++
}

// checkAll compares the whole file, and its size, with the model.
func (x *fsx) checkAll(i int) {
	fi, err := x.f.Stat()
	if err != nil {
		x.t.Fatal(err)
	}
	if fi.Size() != int64(len(x.model)) {
		x.t.Fatalf("after op %d: size %d, want %d", i, fi.Size(), len(x.model))
	}
	b := make([]byte, len(x.model)+100)
	k, err := unix.Pread(int(x.f.Fd()), b, 0)
	if err != nil || !bytes.Equal(b[:k], x.model) {
		x.t.Fatalf("after op %d: the file differs from the model (%d bytes, want %d), %v", i, k, len(x.model), err)
	}
}
