package fuse

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"ebbfs.dev/ebbfs/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestTmpfileLink: open(O_TMPFILE), write, linkat into the tree, read back;
// an O_TMPFILE file closed without a link is gone, orphan and all.
func TestTmpfileLink(t *testing.T) {
	m := mount(t)
	fd, err := unix.Open(m.dir, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	if err != nil {
		t.Fatalf("open O_TMPFILE: %v", err)
	}
	// Closed before the unmount in t.Cleanup even if the test fails (an
	// open file would keep the unmount waiting).
	f := os.NewFile(uintptr(fd), "tmpfile")
	defer f.Close()
	want := bytes.Repeat([]byte("tmpfile "), 10000)
	if _, err := unix.Pwrite(fd, want, 0); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Nlink != 0 || st.Mode != unix.S_IFREG|0o640 {
		t.Fatalf("fstat of the unnamed file: %+v, %v; want nlink 0, mode 0100640", st, err)
	}
	if ents, _ := os.ReadDir(m.dir); len(ents) != 0 {
		t.Fatalf("the directory lists %v before the link", ents)
	}
	if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, m.path("named"), unix.AT_SYMLINK_FOLLOW); err != nil {
		t.Fatalf("linkat: %v", err)
	}
	f.Close()
	got, err := os.ReadFile(m.path("named"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
	if s := statOf(t, m.path("named")); s.Nlink != 1 {
		t.Fatalf("nlink after link: %d", s.Nlink)
	}

	// Not linked: gone at close.
	fd, err = unix.Open(m.dir, unix.O_TMPFILE|unix.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	_, werr := unix.Write(fd, []byte("scratch"))
	serr := unix.Fstat(fd, &st)
	unix.Close(fd)
	if werr != nil || serr != nil {
		t.Fatal(werr, serr)
	}
	ino := st.Ino
	testutil.Eventually(t, 10*time.Second, "the unlinked O_TMPFILE inode is deleted at its last close", func() bool {
		_, err := m.e.GetAttr(context.Background(), ino)
		return err != nil
	})

	// O_EXCL: never linkable (the kernel refuses).
	fd, err = unix.Open(m.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, m.path("excl"), unix.AT_SYMLINK_FOLLOW)
	unix.Close(fd)
	wantErrno(t, "linkat of an O_TMPFILE|O_EXCL file", err, unix.ENOENT)
}

// TestHandlesAcrossRemount: name_to_handle_at, unmount, mount the same
// engine again, open_by_handle_at reads the same bytes, for a file and a
// directory; a file deleted since gives ESTALE.
func TestHandlesAcrossRemount(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("open_by_handle_at needs CAP_DAC_READ_SEARCH")
	}
	e := openEngine(t)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(&testutil.SyncBuffer{}, nil))
	o := DefaultMountOptions()
	o.Logger = log
	srv, err := Mount(e, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitMountTable(t, dir, true, time.Minute)
	want := []byte("the same bytes")
	if err := os.MkdirAll(dir+"/d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/d/e/f", "/gone"} {
		if err := os.WriteFile(dir+name, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	handles := map[string]unix.FileHandle{}
	for _, name := range []string{"/d/e/f", "/gone", "/d/e"} {
		h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir+name, 0)
		if err != nil {
			t.Fatalf("name_to_handle_at %s: %v", name, err)
		}
		handles[name] = h
	}
	if err := os.Remove(dir + "/gone"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitMountTable(t, dir, false, time.Minute)

	srv, err = Mount(e, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Unmount(); err != nil {
			t.Error(err)
		}
	}()
	testutil.WaitMountTable(t, dir, true, time.Minute)
	mfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(mfd)
	fd, err := unix.OpenByHandleAt(mfd, handles["/d/e/f"], unix.O_RDONLY)
	if err != nil {
		t.Fatalf("open_by_handle_at after the remount: %v", err)
	}
	buf := make([]byte, 64)
	n, err := unix.Pread(fd, buf, 0)
	unix.Close(fd)
	if err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("read through the handle: %q, %v", buf[:n], err)
	}
	fd, err = unix.OpenByHandleAt(mfd, handles["/d/e"], unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		t.Fatalf("open_by_handle_at of a directory: %v", err)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", fd))
	unix.Close(fd)
	if err != nil || len(ents) != 1 || ents[0].Name() != "f" {
		t.Fatalf("listing the directory through its handle: %v, %v", ents, err)
	}
	_, err = unix.OpenByHandleAt(mfd, handles["/gone"], unix.O_RDONLY)
	wantErrno(t, "open_by_handle_at of a deleted file", err, unix.ESTALE)
}
