package fuse

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/mountinfo"
	"ebbfs.dev/ebbfs/internal/testutil"
	"ebbfs.dev/ebbfs/objstore"
	"golang.org/x/sys/unix"
)

// stubMsg is the error the engine's placeholder returns before the real
// engine lands; tests that need an engine skip on it.
const stubMsg = "fs: engine not implemented yet"

// requireFUSE skips the test when the machine cannot mount FUSE, except in
// CI (CI=true), where that is a failure.
func requireFUSE(t *testing.T) {
	t.Helper()
	var missing []string
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing = append(missing, "/dev/fuse")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil && os.Geteuid() != 0 {
		missing = append(missing, "fusermount3")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("FUSE unavailable (missing %s) and CI=true", strings.Join(missing, ", "))
	}
	t.Skipf("FUSE unavailable: missing %s", strings.Join(missing, ", "))
}

// mounted is a live test mount.
type mounted struct {
	dir  string
	e    *ebbfs.Engine
	logs *testutil.SyncBuffer
	f    *fsys
}

func (m *mounted) path(elem ...string) string {
	return filepath.Join(append([]string{m.dir}, elem...)...)
}

// skipIfStub skips the test while the engine is the stub, and fails it on
// any other error.
func skipIfStub(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if strings.Contains(err.Error(), stubMsg) {
		t.Skip("engine not implemented yet (stub)")
	}
	t.Fatal(err)
}

// openEngine creates a fresh filesystem in memory, or skips while the
// engine is still the stub.
func openEngine(t *testing.T) *ebbfs.Engine {
	t.Helper()
	ctx := context.Background()
	st := objstore.NewMem()
	k, err := ebbfs.Init(ctx, st, "password123")
	skipIfStub(t, err)
	e, err := ebbfs.Open(ctx, ebbfs.Options{Store: st, Keys: k, CacheDir: t.TempDir()})
	skipIfStub(t, err)
	return e
}

// mount mounts a fresh filesystem under t.TempDir() and unmounts it (and
// checks it is gone from the mount table) in t.Cleanup.
func mount(t *testing.T) *mounted {
	t.Helper()
	return mountWith(t, nil)
}

// mountWith is mount with the options adjusted by adjust (if not nil).
func mountWith(t *testing.T, adjust func(*MountOptions)) *mounted {
	t.Helper()
	requireFUSE(t)
	e := openEngine(t)
	dir := t.TempDir()
	// Let other uids (tests that switch uid) reach the mount point.
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logs := &testutil.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := DefaultMountOptions()
	o.AllowOther = os.Geteuid() == 0
	o.Logger = log
	if adjust != nil {
		adjust(&o)
	}
	srv, f, err := mountFS(e, dir, o)
	if err != nil {
		_ = e.Close(context.Background())
		t.Fatalf("Mount: %v", err)
	}
	testutil.WaitMountTable(t, dir, true, time.Minute)
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		srv.Wait()
		testutil.WaitMountTable(t, dir, false, time.Minute)
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("engine Close: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return &mounted{dir: dir, e: e, logs: logs, f: f}
}

// mountEntry returns dir's mount as the fields of its /proc/mounts line
// (source, mountpoint, type, options), or nil.
func mountEntry(t *testing.T, dir string) []string {
	t.Helper()
	m, ok, err := mountinfo.Find(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return nil
	}
	return []string{m.Source, m.Mountpoint, m.FSType, m.Options + "," + m.Super}
}

// asUser runs fn on a thread whose effective uid and gid are uid and gid,
// with no supplementary groups and hence no capabilities, so the kernel
// treats its requests as an unprivileged user's. The credentials change for
// that thread only (raw syscalls); the thread is discarded afterwards.
func asUser(t *testing.T, uid, gid uint32, fn func() error) error {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching uid needs root")
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			done <- e
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			done <- e
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			done <- e
			return
		}
		done <- fn()
	}()
	return <-done
}

func TestMountTableAndStatfs(t *testing.T) {
	m := mount(t)
	ent := mountEntry(t, m.dir)
	if ent[0] != "ebbfs" || ent[2] != "fuse.ebbfs" {
		t.Fatalf("mount entry %q: want source ebbfs, type fuse.ebbfs", ent)
	}
	opts := "," + ent[3] + ","
	for _, want := range []string{",default_permissions,", ",noatime,", ",nosuid,", ",nodev,"} {
		if !strings.Contains(opts, want) {
			t.Errorf("mount options %q lack %s", ent[3], want)
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(opts, ",allow_other,") {
		t.Errorf("mount options %q lack allow_other as root", ent[3])
	}

	var st unix.Statfs_t
	if err := unix.Statfs(m.dir, &st); err != nil {
		t.Fatal(err)
	}
	want, err := m.e.StatFS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.FUSE_SUPER_MAGIC {
		t.Errorf("f_type %#x, want FUSE", st.Type)
	}
	if st.Namelen != int64(want.NameLen) && !(want.NameLen == 0 && st.Namelen == ebbfs.MaxNameLen) {
		t.Errorf("namelen %d, engine %d", st.Namelen, want.NameLen)
	}
	if st.Blocks != want.Blocks || st.Files != want.Files {
		t.Errorf("statfs blocks %d files %d, engine %+v", st.Blocks, st.Files, want)
	}
	if want.BlockSize != 0 && st.Bsize != int64(want.BlockSize) {
		t.Errorf("bsize %d, engine %d", st.Bsize, want.BlockSize)
	}
}

func TestReadOnlyEngineMountsReadOnly(t *testing.T) {
	requireFUSE(t)
	ctx := context.Background()
	st := objstore.NewMem()
	k, err := ebbfs.Init(ctx, st, "password123")
	skipIfStub(t, err)
	// Write a file with a writer, then close it and mount a reader.
	w, err := ebbfs.Open(ctx, ebbfs.Options{Store: st, Keys: k, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	a, err := w.Create(ctx, ebbfs.RootIno, "f", 0o644, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, a.Ino, []byte("from the writer"), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := ebbfs.Open(ctx, ebbfs.Options{Store: st, Keys: k, CacheDir: t.TempDir(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := Mount(r, dir, MountOptions{DefaultPermissions: true})
	if err != nil {
		_ = r.Close(ctx)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		srv.Wait()
		_ = r.Close(ctx)
	})
	testutil.WaitMountTable(t, dir, true, time.Minute)
	if ent := mountEntry(t, dir); !strings.HasPrefix(ent[3], "ro,") && !strings.Contains(ent[3], ",ro,") {
		t.Errorf("mount options %q: want ro", ent[3])
	}
	b, err := os.ReadFile(filepath.Join(dir, "f"))
	if err != nil || string(b) != "from the writer" {
		t.Fatalf("read on reader: %q %v", b, err)
	}
	wantErrno(t, "write on read-only mount", os.WriteFile(filepath.Join(dir, "f"), nil, 0o644), unix.EROFS)
	wantErrno(t, "mkdir on read-only mount", os.Mkdir(filepath.Join(dir, "d"), 0o755), unix.EROFS)
}

func TestMountNilEngine(t *testing.T) {
	if _, err := Mount(nil, t.TempDir(), MountOptions{}); err == nil {
		t.Fatal("Mount(nil engine) succeeded")
	}
}

func TestDefaultMountOptions(t *testing.T) {
	o := DefaultMountOptions()
	root := os.Geteuid() == 0
	if o.AllowOther != root || !o.DefaultPermissions {
		t.Fatalf("defaults %+v (root=%v)", o, root)
	}
	if o.FsName != "ebbfs" || o.EntryTimeout != time.Second || o.AttrTimeout != time.Second {
		t.Fatalf("defaults %+v", o)
	}
}

// errnoOf extracts the errno from an os/syscall error.
func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func wantErrno(t *testing.T, what string, err error, want unix.Errno) {
	t.Helper()
	if got := errnoOf(err); got != want {
		t.Fatalf("%s: got %v (errno %d), want %v", what, err, got, want)
	}
}
