package fuse

import (
	"bytes"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	ebbfs "ebbfs.dev/ebbfs/fs"
	"golang.org/x/sys/unix"
)

func TestFileSizeLimit(t *testing.T) {
	m := mount(t)
	f, err := os.Create(m.path("big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.WriteAt([]byte("x"), ebbfs.MaxFileSize)
	wantErrno(t, "write at MaxFileSize", err, unix.EFBIG)
	wantErrno(t, "truncate past MaxFileSize", f.Truncate(ebbfs.MaxFileSize+1), unix.EFBIG)
	// The last byte below the limit works, and the file reads back sparse.
	if _, err := f.WriteAt([]byte("y"), ebbfs.MaxFileSize-1); err != nil {
		t.Fatalf("write of the last allowed byte: %v", err)
	}
	if fi, _ := f.Stat(); fi.Size() != ebbfs.MaxFileSize {
		t.Fatalf("size %d", fi.Size())
	}
	buf := make([]byte, 4)
	if n, err := f.ReadAt(buf, 1<<40); err != nil || n != 4 || !bytes.Equal(buf, make([]byte, 4)) {
		t.Fatalf("read in the hole: %d %v %v", n, err, buf)
	}
	if st := statOf(t, m.path("big")); st.Blocks > 1<<20 {
		t.Fatalf("sparse file holds %d blocks", st.Blocks)
	}
}

func TestWritePastEOFLeavesZeroes(t *testing.T) {
	m := mount(t)
	p := m.path("gap")
	if err := os.WriteFile(p, []byte("head"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), 300000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b := readAll(t, p)
	want := append(append([]byte("head"), make([]byte, 300000-4)...), "tail"...)
	if !bytes.Equal(b, want) {
		t.Fatalf("file with gap: len %d", len(b))
	}
}

func TestExclusiveCreateRace(t *testing.T) {
	m := mount(t)
	const racers = 8
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() {
			f, err := os.OpenFile(m.path("once"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err == nil {
				wins.Add(1)
				f.Close()
			} else if !os.IsExist(err) {
				t.Errorf("O_EXCL create: %v", err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d exclusive creates succeeded", wins.Load())
	}
}

func TestRenameBetweenHardLinksIsNoop(t *testing.T) {
	m := mount(t)
	if err := os.WriteFile(m.path("a"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(m.path("a"), m.path("b")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Rename(m.path("a"), m.path("b")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if st := statOf(t, m.path(n)); st.Nlink != 2 {
			t.Fatalf("%s nlink %d after rename onto own link", n, st.Nlink)
		}
	}
}

func TestRootNlinkAndTimes(t *testing.T) {
	m := mount(t)
	before := statOf(t, m.dir)
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	after := statOf(t, m.dir)
	if after.Nlink != before.Nlink+1 {
		t.Fatalf("root nlink %d -> %d after mkdir", before.Nlink, after.Nlink)
	}
	if unix.TimespecToNsec(after.Mtim) < unix.TimespecToNsec(before.Mtim) {
		t.Fatal("root mtime went back")
	}
	if err := os.WriteFile(m.path("d", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d1 := statOf(t, m.path("d"))
	if err := os.Remove(m.path("d", "f")); err != nil {
		t.Fatal(err)
	}
	d2 := statOf(t, m.path("d"))
	if unix.TimespecToNsec(d2.Mtim) < unix.TimespecToNsec(d1.Mtim) || unix.TimespecToNsec(d2.Ctim) < unix.TimespecToNsec(d1.Ctim) {
		t.Fatal("dir times went back after unlink")
	}
}

func TestSymlinkXattrAndTimes(t *testing.T) {
	m := mount(t)
	if err := os.Symlink("nowhere", m.path("ln")); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(1e9), unix.NsecToTimespec(2e9)}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, m.path("ln"), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatalf("utimensat on symlink: %v", err)
	}
	if st := statOf(t, m.path("ln")); unix.TimespecToNsec(st.Mtim) != 2e9 {
		t.Fatalf("symlink mtime %v", st.Mtim)
	}
	wantErrno(t, "user xattr on symlink", unix.Lsetxattr(m.path("ln"), "user.x", []byte("v"), 0), unix.EPERM)
	if os.Geteuid() == 0 {
		if err := unix.Lsetxattr(m.path("ln"), "trusted.x", []byte("v"), 0); err != nil {
			t.Fatalf("trusted xattr on symlink: %v", err)
		}
		buf := make([]byte, 8)
		if n, err := unix.Lgetxattr(m.path("ln"), "trusted.x", buf); err != nil || string(buf[:n]) != "v" {
			t.Fatalf("lgetxattr: %q %v", buf[:n], err)
		}
	}
}

func TestLargeXattr(t *testing.T) {
	m := mount(t)
	p := m.path("f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte{0x5a}, 64<<10) // XATTR_SIZE_MAX
	if err := unix.Setxattr(p, "user.big", val, 0); err != nil {
		t.Fatalf("64 KiB xattr: %v", err)
	}
	n, err := unix.Getxattr(p, "user.big", nil)
	if err != nil || n != len(val) {
		t.Fatalf("probe: %d %v", n, err)
	}
	buf := make([]byte, n)
	if n, err := unix.Getxattr(p, "user.big", buf); err != nil || !bytes.Equal(buf[:n], val) {
		t.Fatalf("read back: %d %v", n, err)
	}
}

func TestCreateRaceWithoutExcl(t *testing.T) {
	m := mount(t)
	for round := range 20 {
		name := m.path("shared-" + string(rune('a'+round)))
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY, 0o644)
				if err != nil {
					t.Errorf("open(O_CREAT) racing another create: %v", err)
					return
				}
				f.Close()
			})
		}
		wg.Wait()
	}
}
