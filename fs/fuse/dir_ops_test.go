package fuse

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// rawDirents lists a directory with getdents64, "." and ".." included,
// returning name -> inode number.
func rawDirents(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 4096) // small, to force several READDIR requests
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for off := 0; off < n; {
			ino := binary.NativeEndian.Uint64(buf[off:])
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			name := buf[off+19 : off+reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			if _, dup := out[string(name)]; dup {
				t.Fatalf("readdir returned %q twice", name)
			}
			out[string(name)] = ino
			off += reclen
		}
	}
}

func TestMkdirRmdirReaddir(t *testing.T) {
	m := mount(t)
	d := m.path("d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "mkdir existing", os.Mkdir(d, 0o755), unix.EEXIST)
	if err := os.MkdirAll(m.path("d", "sub", "deeper"), 0o700); err != nil {
		t.Fatal(err)
	}
	st := statOf(t, d)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o755&^umask() {
		t.Fatalf("dir mode %o", st.Mode)
	}
	if st.Nlink != 3 { // ".", its entry in the root, and sub's ".."
		t.Errorf("dir nlink %d, want 3", st.Nlink)
	}

	const files = 300 // more than one READDIR buffer
	var want []string
	for i := range files {
		name := fmt.Sprintf("file-%03d-%s", i, "padding-to-make-entries-longer")
		want = append(want, name)
		if err := os.WriteFile(m.path("d", name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, "sub")
	sort.Strings(want)
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
		if e.Name() == "sub" && !e.IsDir() {
			t.Errorf("sub is not reported as a directory")
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("readdir: %d names, want %d", len(got), len(want))
	}
	raw := rawDirents(t, d)
	if len(raw) != len(want)+2 || raw["."] != st.Ino || raw[".."] != statOf(t, m.dir).Ino {
		t.Fatalf("getdents: %d entries, . = %d (want %d), .. = %d", len(raw), raw["."], st.Ino, raw[".."])
	}
	if raw["sub"] != statOf(t, m.path("d", "sub")).Ino {
		t.Fatalf("getdents inode of sub %d", raw["sub"])
	}

	wantErrno(t, "rmdir non-empty", unix.Rmdir(m.path("d", "sub")), unix.ENOTEMPTY)
	wantErrno(t, "rmdir file", unix.Rmdir(m.path("d", want[0])), unix.ENOTDIR)
	wantErrno(t, "unlink dir", unix.Unlink(m.path("d", "sub")), unix.EISDIR)
	wantErrno(t, "rmdir missing", unix.Rmdir(m.path("nope")), unix.ENOENT)
	wantErrno(t, "create under file", os.WriteFile(m.path("d", want[0], "x"), nil, 0o644), unix.ENOTDIR)
	if err := unix.Rmdir(m.path("d", "sub", "deeper")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Rmdir(m.path("d", "sub")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(m.path("d", "sub")); !os.IsNotExist(err) {
		t.Fatalf("sub still there: %v", err)
	}
	if st := statOf(t, d); st.Nlink != 2 {
		t.Errorf("dir nlink after rmdir %d, want 2", st.Nlink)
	}
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(m.dir); err != nil || len(ents) != 0 {
		t.Fatalf("root after RemoveAll: %v %v", ents, err)
	}

	longName := strings.Repeat("n", 256)
	wantErrno(t, "create 256-byte name", os.WriteFile(m.path(longName), nil, 0o644), unix.ENAMETOOLONG)
}

func TestRename(t *testing.T) {
	m := mount(t)
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(m.path(name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	content := func(name string) string { t.Helper(); return string(readAll(t, m.path(name))) }
	if err := os.Mkdir(m.path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("a", "A")
	write("b", "B")

	// Plain rename, across directories.
	if err := os.Rename(m.path("a"), m.path("dir", "a2")); err != nil {
		t.Fatal(err)
	}
	if content("dir/a2") != "A" {
		t.Fatal("renamed content")
	}
	if _, err := os.Lstat(m.path("a")); !os.IsNotExist(err) {
		t.Fatalf("old name still exists: %v", err)
	}
	// Rename over an existing file replaces it.
	write("c", "C")
	if err := os.Rename(m.path("c"), m.path("b")); err != nil {
		t.Fatal(err)
	}
	if content("b") != "C" {
		t.Fatal("replace by rename")
	}

	// RENAME_NOREPLACE.
	write("x", "X")
	err := unix.Renameat2(unix.AT_FDCWD, m.path("x"), unix.AT_FDCWD, m.path("b"), unix.RENAME_NOREPLACE)
	wantErrno(t, "RENAME_NOREPLACE onto existing", err, unix.EEXIST)
	if content("x") != "X" || content("b") != "C" {
		t.Fatal("failed NOREPLACE changed something")
	}
	if err := unix.Renameat2(unix.AT_FDCWD, m.path("x"), unix.AT_FDCWD, m.path("y"), unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE to a free name: %v", err)
	}
	if content("y") != "X" {
		t.Fatal("NOREPLACE rename content")
	}

	// RENAME_EXCHANGE swaps, also a file with a directory.
	if err := unix.Renameat2(unix.AT_FDCWD, m.path("y"), unix.AT_FDCWD, m.path("b"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if content("y") != "C" || content("b") != "X" {
		t.Fatalf("exchange: y=%q b=%q", content("y"), content("b"))
	}
	if err := unix.Renameat2(unix.AT_FDCWD, m.path("y"), unix.AT_FDCWD, m.path("dir"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE file<->dir: %v", err)
	}
	if fi, err := os.Stat(m.path("y")); err != nil || !fi.IsDir() {
		t.Fatalf("y after exchange with dir: %v %v", fi, err)
	}
	if content("dir") != "C" || content("y/a2") != "A" {
		t.Fatal("exchange with dir content")
	}
	err = unix.Renameat2(unix.AT_FDCWD, m.path("b"), unix.AT_FDCWD, m.path("missing"), unix.RENAME_EXCHANGE)
	wantErrno(t, "RENAME_EXCHANGE with missing target", err, unix.ENOENT)
	err = unix.Renameat2(unix.AT_FDCWD, m.path("b"), unix.AT_FDCWD, m.path("w"), unix.RENAME_WHITEOUT)
	wantErrno(t, "RENAME_WHITEOUT", err, unix.EINVAL)

	// Directory rules. (os.Rename refuses an existing directory as the
	// target by itself, so these call rename(2) directly.)
	if err := os.Mkdir(m.path("e1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("e2"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("e2/f", "")
	wantErrno(t, "rename dir onto non-empty dir", unix.Rename(m.path("e1"), m.path("e2")), unix.ENOTEMPTY)
	wantErrno(t, "rename dir onto file", unix.Rename(m.path("e1"), m.path("b")), unix.ENOTDIR)
	wantErrno(t, "rename file onto dir", unix.Rename(m.path("b"), m.path("e1")), unix.EISDIR)
	wantErrno(t, "rename dir into itself", unix.Rename(m.path("e1"), m.path("e1", "inner")), unix.EINVAL)
	if err := os.Remove(m.path("e2", "f")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Rename(m.path("e1"), m.path("e2")); err != nil {
		t.Fatalf("rename dir onto empty dir: %v", err)
	}
	if err := os.Rename(m.path("e2"), m.path("y", "e")); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, m.path("y", "e")); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatal("moved dir type")
	}
	if st := statOf(t, m.path("y")); st.Nlink != 3 {
		t.Errorf("nlink of y after moving a dir in: %d, want 3", st.Nlink)
	}
}

func TestLink(t *testing.T) {
	m := mount(t)
	if err := os.WriteFile(m.path("orig"), []byte("shared"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(m.path("orig"), m.path("d", "alias")); err != nil {
		t.Fatal(err)
	}
	a, b := statOf(t, m.path("orig")), statOf(t, m.path("d", "alias"))
	if a.Ino != b.Ino || a.Nlink != 2 || b.Nlink != 2 {
		t.Fatalf("after link: ino %d/%d nlink %d/%d", a.Ino, b.Ino, a.Nlink, b.Nlink)
	}
	if err := os.WriteFile(m.path("d", "alias"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if string(readAll(t, m.path("orig"))) != "changed" {
		t.Fatal("write through link not visible")
	}
	wantErrno(t, "link onto existing", os.Link(m.path("orig"), m.path("d", "alias")), unix.EEXIST)
	wantErrno(t, "link a directory", os.Link(m.path("d"), m.path("dlink")), unix.EPERM)
	if err := os.Remove(m.path("orig")); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, m.path("d", "alias")); st.Nlink != 1 {
		t.Fatalf("nlink after unlink %d", st.Nlink)
	}
	if string(readAll(t, m.path("d", "alias"))) != "changed" {
		t.Fatal("content after unlinking the other name")
	}
}

func TestSymlink(t *testing.T) {
	m := mount(t)
	if err := os.WriteFile(m.path("target"), []byte("T"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", m.path("ln")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(m.path("ln")); err != nil || got != "target" {
		t.Fatalf("readlink: %q %v", got, err)
	}
	st := statOf(t, m.path("ln"))
	if st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Size != int64(len("target")) {
		t.Fatalf("lstat symlink: mode %o size %d", st.Mode, st.Size)
	}
	if string(readAll(t, m.path("ln"))) != "T" {
		t.Fatal("read through symlink")
	}
	long := make([]byte, 4000)
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	if err := os.Symlink(string(long), m.path("long")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(m.path("long")); err != nil || got != string(long) {
		t.Fatalf("long readlink: %d bytes, %v", len(got), err)
	}
	wantErrno(t, "symlink onto existing", os.Symlink("x", m.path("ln")), unix.EEXIST)
	_, err := os.Readlink(m.path("target"))
	wantErrno(t, "readlink of a file", err, unix.EINVAL)
	if err := os.Symlink("dangling", m.path("dang")); err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(m.path("dang"))
	wantErrno(t, "stat dangling", err, unix.ENOENT)
}

func TestMknod(t *testing.T) {
	m := mount(t)
	cases := []struct {
		name string
		mode uint32
		dev  int
	}{
		{"fifo", unix.S_IFIFO | 0o640, 0},
		{"sock", unix.S_IFSOCK | 0o600, 0},
		{"chr", unix.S_IFCHR | 0o600, int(unix.Mkdev(1, 3))},
		{"blk", unix.S_IFBLK | 0o600, int(unix.Mkdev(7, 200))},
		{"reg", unix.S_IFREG | 0o644, 0},
	}
	for _, c := range cases {
		if c.dev != 0 && os.Geteuid() != 0 {
			continue // device nodes need CAP_MKNOD
		}
		if err := unix.Mknod(m.path(c.name), c.mode, c.dev); err != nil {
			t.Fatalf("mknod %s: %v", c.name, err)
		}
		st := statOf(t, m.path(c.name))
		if st.Mode&unix.S_IFMT != c.mode&unix.S_IFMT || st.Mode&0o777 != c.mode&0o777&^umask() {
			t.Errorf("%s: mode %o, want %o", c.name, st.Mode, c.mode)
		}
		if st.Rdev != uint64(c.dev) {
			t.Errorf("%s: rdev %#x, want %#x", c.name, st.Rdev, c.dev)
		}
	}
	if err := unix.Mkfifo(m.path("fifo2"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "mknod existing", unix.Mknod(m.path("fifo"), unix.S_IFIFO|0o600, 0), unix.EEXIST)

	// A FIFO on the mount works as a pipe (the kernel serves it).
	done := make(chan error, 1)
	go func() {
		w, err := os.OpenFile(m.path("fifo"), os.O_WRONLY, 0)
		if err != nil {
			done <- err
			return
		}
		_, err = w.WriteString("through the fifo")
		w.Close()
		done <- err
	}()
	r, err := os.Open(m.path("fifo"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := r.Read(buf)
	r.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "through the fifo" {
		t.Fatalf("fifo read %q", buf[:n])
	}
}
