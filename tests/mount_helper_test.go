package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"ebbfs.dev/ebbfs/internal/testutil"
)

// sbinHelper is where mount(8) looks for the fuse.ebbfs helper.
const sbinHelper = "/sbin/mount.fuse.ebbfs"

// installHelper points /sbin/mount.fuse.ebbfs at the test binary for the
// test's duration, restoring whatever was there before.
func installHelper(t *testing.T) {
	t.Helper()
	backup := ""
	if _, err := os.Lstat(sbinHelper); err == nil {
		backup = sbinHelper + ".e2e-backup"
		if err := os.Rename(sbinHelper, backup); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ebbfsBin, sbinHelper); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(sbinHelper)
		if backup != "" {
			if err := os.Rename(backup, sbinHelper); err != nil {
				t.Errorf("restoring %s: %v", sbinHelper, err)
			}
		}
	})
}

// detachedWriter is a writer started by the mount helper (not our child).
type detachedWriter struct {
	e   *env
	pid int
}

func (e *env) detachedWriter() *detachedWriter {
	e.t.Helper()
	r := e.mustEbbfs("status", "--json")
	var st struct {
		PID        int    `json:"pid"`
		Mountpoint string `json:"mountpoint"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.PID <= 0 {
		e.t.Fatalf("status: %v\n%s", err, r)
	}
	if st.Mountpoint != e.mnt {
		e.t.Fatalf("writer serves %s, want %s", st.Mountpoint, e.mnt)
	}
	w := &detachedWriter{e: e, pid: st.PID}
	e.t.Cleanup(func() {
		if w.alive() {
			syscall.Kill(w.pid, syscall.SIGKILL)
		}
		e.forceUnmount()
		if e.t.Failed() {
			b, _ := os.ReadFile(filepath.Join(e.cache, "ebbfs.log"))
			e.t.Logf("detached writer log:\n%s", b)
		}
	})
	return w
}

func (w *detachedWriter) alive() bool {
	err := syscall.Kill(w.pid, 0)
	if err == nil {
		// A zombie is dead for our purposes; it is not our child, so init
		// reaps it.
		b, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.pid))
		if rerr == nil {
			if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
				return false
			}
		}
		return true
	}
	return !errors.Is(err, syscall.ESRCH)
}

// umountAndWait unmounts with umount(8) and waits until the writer has
// run its final barrier and exited.
func (w *detachedWriter) umountAndWait() {
	w.e.t.Helper()
	if r := w.e.run("umount", w.e.mnt); r.code != 0 {
		w.e.t.Fatalf("umount: %s", r)
	}
	testutil.Eventually(w.e.t, exitTimeout, fmt.Sprintf("writer pid %d to exit after umount", w.pid), func() bool { return !w.alive() })
	log, err := os.ReadFile(filepath.Join(w.e.cache, "ebbfs.log"))
	if err != nil {
		w.e.t.Fatal(err)
	}
	if !strings.Contains(string(log), "final barrier done") {
		w.e.t.Fatalf("writer log lacks the final barrier:\n%s", log)
	}
}

// TestMountTypeFuseEbbfs: mount -t fuse.ebbfs CONFIG MOUNTPOINT, then an
// fstab line, then the helper called directly; umount stops each cleanly.
func TestMountTypeFuseEbbfs(t *testing.T) {
	t.Parallel()
	need(t, "mount", "umount")
	e := newEnv(t)
	e.init()
	installHelper(t)

	if r := e.run("mount", "-t", "fuse.ebbfs", e.cfg, e.mnt); r.code != 0 {
		t.Fatalf("mount -t fuse.ebbfs: %s", r)
	}
	if !isMounted(e.mnt) {
		t.Fatal("mount returned 0 but nothing is mounted")
	}
	w := e.detachedWriter()
	writeFile(t, e.path("via-mount-t"), []byte("one"))
	w.umountAndWait()
	if isMounted(e.mnt) {
		t.Fatal("still mounted after umount")
	}

	// The documented fstab line, through an alternative fstab file.
	fstab := filepath.Join(e.dir, "fstab")
	line := fmt.Sprintf("%s %s fuse.ebbfs defaults,_netdev 0 0\n", e.cfg, e.mnt)
	if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e.run("mount", "-T", fstab, e.mnt); r.code != 0 {
		t.Fatalf("mount via fstab line %q: %s", line, r)
	}
	w = e.detachedWriter()
	if got := string(readFile(t, e.path("via-mount-t"))); got != "one" {
		t.Fatalf("via-mount-t = %q", got)
	}
	writeFile(t, e.path("via-fstab"), []byte("two"))
	w.umountAndWait()

	// The helper convention directly, read-only.
	if r := e.run(filepath.Join(binDir, "mount.fuse.ebbfs"), e.cfg, e.mnt, "-o", "ro,_netdev"); r.code != 0 {
		t.Fatalf("mount.fuse.ebbfs -o ro: %s", r)
	}
	w = e.detachedWriter()
	if got := string(readFile(t, e.path("via-fstab"))); got != "two" {
		t.Fatalf("via-fstab = %q", got)
	}
	if err := os.WriteFile(e.path("nope"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write to a read-only mount: %v, want EROFS", err)
	}
	w.umountAndWait()
}

// TestMountHelperReportsFailure: when the writer cannot start, the helper
// fails with the writer's own message instead of hanging.
func TestMountHelperReportsFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	if err := os.WriteFile(filepath.Join(e.dir, "password"), []byte("the wrong password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.run(filepath.Join(binDir, "mount.fuse.ebbfs"), e.cfg, e.mnt, "-o", "defaults")
	if r.code == 0 {
		e.forceUnmount()
		t.Fatalf("mount helper succeeded with a wrong password: %s", r)
	}
	if !strings.Contains(r.stderr, "wrong password") {
		t.Fatalf("helper error lacks the writer's message: %s", r)
	}
	if isMounted(e.mnt) {
		t.Fatal("mounted despite the failure")
	}
}
