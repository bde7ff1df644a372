package tests

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ebbfs.dev/ebbfs/internal/s3test"
	"ebbfs.dev/ebbfs/internal/testutil"
)

// The cache disk returning EIO. The writer's cache directory is on an ext4
// filesystem that starts failing every I/O in the middle of a workload of
// writes, fsyncs, renames and chmods. The disk cache only costs store
// requests when its frames fail; the metadata store (Pebble) cannot go
// on, so the writer must stop in order: one clear line in its log, `ebbfs
// status` saying STOPPED, every later operation failing with EIO, no
// fsync acknowledged that is not durable, no Go panic trace; on SIGTERM it
// exits (with an error: its final barrier cannot succeed). Started again
// with a healthy cache directory, every file whose fsync succeeded (before
// or after the disk failed) reads back from the store alone, and fsck is
// clean.
//
// TestCacheDiskEIO switches a device-mapper device under the filesystem
// to the `error` target (dmsetup suspend, load, resume); it needs
// device-mapper in the kernel and dmsetup (scripts/install-deps.sh), runs
// only with EBBFS_TEST_DM=1 (this machine's kernel and CI's have no
// device-mapper), and then fails without them. TestCacheDiskShutdownEIO makes the same
// filesystem fail with ext4's shutdown ioctl (every read and write then
// returns EIO), which needs no device-mapper.

// dmCacheFS is cacheFS on a device-mapper device over a loop device.
type dmCacheFS struct {
	cacheFS
	name    string // the dm device's name
	sectors int64
}

// newDMCacheFS makes a size-byte ext4 filesystem on a dm `linear` device
// over a loop device, mounts it and moves e's cache directory onto it.
func newDMCacheFS(t *testing.T, e *env, size int64) *dmCacheFS {
	t.Helper()
	need(t, "dmsetup", "mkfs.ext4", "losetup", "mount", "umount")
	if r := e.run("dmsetup", "targets"); r.code != 0 || !strings.Contains(r.stdout, "error") || !strings.Contains(r.stdout, "linear") {
		msg := fmt.Sprintf("device-mapper with the linear and error targets is not available (dmsetup targets: %s)", r)
		if inCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	img := filepath.Join(e.dir, "cache.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	loop, _ := e.loopAttach(t, img)
	c := &dmCacheFS{name: fmt.Sprintf("ebbfs-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6), sectors: size / 512}
	if r := e.run("dmsetup", "create", c.name, "--table", fmt.Sprintf("0 %d linear %s 0", c.sectors, loop)); r.code != 0 {
		t.Fatalf("dmsetup create: %s", r)
	}
	t.Cleanup(func() {
		for i := 0; i < 20; i++ {
			r := e.run("dmsetup", "remove", "--retry", c.name)
			if r.code == 0 || strings.Contains(r.stderr, "No such device") {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Errorf("dmsetup remove %s failed", c.name)
	})
	dev := "/dev/mapper/" + c.name
	// Without udev, dmsetup makes the node itself; with it, udev may take
	// a moment.
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(dev); err == nil {
			break
		}
		if i == 10 {
			e.run("dmsetup", "mknodes", c.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := e.run("mkfs.ext4", "-q", "-F", "-m", "0", dev); r.code != 0 {
		t.Fatalf("mkfs.ext4: %s", r)
	}
	c.dir = filepath.Join(e.dir, "cachefs")
	if err := os.Mkdir(c.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.mountExt4(t, dev, c.dir)
	e.cache = filepath.Join(c.dir, "cache")
	e.writeConfig("")
	return c
}

// failAll switches the device to the error target: from now on every read
// and write of it fails with EIO.
func (c *dmCacheFS) failAll(t *testing.T, e *env) {
	t.Helper()
	for _, args := range [][]string{
		{"suspend", c.name},
		{"load", c.name, "--table", fmt.Sprintf("0 %d error", c.sectors)},
		{"resume", c.name},
	} {
		if r := e.run("dmsetup", args...); r.code != 0 {
			t.Fatalf("dmsetup %s: %s", args[0], r)
		}
	}
	// Reads too, not only what the page cache does not hold.
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
}

// shutdownExt4 makes the ext4 filesystem at dir fail every read and write
// with EIO (EXT4_IOC_SHUTDOWN, without flushing its log).
func shutdownExt4(t *testing.T, dir string) {
	t.Helper()
	const ext4IocShutdown = 0x8004587d // _IOR('X', 125, __u32)
	const noLogFlush = 2               // EXT4_GOING_FLAGS_NOLOGFLUSH
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.IoctlSetPointerInt(int(f.Fd()), ext4IocShutdown, noLogFlush); err != nil {
		t.Fatalf("ext4 shutdown ioctl on %s: %v", dir, err)
	}
}

func TestCacheDiskEIO(t *testing.T) {
	// This machine's kernel (and so CI's) has no device-mapper; the same
	// failure is shown by TestCacheDiskShutdownEIO. Where device-mapper
	// exists, EBBFS_TEST_DM=1 runs this too.
	if os.Getenv("EBBFS_TEST_DM") == "" {
		t.Skip("needs a kernel with device-mapper; set EBBFS_TEST_DM=1 (TestCacheDiskShutdownEIO covers EIO without it)")
	}
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "eio", srv.AccessKey, srv.SecretKey))
	c := newDMCacheFS(t, e, 96<<20)
	cacheDiskEIO(t, e, func() { c.failAll(t, e) })
}

func TestCacheDiskShutdownEIO(t *testing.T) {
	srv := s3test.Start(t)
	e := newEnv(t, withS3(srv.Endpoint, srv.Region, srv.Bucket, "shut", srv.AccessKey, srv.SecretKey))
	c := newCacheFS(t, e, 96<<20)
	cacheDiskEIO(t, e, func() { shutdownExt4(t, c.dir) })
}

// cacheDiskEIO runs the workload on e (whose cache directory fail breaks)
// and checks what the writer does; see the comment at the top.
func cacheDiskEIO(t *testing.T, e *env, fail func()) {
	e.init()
	w := e.mount()
	var mu sync.Mutex
	synced := map[string]uint64{}  // file -> content id; n blocks each
	renamed := map[string]string{} // fsynced file -> its new name
	const n = 16                   // 64 KiB files
	errs := &appErrs{seen: map[string]int{}}
	put := func(name string, id uint64) error {
		f, err := os.OpenFile(e.path(name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Write(blocks(id, 0, n, 1)); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		mu.Lock()
		synced[name] = id
		mu.Unlock()
		return nil
	}
	for i := range 40 {
		if err := put(fmt.Sprintf("pre%d", i), uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// Read some back through the disk cache.
	for i := range 10 {
		name := fmt.Sprintf("pre%d", i)
		dropPageCache(t, e.path(name))
		if err := checkContent(uint64(i+1), readFile(t, e.path(name))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	// The workload: new files fsynced one by one, with renames and chmods
	// in between, until told to stop.
	stop := make(chan struct{})
	var failedAt time.Time
	var afterFail, beforeFail int // fsyncs acknowledged
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("w%d", i)
			err := put(name, uint64(1000+i))
			mu.Lock()
			failed := !failedAt.IsZero()
			if err == nil && !failed {
				beforeFail++
			} else if err == nil {
				afterFail++
			}
			mu.Unlock()
			errs.add("create+write+fsync", err)
			if err == nil && i%4 == 0 {
				// The new name is durable only at the next barrier: the
				// file may come back under either.
				to := fmt.Sprintf("r%d", i)
				if err := os.Rename(e.path(name), e.path(to)); err == nil {
					mu.Lock()
					renamed[name] = to
					mu.Unlock()
					errs.add("chmod", os.Chmod(e.path(to), 0o600))
				} else {
					errs.add("rename", err)
				}
			}
			if failed {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	time.Sleep(2 * time.Second)
	fail()
	mu.Lock()
	failedAt = time.Now()
	mu.Unlock()
	t.Logf("the cache disk fails every I/O from now on")

	var status string
	d := testutil.Eventually(t, 60*time.Second, "ebbfs status saying STOPPED", func() bool {
		if w.exited() {
			t.Fatalf("the writer exited after the cache disk failed:\n%s", tail(w.out.String(), 60))
		}
		r := e.ebbfs("status")
		status = r.stdout
		return r.code == 0 && strings.Contains(status, "STOPPED")
	})
	time.Sleep(time.Second) // the workload meets the stopped writer
	close(stop)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("an operation of the workload did not return within 60 s of the writer stopping:\n%s", tail(w.out.String(), 60))
	}
	for _, l := range strings.Split(status, "\n") {
		if strings.Contains(l, "STOPPED") {
			t.Logf("%v after the disk failed, ebbfs status: %s", d.Round(time.Millisecond), l)
		}
	}
	t.Logf("fsyncs acknowledged: %d before the disk failed, %d after; errors applications saw: %s", beforeFail, afterFail, errs)
	for k := range errs.seen {
		if !strings.HasSuffix(k, ": input/output error") {
			t.Errorf("after the cache disk failed: %s, want EIO", k)
		}
	}
	out := w.out.String()
	const failedLine = "the local metadata store failed; this writer acknowledges nothing more"
	if n := strings.Count(out, failedLine); n != 1 {
		t.Errorf("the writer logged its metadata store's failure %d times, want once:\n%s", n, tail(out, 60))
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, failedLine) {
			t.Logf("writer log: %s", l)
		}
	}

	// Everything now fails with EIO, and nothing is acknowledged.
	wantEIO := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s with the metadata store failed: %v, want EIO", what, err)
		}
	}
	wantEIO("create", os.WriteFile(e.path("late"), []byte("x"), 0o644))
	wantEIO("mkdir", os.Mkdir(e.path("lated"), 0o755))
	wantEIO("rename", os.Rename(e.path("pre0"), e.path("pre0.moved")))
	wantEIO("chmod", os.Chmod(e.path("pre1"), 0o600))
	if f, err := os.OpenFile(e.path("pre2"), os.O_WRONLY, 0); err == nil {
		_, werr := f.Write([]byte("more"))
		if werr == nil {
			werr = f.Sync()
		}
		f.Close()
		wantEIO("write and fsync", werr)
	}
	if r := e.ebbfs("flush"); r.code == 0 {
		t.Errorf("ebbfs flush succeeded with the metadata store failed: %s", r)
	}

	// SIGTERM: the writer exits in order, with an error, no panic.
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := w.wait()
	out = w.out.String()
	t.Logf("after SIGTERM the writer exited with %d: %s", code, lastLine(out))
	if code == 0 {
		t.Errorf("the writer exited with 0 after its metadata store failed")
	}
	if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
		t.Errorf("the writer's output has a panic:\n%s", out)
	}
	if isMounted(e.mnt) {
		t.Errorf("%s still mounted after the writer exited", e.mnt)
	}

	// A healthy cache directory: everything fsynced is in the store.
	e.cache = filepath.Join(e.dir, "cache2")
	e.writeConfig("")
	w = e.mount()
	for name, id := range synced {
		b, err := os.ReadFile(e.path(name))
		if to, ok := renamed[name]; ok && errors.Is(err, os.ErrNotExist) {
			b, err = os.ReadFile(e.path(to))
		}
		if err == nil {
			err = checkContent(id, b)
		}
		if err != nil || len(b) != n*blockSize {
			t.Errorf("%s (fsynced) after a restart with a new cache directory: %d bytes, %v", name, len(b), err)
		}
	}
	t.Logf("%d fsynced files read back from the store with a new cache directory", len(synced))
	w.stop()
	e.fsckClean()
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
