package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// mountedAt reports whether anything is mounted at p.
func mountedAt(p string) bool { return mountType(p) != "" }

// startNBDFuse exposes an NBD export as the file dir/nbd with nbdfuse and
// waits until the file has the export's size. It returns the file and a
// stop function (unmount, wait for nbdfuse to exit) that cleanup also runs.
func (e *env) startNBDFuse(t *testing.T, dir, uri string, size int64) (string, func()) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	nf := e.command(t.Context(), "nbdfuse", dir, uri)
	out := &testutil.SyncBuffer{}
	nf.Stdout, nf.Stderr = out, out
	if err := nf.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = nf.Wait(); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for i := 0; i < 20 && mountedAt(dir); i++ {
				if r := e.run("fusermount3", "-u", dir); r.code != 0 {
					t.Logf("fusermount3 -u %s: %s", dir, r)
					time.Sleep(250 * time.Millisecond)
				}
			}
			if mountedAt(dir) {
				t.Errorf("nbdfuse mount %s is busy; detaching it lazily", dir)
				e.run("fusermount3", "-u", "-z", dir)
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = nf.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("nbdfuse output:\n%s", out.String())
			}
		})
	}
	t.Cleanup(stop)
	file := filepath.Join(dir, "nbd")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fi, err := os.Stat(file); err == nil && fi.Size() == size && mountType(dir) != "" {
			return file, stop
		}
		select {
		case <-done:
			t.Fatalf("nbdfuse exited before exposing %s:\n%s", uri, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nbdfuse did not expose %s as %s within 30 s:\n%s", uri, file, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loopAttach attaches file to a free loop device. It returns the device
// and a detach function (which waits until the kernel has let go of the
// file) that cleanup also runs.
func (e *env) loopAttach(t *testing.T, file string) (string, func()) {
	t.Helper()
	r := e.run("losetup", "--find", "--show", file)
	if r.code != 0 {
		t.Fatalf("losetup --find --show %s: %s", file, r)
	}
	dev := strings.TrimSpace(r.stdout)
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	detach := func() {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := os.Stat(backing); os.IsNotExist(err) {
				return
			}
			if r := e.run("losetup", "-d", dev); r.code != 0 && !strings.Contains(r.stderr, "No such device") {
				t.Logf("losetup -d %s: %s", dev, r)
			}
			if time.Now().After(deadline) {
				t.Errorf("%s still attached to %s after losetup -d", dev, file)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Cleanup(detach)
	return dev, detach
}

// mountExt4 mounts an ext4 device; cleanup unmounts it if still mounted.
func (e *env) mountExt4(t *testing.T, dev, dir string) {
	t.Helper()
	// noinit_itable: no background zeroing of inode tables while the test
	// measures the store.
	if r := e.run("mount", "-t", "ext4", "-o", "noinit_itable", dev, dir); r.code != 0 {
		t.Fatalf("mount %s %s: %s", dev, dir, r)
	}
	t.Cleanup(func() { e.umountExt4(t, dir, false) })
}

func (e *env) umountExt4(t *testing.T, dir string, must bool) {
	t.Helper()
	for i := 0; i < 20 && mountType(dir) == "ext4"; i++ {
		r := e.run("umount", dir)
		if r.code == 0 {
			return
		}
		if must && i == 19 {
			t.Fatalf("umount %s: %s", dir, r)
		}
		t.Logf("umount %s: %s", dir, r)
		time.Sleep(250 * time.Millisecond)
	}
}

// syncFS flushes the filesystem holding dir (syncfs(2)): only that one,
// so that a stuck FUSE mount elsewhere on the machine cannot hang the
// test the way a global sync(2) would.
func syncFS(t testing.TB, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		t.Fatalf("syncfs %s: %v", dir, err)
	}
}

// TestExt4OverNBDTrim: ext4 on a loop device over nbdfuse over an ebbfs
// NBD export. Files written and deleted inside ext4 free their space in
// the store once fstrim TRIMs it and reclamation runs; the filesystem
// stays consistent and the kept files survive.
func TestExt4OverNBDTrim(t *testing.T) {
	need(t, "nbdfuse", "losetup", "mkfs.ext4", "e2fsck", "fstrim", "truncate", "mount", "umount", "fusermount3")
	seed := e2eSeed(t)
	src := newDataSource(seed)
	e := newEnv(t, withEnvVars("EBBFS_TEST_TIME_SCALE=200"))
	e.init()
	p := e.mount()

	const size = 2 << 30
	if r := e.run("truncate", "-s", "2G", e.path(".nbd/disk0")); r.code != 0 {
		t.Fatalf("truncate: %s", r)
	}
	file, stopNBDFuse := e.startNBDFuse(t, filepath.Join(e.dir, "nbdfuse"), "nbd://"+e.nbdAddr+"/disk0", size)
	dev, detach := e.loopAttach(t, file)
	// The loop driver turns a discard into fallocate(PUNCH_HOLE) on its
	// file, which nbdfuse turns into NBD TRIM: without discard support on
	// the device fstrim would have nothing to say.
	if b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "queue", "discard_max_bytes")); err != nil || strings.TrimSpace(string(b)) == "0" {
		t.Fatalf("%s does not support discard (discard_max_bytes %q, %v)", dev, b, err)
	}
	// No discard pass over the new device, no zeroing of inode tables or
	// the journal: mkfs writes only metadata and takes a second.
	start := time.Now()
	if r := e.run("mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", dev); r.code != 0 {
		t.Fatalf("mkfs.ext4: %s", r)
	}
	t.Logf("mkfs.ext4 on %s took %s", dev, time.Since(start).Round(time.Millisecond))
	ext := filepath.Join(e.dir, "ext4")
	if err := os.Mkdir(ext, 0o755); err != nil {
		t.Fatal(err)
	}
	e.mountExt4(t, dev, ext)

	kept := make([]byte, 64*kib+123)
	src.fill(kept)
	writeFile(t, filepath.Join(ext, "kept"), kept)
	syncFS(t, ext)
	// Baseline: the filesystem's metadata and the kept file, after the
	// garbage mkfs and the first mount made (rewritten blocks) is gone.
	baseline, _, _ := e.settle(t, 1<<62, time.Minute)
	t.Logf("baseline: segments/ %s", mibs(baseline))

	const nfiles, fileSize = 8, 50 * mib
	start = time.Now()
	// A second kept file goes down between the doomed ones, with no fsync
	// of its own: ext4's writeback puts its blocks next to theirs, so the
	// store's segments mix live and trimmed data and reclamation must
	// repack, not only delete.
	mixed := make([]byte, 4*mib)
	src.fill(mixed)
	for i := range nfiles {
		if i == nfiles/2 {
			writeFile(t, filepath.Join(ext, "mixed"), mixed)
		}
		writeSynced(t, filepath.Join(ext, fmt.Sprintf("data%d", i)), fileSize, src)
	}
	syncFS(t, ext)
	e.mustEbbfs("flush")
	full, objs := segmentBytes(t, e.store)
	t.Logf("wrote %s in ext4 in %s; segments/ %s in %d objects", mibs(nfiles*fileSize), time.Since(start).Round(time.Millisecond), mibs(full), objs)
	if full < baseline+nfiles*fileSize+int64(len(mixed)) {
		t.Fatalf("segments/ holds %d bytes after %d bytes of incompressible data on a %d-byte baseline", full, nfiles*fileSize, baseline)
	}

	for i := range nfiles {
		if err := os.Remove(filepath.Join(ext, fmt.Sprintf("data%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	syncFS(t, ext)
	r := e.run("fstrim", "-v", ext)
	if r.code != 0 {
		t.Fatalf("fstrim -v: %s", r)
	}
	m := regexp.MustCompile(`\(([0-9]+) bytes\) trimmed`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("fstrim -v printed %q", r.stdout)
	}
	trimmed, _ := strconv.ParseInt(m[1], 10, 64)
	if trimmed < nfiles*fileSize {
		t.Fatalf("fstrim trimmed %d bytes, less than the %d deleted", trimmed, nfiles*fileSize)
	}
	t.Logf("fstrim: %s", strings.TrimSpace(r.stdout))

	// Within 10% of the baseline (plus the 4 MiB mixed file, still live),
	// plus 4 MiB for what the workload left live that fstrim does not
	// touch: ext4's journal blocks and the bitmaps, inodes, extent and
	// directory blocks the files changed, each keeping its 32 KiB extent
	// (compressed) in the store.
	live := baseline + int64(len(mixed))
	goal := live + live/10 + 4*mib
	start = time.Now()
	final, peak, cycles := e.settle(t, goal, 2*time.Minute)
	sp := e.space()
	t.Logf("after fstrim: segments/ %s (baseline %s, goal %s, peak %s) after %d cycles in %s; space: live %s fragmented %s dead %s",
		mibs(final), mibs(baseline), mibs(goal), mibs(max(peak, full)), cycles, time.Since(start).Round(time.Millisecond),
		mibs(sp.LiveBytes), mibs(sp.FragmentedBytes), mibs(sp.DeadBytes))
	if sp.LiveBytes < int64(len(mixed)) {
		t.Fatalf("the counters say %d live bytes with the 4 MiB mixed file kept", sp.LiveBytes)
	}

	e.umountExt4(t, ext, true)
	if r := e.run("e2fsck", "-f", "-n", dev); r.code != 0 {
		t.Fatalf("e2fsck -f -n after trim and reclamation: %s", r)
	}
	if r := e.run("mount", "-t", "ext4", "-o", "noinit_itable", dev, ext); r.code != 0 {
		t.Fatalf("remount: %s", r)
	}
	if got := readFile(t, filepath.Join(ext, "kept")); !bytes.Equal(got, kept) {
		t.Fatal("the kept file changed across trim and reclamation")
	}
	if got := readFile(t, filepath.Join(ext, "mixed")); !bytes.Equal(got, mixed) {
		t.Fatal("the mixed file changed across trim and reclamation")
	}
	if ents, err := os.ReadDir(ext); err != nil || len(ents) != 3 { // kept, mixed and lost+found
		t.Fatalf("ext4 root after the deletes: %v %v", ents, err)
	}
	// Tear down in order (cleanup would too, on failure) and check the
	// store: the device stack must have left ebbfs consistent.
	e.umountExt4(t, ext, true)
	detach()
	stopNBDFuse()
	if mountedAt(filepath.Dir(file)) {
		t.Fatal("the nbdfuse mount is still there")
	}
	p.stop()
	e.fsckClean()
}
