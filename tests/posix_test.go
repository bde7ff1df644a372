package tests

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestMountSourceAndRemount: the mount's source is the config file (as
// findmnt and df show it), "mount -o remount" with the same options
// succeeds and leaves the mount working, and one asking for a change fails
// with a clear message and changes nothing.
func TestMountSourceAndRemount(t *testing.T) {
	t.Parallel()
	need(t, "mount", "findmnt", "df")
	e := newEnv(t)
	e.init()
	installHelper(t)
	p := e.mount()

	if r := e.run("findmnt", "-n", "-o", "SOURCE", e.mnt); r.code != 0 || strings.TrimSpace(r.stdout) != e.cfg {
		t.Fatalf("findmnt SOURCE = %q, want the config file %s (%s)", strings.TrimSpace(r.stdout), e.cfg, r)
	}
	if r := e.run("df", "--output=source", e.mnt); r.code != 0 || !strings.Contains(r.stdout, e.cfg) {
		t.Fatalf("df does not name the config file %s: %s", e.cfg, r)
	}
	// And the mount can be found by it.
	if r := e.run("findmnt", "-n", "-o", "TARGET", "--source", e.cfg); r.code != 0 || strings.TrimSpace(r.stdout) != e.mnt {
		t.Fatalf("findmnt --source %s: %s", e.cfg, r)
	}

	for _, opts := range []string{"remount", "remount,rw", "remount,nosuid,nodev,_netdev"} {
		if r := e.run("mount", "-o", opts, e.mnt); r.code != 0 {
			t.Fatalf("mount -o %s: %s", opts, r)
		}
		if !isLiveMount(e.mnt) {
			t.Fatalf("mount -o %s left no live mount", opts)
		}
		writeFile(t, e.path("after-"+opts), []byte(opts))
	}

	for _, c := range []struct{ opts, want string }{
		{"remount,ro", "from read-write to read-only"},
		{"remount,noexec", "cannot be changed"},
	} {
		r := e.run("mount", "-o", c.opts, e.mnt)
		if r.code == 0 {
			t.Fatalf("mount -o %s succeeded; want a refusal", c.opts)
		}
		if !strings.Contains(r.stderr+r.stdout, c.want) {
			t.Errorf("mount -o %s: message lacks %q: %s", c.opts, c.want, r)
		}
		// Nothing changed: still mounted read-write.
		if err := os.WriteFile(e.path("still-rw"), []byte(c.opts), 0o644); err != nil {
			t.Fatalf("after a refused mount -o %s: %v", c.opts, err)
		}
	}
	p.stop()
}

// TestMaxSizeQuota: with [filesystem] max_size, statfs reports that
// capacity, writes past it fail with ENOSPC (and nothing else), everything
// accepted before is kept (fsync succeeds, and it survives kill -9 and
// recovery from the store), and deleting data makes room again.
func TestMaxSizeQuota(t *testing.T) {
	t.Parallel()
	const maxSize = 8 << 20
	e := newEnv(t)
	e.writeConfig("\n[filesystem]\nmax_size = \"8MiB\"\n")
	e.init()
	p := e.mount()

	var st syscall.Statfs_t
	if err := syscall.Statfs(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Blocks * uint64(st.Bsize); got != maxSize {
		t.Fatalf("statfs capacity %d, want max_size %d", got, maxSize)
	}
	if st.Bfree > st.Blocks || st.Bavail != st.Bfree || st.Bfree*uint64(st.Bsize) < maxSize-1<<20 {
		t.Fatalf("statfs of an empty filesystem: blocks %d free %d avail %d", st.Blocks, st.Bfree, st.Bavail)
	}

	f, err := os.OpenFile(e.path("fill"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var accepted []byte
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		chunk := randBytes(t, 256<<10)
		var n int
		n, werr = f.Write(chunk)
		accepted = append(accepted, chunk[:n]...)
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 16 MiB into an 8 MiB filesystem: %v after %d bytes, want ENOSPC", werr, len(accepted))
	}
	t.Logf("ENOSPC after %d bytes accepted (max_size %d)", len(accepted), maxSize)
	if len(accepted) > maxSize || len(accepted) < maxSize-1<<20 {
		t.Fatalf("%d bytes accepted before ENOSPC, want close to and at most %d", len(accepted), maxSize)
	}
	// Full: other files cannot grow either, but metadata still works.
	if err := os.WriteFile(e.path("more"), randBytes(t, 1<<20), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write to another file when full: %v, want ENOSPC", err)
	}
	if err := os.Mkdir(e.path("dir"), 0o755); err != nil {
		t.Fatalf("mkdir when full: %v", err)
	}
	// What was accepted is kept: fsync succeeds and the data survives.
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after ENOSPC: %v", err)
	}
	f.Close()
	if err := syscall.Statfs(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Bfree*uint64(st.Bsize) > 1<<20 {
		t.Errorf("statfs free %d blocks when full", st.Bfree)
	}
	p.kill()
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	if got := readFile(t, e.path("fill")); !bytes.Equal(got, accepted) {
		t.Fatalf("after recovery: fill has %d bytes, want the %d accepted", len(got), len(accepted))
	}
	// Deleting gives the space back.
	if err := os.Remove(e.path("fill")); err != nil {
		t.Fatal(err)
	}
	data := randBytes(t, 4<<20)
	writeFile(t, e.path("after-delete"), data)
	fsyncFile(t, e.path("after-delete"))
	p.stop()
}

// stBlocks returns st_blocks and st_size of p.
func stBlocks(t *testing.T, p string) (int64, int64) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks, st.Size
}

// TestFallocateReserves: fallocate reserves what it says: st_blocks counts
// the allocated range (data written into it is not counted twice), KEEP_SIZE
// reserves past the end, punch and truncate give reservations back, the
// reservation survives restarts, and under max_size an allocation larger
// than the free space fails with ENOSPC (xfstests generic/213).
func TestFallocateReserves(t *testing.T) {
	t.Parallel()
	const ext = 32 << 10 // extent size; 64 blocks of 512 bytes
	e := newEnv(t)
	e.writeConfig("\n[filesystem]\nmax_size = \"64MiB\"\n")
	e.init()
	p := e.mount()
	path := e.path("falloc")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	check := func(when string, blocks, size int64) {
		t.Helper()
		b, s := stBlocks(t, path)
		if b != blocks || s != size {
			t.Fatalf("%s: st_blocks %d size %d, want %d and %d", when, b, s, blocks, size)
		}
	}
	if err := syscall.Fallocate(fd, 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	check("after fallocate 0 1MiB", 2048, 1<<20)
	if _, err := f.WriteAt(randBytes(t, 2*ext), 0); err != nil {
		t.Fatal(err)
	}
	check("after writing 64KiB into the reservation", 2048, 1<<20)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	check("after fsync", 2048, 1<<20)
	const keepSize = 1 // FALLOC_FL_KEEP_SIZE
	if err := syscall.Fallocate(fd, keepSize, 1<<20, 1<<20); err != nil {
		t.Fatal(err)
	}
	check("after fallocate -n 1MiB 1MiB", 4096, 1<<20)
	if err := syscall.Fallocate(fd, 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	check("after the same fallocate again", 4096, 1<<20)
	const punch = 2 | keepSize // FALLOC_FL_PUNCH_HOLE
	if err := syscall.Fallocate(fd, punch, 8*ext, 8*ext); err != nil {
		t.Fatal(err)
	}
	check("after punching 8 reserved extents", 4096-8*64, 1<<20)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// The record keeps it: a clean restart, then a crash and recovery
	// from the store alone.
	p.stop()
	p = e.mount()
	check("after a restart", 4096-8*64, 1<<20)
	p.kill()
	if err := os.RemoveAll(e.cache); err != nil {
		t.Fatal(err)
	}
	p = e.mount()
	check("after kill -9 and recovery from the store", 4096-8*64, 1<<20)

	// Truncate drops what lies past the new end (extents 8..15 were
	// punched; 2..7 stay reserved, 0..1 hold data).
	if err := os.Truncate(path, 8*ext); err != nil {
		t.Fatal(err)
	}
	check("after truncating to 256KiB", 8*64, 8*ext)

	// ENOSPC: more than the free space cannot be reserved, and a failed
	// fallocate changes nothing.
	f, err = os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, 1<<30); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fallocate 1GiB under a 64MiB max_size: %v, want ENOSPC", err)
	}
	check("after a refused fallocate", 8*64, 8*ext)
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, 16<<20); err != nil {
		t.Fatalf("fallocate 16MiB under a 64MiB max_size: %v", err)
	}
	check("after fallocate 16MiB", 16<<20/512, 16<<20)
	f.Close()
	p.stop()
}
