package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/internal/testutil"
)

// cacheFS is a small ext4 filesystem on a loop device that holds the
// writer's cache directory.
type cacheFS struct {
	dir string // mountpoint
}

// newCacheFS makes a size-byte ext4 image (no blocks reserved for root:
// full means full, for ebbfs too), mounts it under e.dir and moves e's
// cache directory onto it. Cleanup unmounts and detaches it after the
// writer is gone (it must be called before the writer starts).
func newCacheFS(t *testing.T, e *env, size int64) *cacheFS {
	t.Helper()
	need(t, "mkfs.ext4", "losetup", "mount", "umount")
	img := filepath.Join(e.dir, "cache.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if r := e.run("mkfs.ext4", "-q", "-F", "-m", "0", img); r.code != 0 {
		t.Fatalf("mkfs.ext4: %s", r)
	}
	dev, _ := e.loopAttach(t, img)
	c := &cacheFS{dir: filepath.Join(e.dir, "cachefs")}
	if err := os.Mkdir(c.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.mountExt4(t, dev, c.dir)
	e.cache = filepath.Join(c.dir, "cache")
	e.writeConfig("")
	return c
}

// free is the space left on the filesystem for unprivileged use (with no
// root reserve, the same for ebbfs).
func (c *cacheFS) free(t testing.TB) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(c.dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill takes all the free space with one file (fallocate), or as much as
// the filesystem gives; it returns the bytes the file holds. (A
// fallocate that fails with ENOSPC on ext4 may keep what it allocated, so
// the result is the file's blocks, not the sum of the calls that
// succeeded.)
func (c *cacheFS) fill(t testing.TB, name string) int64 { return c.fillLeaving(t, name, 0) }

// fillFree takes what is free when it starts and no more: space the disk
// cache gives back while it allocates is left free (fill would take that
// too, and leave the cache nothing to give).
func (c *cacheFS) fillFree(t testing.TB, name string) int64 {
	return c.fillUpTo(t, name, 0, c.free(t))
}

// fillLeaving is fill that stops with about leave bytes still free.
func (c *cacheFS) fillLeaving(t testing.TB, name string, leave int64) int64 {
	return c.fillUpTo(t, name, leave, 1<<62)
}

// fillUpTo allocates a file of at most most bytes, stopping with about
// leave bytes still free.
func (c *cacheFS) fillUpTo(t testing.TB, name string, leave, most int64) int64 {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(c.dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for chunk := int64(64 << 20); chunk >= 4096; {
		fi, _ := f.Stat()
		if leave > 0 && c.free(t)-chunk < leave || fi.Size()+chunk > most {
			chunk /= 2
			continue
		}
		err := unix.Fallocate(int(f.Fd()), 0, fi.Size(), chunk)
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("fallocate filler: %v", err)
		}
		chunk /= 2
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// appErr records what an application saw.
type appErrs struct {
	seen map[string]int
}

func (a *appErrs) add(op string, err error) {
	if err == nil {
		return
	}
	var errno syscall.Errno
	name := err.Error()
	if errors.As(err, &errno) {
		name = errno.Error()
	}
	a.seen[op+": "+name]++
}

func (a *appErrs) String() string {
	if len(a.seen) == 0 {
		return "none"
	}
	var parts []string
	for k, v := range a.seen {
		parts = append(parts, fmt.Sprintf("%s x%d", k, v))
	}
	return strings.Join(parts, "; ")
}

// TestCacheDiskFull: the writer's cache directory is on a 96 MiB ext4
// filesystem (a loop device) and its disk cache may grow to 1 GiB.
// Reading 160 MiB through it, the cache stops short of filling the disk
// (it keeps a tenth free, watching statfs). A file that takes all the free
// space: the cache gives its space back and writes go on with no error.
// A second one that takes what the cache gave back: new writes fail with
// ENOSPC (and only they), while data written before is fsynced, reads,
// creates and deletes go on. The filler files deleted: writes work again,
// same mount. After kill -9 and a restart every fsynced file reads back,
// and fsck is clean.
func TestCacheDiskFull(t *testing.T) {
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "full", srv.AccessKey, srv.SecretKey))
	c := newCacheFS(t, e, 96<<20)
	e.init()
	w := e.mount()
	const floor = 8 << 20 // fs.cacheDiskFloor of a small filesystem
	t.Logf("cache filesystem: %.1f MiB free at start", float64(c.free(t))/mib)
	synced := map[string]uint64{} // fsynced file -> id (content blocks(id, 0, n, 1))
	sizes := map[string]int{}
	put := func(name string, id uint64, n int) error {
		p := e.path(name)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Write(blocks(id, 0, n, 1)); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync %s: %v", name, err) // never acceptable
		}
		synced[name], sizes[name] = id, n
		return nil
	}

	// 160 MiB read back through the disk cache, free space sampled.
	for i := range 8 {
		if err := put(fmt.Sprintf("f%d.0", 10+i), uint64(10+i), 20*mib/blockSize); err != nil {
			t.Fatal(err)
		}
	}
	minFree := c.free(t)
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var st unix.Statfs_t
			if unix.Statfs(c.dir, &st) == nil {
				minFree = min(minFree, int64(st.Bavail)*st.Bsize)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	for i := range 8 {
		name := fmt.Sprintf("f%d.0", 10+i)
		dropPageCache(t, e.path(name))
		if err := checkContent(uint64(10+i), readFile(t, e.path(name))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	close(stop)
	<-sampled
	m := e.scrapeUnix()
	cached := m.sum("ebbfs_cache_bytes", `level="disk"`)
	t.Logf("read 160 MiB: the disk cache holds %.1f MiB; lowest free space seen %.1f MiB", cached/mib, float64(minFree)/mib)
	if cached < 16*mib || minFree < floor {
		t.Fatalf("disk cache %.1f MiB, lowest free %.1f MiB: want it to fill up to its reserve and no further", cached/mib, float64(minFree)/mib)
	}

	// Something else takes all the free space: the cache gives way.
	fillers := 1
	taken := c.fillFree(t, "filler1")
	d := testutil.Eventually(t, time.Minute, "the disk cache giving space back", func() bool { return c.free(t) >= floor })
	t.Logf("filler 1 took %.1f MiB; %v later %.1f MiB are free again (disk cache %.1f MiB)",
		float64(taken)/mib, d.Round(time.Millisecond), float64(c.free(t))/mib, e.scrapeUnix().sum("ebbfs_cache_bytes", `level="disk"`)/mib)
	errsA := &appErrs{seen: map[string]int{}}
	for i := range 10 {
		errsA.add("create+write", put(fmt.Sprintf("a%d.0", 100+i), uint64(100+i), 256))
		errsA.add("mkdir", os.Mkdir(e.path(fmt.Sprintf("da%d", i)), 0o755))
	}
	t.Logf("errors applications saw after filler 1: %s", errsA)
	if len(errsA.seen) != 0 {
		t.Errorf("the disk cache held space to give back, yet applications saw errors: %s", errsA)
	}

	// Held open across the second fill: written before, fsynced after.
	held, err := os.OpenFile(e.path("held"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Write(blocks(300, 0, 256, 1)); err != nil {
		t.Fatal(err)
	}
	// Fill again whatever the disk cache gives back until it has nothing
	// left to give, leaving 6 MiB: below the floor, above the level where
	// the metadata store's reserve is released (TestCacheDiskFullToZero
	// takes that too).
	for i := 0; ; i++ {
		c.fillLeaving(t, fmt.Sprintf("filler%d", 2+i), 6<<20)
		time.Sleep(1500 * time.Millisecond) // the cache's watcher runs every second
		if e.scrapeUnix().sum("ebbfs_cache_bytes", `level="disk"`) == 0 && c.free(t) < floor {
			fillers = 2 + i
			break
		}
		if i == 20 {
			t.Fatalf("the disk cache still holds %.1f MiB", e.scrapeUnix().sum("ebbfs_cache_bytes", `level="disk"`)/mib)
		}
	}
	t.Logf("%d filler files: %.1f MiB free, the disk cache is empty", fillers, float64(c.free(t))/mib)
	if err := held.Sync(); err != nil {
		t.Fatalf("fsync of data written before the disk filled: %v", err)
	}
	held.Close()
	synced["held"], sizes["held"] = 300, 256
	errsB := &appErrs{seen: map[string]int{}}
	for i := range 10 {
		// New data into an existing file, a new file, a new directory.
		f, err := os.OpenFile(e.path(fmt.Sprintf("a%d.0", 100+i)), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Write(blocks(999, 0, 1, 1))
		f.Close()
		errsB.add("write", err)
		errsB.add("create", os.WriteFile(e.path(fmt.Sprintf("b%d.0", 200+i)), nil, 0o644))
		errsB.add("mkdir", os.Mkdir(e.path(fmt.Sprintf("db%d", i)), 0o755))
	}
	// Deletes and renames go on.
	for i := range 5 {
		name := fmt.Sprintf("a%d.0", 100+i)
		errsB.add("unlink", os.Remove(e.path(name)))
		delete(synced, name)
		from, to := fmt.Sprintf("a%d.0", 105+i), fmt.Sprintf("r%d.0", 105+i)
		errsB.add("rename", os.Rename(e.path(from), e.path(to)))
		synced[to], sizes[to] = synced[from], sizes[from]
		delete(synced, from)
	}
	for name, id := range synced {
		b, err := os.ReadFile(e.path(name))
		if err == nil {
			err = checkContent(id, b)
		}
		errsB.add("read", err)
	}
	t.Logf("errors applications saw with the cache disk full: %s", errsB)
	for k := range errsB.seen {
		switch k {
		case "write: no space left on device", "create: no space left on device", "mkdir: no space left on device":
		default:
			t.Errorf("with the cache disk full: %s (want ENOSPC for new data and names only)", k)
		}
	}
	for _, op := range []string{"write", "create", "mkdir"} {
		if n := errsB.seen[op+": no space left on device"]; n != 10 {
			t.Errorf("%d of 10 %s calls failed with ENOSPC with %.1f MiB free on the cache disk and nothing cached", n, op, float64(c.free(t))/mib)
		}
	}
	if w.exited() {
		t.Fatalf("the writer exited with the cache disk full:\n%s", tail(w.out.String(), 40))
	}
	// A publication (a checkpoint forces one) waits for room instead of
	// rotating Pebble's log on a full disk.
	if r := e.ebbfs("checkpoint", "create", "full", "--ttl", "1m"); r.code == 0 || !strings.Contains(r.stderr, "full") {
		t.Errorf("checkpoint create with the cache disk full: %s", r)
	} else {
		t.Logf("checkpoint create with the cache disk full: %s", strings.TrimSpace(r.stderr))
	}
	if w.exited() {
		t.Fatalf("the writer exited on a publication with the cache disk full:\n%s", tail(w.out.String(), 60))
	}
	st := e.mustEbbfs("status").stdout
	if !strings.Contains(st, "CACHE DIRECTORY FULL") {
		t.Errorf("ebbfs status with the cache disk full does not say so:\n%s", st)
	}
	for _, l := range strings.Split(st, "\n") {
		if strings.Contains(l, "CACHE DIRECTORY FULL") {
			t.Logf("ebbfs status: %s", l)
		}
	}

	// Space returns: the same mount takes writes again.
	for i := 1; i <= fillers; i++ {
		if err := os.Remove(filepath.Join(c.dir, fmt.Sprintf("filler%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	errsC := &appErrs{seen: map[string]int{}}
	for i := range 10 {
		errsC.add("create+write", put(fmt.Sprintf("c%d.0", 400+i), uint64(400+i), 256))
	}
	t.Logf("errors applications saw once the fillers were deleted: %s", errsC)
	if len(errsC.seen) != 0 {
		t.Fatalf("writes after space returned: %s", errsC)
	}
	testutil.Eventually(t, time.Minute, "the writer's log that the cache disk has room again", func() bool {
		return strings.Contains(w.out.String(), "has room again")
	})
	if st := e.mustEbbfs("status").stdout; strings.Contains(st, "CACHE DIRECTORY FULL") {
		t.Errorf("ebbfs status still says the cache directory is full:\n%s", st)
	}
	e.mustEbbfs("checkpoint", "create", "roomy", "--ttl", "1m")
	e.mustEbbfs("checkpoint", "delete", "roomy")

	// A crash: everything fsynced comes back, and fsck is clean.
	w.kill()
	w = e.mount()
	for name, id := range synced {
		b := readFile(t, e.path(name))
		if err := checkContent(id, b); err != nil || len(b) != sizes[name]*blockSize {
			t.Fatalf("%s after kill -9 and restart: %d bytes, %v", name, len(b), err)
		}
	}
	t.Logf("%d fsynced files read back after kill -9 and a restart", len(synced))
	w.stop()
	e.fsckClean()
}

// fillWrite writes to a new file until the filesystem says ENOSPC (after
// fill, this takes the last blocks fallocate left); it returns the bytes
// written.
func (c *cacheFS) fillWrite(t testing.TB, name string) int64 {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(c.dir, name), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if err == nil {
			continue
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write filler: %v", err)
		}
		break
	}
	// Delayed allocation may have accepted bytes it cannot place: fsync
	// finds out, and the file keeps what it got.
	_ = f.Sync()
	return n
}

// TestCacheDiskFullToZero: something outside ebbfs takes all the free
// space of the cache directory's filesystem, down to 0 bytes (fallocate,
// then writes until ENOSPC). The application then does what the writer
// still allows near the floor: renames, chmods and deletes, thousands of
// them (more metadata than one Pebble memtable holds), and an fsync of
// data written before the disk filled; then it waits past a publication
// interval. The writer must still be alive and the fsync must succeed
// (operations that add metadata may fail with ENOSPC, nothing else).
// Once the filler files are gone, writes work again on the same mount;
// after kill -9 and a restart every fsynced file reads back and fsck is
// clean.
func TestCacheDiskFullToZero(t *testing.T) {
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "zero", srv.AccessKey, srv.SecretKey),
		withEnvVars("EBBFS_TEST_MANIFEST_INTERVAL=2s"))
	c := newCacheFS(t, e, 96<<20)
	e.init()
	w := e.mount()
	t.Logf("cache filesystem: %.1f MiB free with the writer running", float64(c.free(t))/mib)

	synced := map[string]uint64{}
	sizes := map[string]int{}
	// Files with long names: each rename or chmod is a few hundred bytes
	// of metadata.
	const nfiles = 300
	long := func(i, gen int) string {
		return fmt.Sprintf("%03d-%d-%s", i, gen, strings.Repeat("n", 200))
	}
	names := make([]string, nfiles)
	for i := range nfiles {
		names[i] = long(i, 0)
		if err := os.WriteFile(e.path(names[i]), blocks(uint64(1000+i), 0, 1, 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		name := fmt.Sprintf("big%d", i)
		if err := os.WriteFile(e.path(name), blocks(uint64(10+i), 0, 2*mib/blockSize, 1), 0o644); err != nil {
			t.Fatal(err)
		}
		synced[name], sizes[name] = uint64(10+i), 2*mib/blockSize
	}
	e.mustEbbfs("flush")
	// Written before the disk fills, fsynced after.
	held, err := os.OpenFile(e.path("held"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.Write(blocks(300, 0, 256, 1)); err != nil {
		t.Fatal(err)
	}

	// The frames the writer uploaded are in its disk cache, which gives
	// them back as the disk fills: take that space first (leaving 6 MiB,
	// above the level where the reserve is released), so that the fill
	// below really ends at zero.
	fillers := []string{"filler1", "filler2"}
	for i := 0; ; i++ {
		name := fmt.Sprintf("pre%d", i)
		c.fillLeaving(t, name, 6<<20)
		fillers = append(fillers, name)
		time.Sleep(1500 * time.Millisecond) // the cache's watcher runs every second
		if e.scrapeUnix().sum("ebbfs_cache_bytes", `level="disk"`) == 0 {
			break
		}
		if i == 20 {
			t.Fatalf("the disk cache still holds %.1f MiB", e.scrapeUnix().sum("ebbfs_cache_bytes", `level="disk"`)/mib)
		}
	}
	taken := c.fill(t, "filler1")
	taken += c.fillWrite(t, "filler2")
	t.Logf("the fillers took %.1f MiB; %.2f MiB free", float64(taken)/mib, float64(c.free(t))/mib)

	// Thousands of metadata changes with the disk full, each with a
	// deadline: a writer whose metadata store stalls would hang them.
	errs := &appErrs{seen: map[string]int{}}
	progress := make(chan struct{}, 1)
	done := make(chan int)
	go func() {
		ops := 0
		tick := func() {
			ops++
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		for round := 1; round <= 20 && !w.exited(); round++ {
			for i := range nfiles {
				next := long(i, round)
				err := os.Rename(e.path(names[i]), e.path(next))
				errs.add("rename", err)
				if err == nil {
					names[i] = next
				}
				tick()
				errs.add("chmod", os.Chmod(e.path(names[i]), os.FileMode(0o600+round%2*0o44)))
				tick()
			}
		}
		for i := 0; i < nfiles; i += 3 {
			errs.add("unlink", os.Remove(e.path(names[i])))
			tick()
		}
		done <- ops
	}()
	var ops int
	for waiting := true; waiting; {
		select {
		case ops = <-done:
			waiting = false
		case <-progress:
		case <-time.After(60 * time.Second):
			t.Fatalf("a metadata operation on the full cache disk did not return within 60 s (writer exited: %v):\n%s",
				w.exited(), tail(w.out.String(), 40))
		}
	}
	t.Logf("%d renames, chmods and unlinks with the cache disk full; errors: %s", ops, errs)
	if w.exited() {
		t.Fatalf("the writer exited with the cache disk full:\n%s", tail(w.out.String(), 60))
	}
	for k := range errs.seen {
		if !strings.HasSuffix(k, ": no space left on device") {
			t.Errorf("with the cache disk full: %s (want success or ENOSPC)", k)
		}
	}
	fsyncDone := make(chan error, 1)
	go func() { fsyncDone <- held.Sync() }()
	select {
	case err := <-fsyncDone:
		if err != nil {
			t.Fatalf("fsync of data written before the disk filled: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("fsync of data written before the disk filled did not return within 60 s:\n%s", tail(w.out.String(), 40))
	}
	synced["held"], sizes["held"] = 300, 256
	// Past a publication interval (2 s here) and a few barriers.
	time.Sleep(6 * time.Second)
	if w.exited() {
		t.Fatalf("the writer exited with the cache disk full:\n%s", tail(w.out.String(), 60))
	}
	if err := os.WriteFile(e.path("late"), blocks(400, 0, 1, 1), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a new file with the cache disk full: %v, want ENOSPC", err)
	}
	st := e.mustEbbfs("status").stdout
	if !strings.Contains(st, "CACHE DIRECTORY FULL") {
		t.Errorf("ebbfs status with the cache disk full does not say so:\n%s", st)
	}
	for _, l := range strings.Split(st, "\n") {
		if strings.Contains(l, "CACHE DIRECTORY") {
			t.Logf("ebbfs status: %s", l)
		}
	}
	t.Logf("free on the cache disk: %.2f MiB", float64(c.free(t))/mib)
	// The writer's log reaches the test through a pipe, after the effect
	// the test saw: wait for the line before counting.
	testutil.Eventually(t, time.Minute, "the writer's log of the release of its reserve", func() bool {
		return strings.Contains(w.out.String(), "released the emergency reserve")
	})
	if n := strings.Count(w.out.String(), "released the emergency reserve"); n != 1 {
		t.Errorf("the writer logged the release of its reserve %d times, want once", n)
	}

	// The space comes back: the same mount takes writes again.
	for _, n := range fillers {
		if err := os.Remove(filepath.Join(c.dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	var werr error
	testutil.Eventually(t, time.Minute, "writes on the same mount once the fillers are gone", func() bool {
		werr = os.WriteFile(e.path("after"), blocks(500, 0, 64, 1), 0o644)
		return werr == nil
	})
	f, err := os.OpenFile(e.path("after"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync after space returned: %v", err)
	}
	f.Close()
	synced["after"], sizes["after"] = 500, 64
	testutil.Eventually(t, time.Minute, "the writer's log that its reserve is back", func() bool {
		return strings.Contains(w.out.String(), "emergency reserve of the metadata store is back")
	})
	if st := e.mustEbbfs("status").stdout; strings.Contains(st, "CACHE DIRECTORY FULL") {
		t.Errorf("ebbfs status still says the cache directory is full:\n%s", st)
	}
	for i := range nfiles {
		if i%3 == 0 {
			continue
		}
		if err := os.Chmod(e.path(names[i]), 0o640); err != nil {
			t.Fatalf("chmod after space returned: %v", err)
		}
	}
	e.mustEbbfs("flush")
	if w.exited() {
		t.Fatalf("the writer exited:\n%s", tail(w.out.String(), 60))
	}
	e.mustEbbfs("checkpoint", "create", "roomy", "--ttl", "1m")
	e.mustEbbfs("checkpoint", "delete", "roomy")

	w.kill()
	w = e.mount()
	for name, id := range synced {
		b := readFile(t, e.path(name))
		if err := checkContent(id, b); err != nil || len(b) != sizes[name]*blockSize {
			t.Fatalf("%s after kill -9 and restart: %d bytes, %v", name, len(b), err)
		}
	}
	for i := range nfiles {
		if i%3 == 0 {
			continue
		}
		fi, err := os.Stat(e.path(names[i]))
		if err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("%s after restart: %v, %v", names[i], fi, err)
		}
	}
	t.Logf("%d fsynced files and %d renamed files read back after kill -9 and a restart", len(synced), nfiles-nfiles/3)
	w.stop()
	e.fsckClean()
}
